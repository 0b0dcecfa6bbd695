"""Helpers of the train tests: run `trainledger train` in a subprocess and read its losses.

Every run uses the `tiny` preset on short sequences (a few ms per step) and one thread per process, so the
subprocess tests are fast on a 2-core machine and bit-for-bit deterministic between processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


# Flags of the small run the resume tests repeat: ~10 ms per step on one core.
SMALL = ["--seq-len", "16", "--batch-size", "4", "--eval-every", "5", "--eval-batches", "2", "--lr", "3e-3",
         "--no-plot", "--quiet"]


def env() -> dict:
    """The environment of a training subprocess: one thread (deterministic, no oversubscription)."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


def train_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "trainledger.cli.main", "train", *map(str, args)]


def run_train(*args, extra_env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`trainledger train ARGS` in a subprocess; the completed process (stdout, stderr, returncode)."""
    return subprocess.run(train_cmd(*args), capture_output=True, text=True, timeout=timeout,
                          env={**env(), **(extra_env or {})})


def losses(metrics: Path) -> dict[int, float]:
    """{step: loss} from a metrics file, the last record of each step winning."""
    from trainledger.train.metrics import read_metrics
    return {r["step"]: r["loss"] for r in read_metrics(metrics)}


def train_in_process(capsys, *args) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `trainledger train ARGS` run in this process with one torch thread.

    One thread makes the losses bit-identical to a subprocess run with OMP_NUM_THREADS=1.
    """
    import torch
    from trainledger.cli.main import main
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    capsys.readouterr()
    try:
        status = main(["train", *map(str, args)])
    finally:
        torch.set_num_threads(threads)
    out, err = capsys.readouterr()
    return status, out, err
