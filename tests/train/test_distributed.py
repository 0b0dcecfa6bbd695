"""Data parallelism on CPU: 2 gloo processes under torchrun with DDP and FSDP2 reproduce the 1-process losses, and resume.

Ranks draw the same global batch and keep disjoint slices, and gradients are averaged over ranks and
micro-batches, so 2 ranks × 2 micro-batches of 1 sequence must give the losses of 1 process with
batches of 4 — up to the order of floating-point sums (1e-5 relative).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from train_helpers import SMALL, env, losses, train_in_process
from trainledger.train import checkpoint as ckpt

STEPS = 8
BASE = ["--steps", STEPS, "--checkpoint-every", 3, "--batch-size", 4, *SMALL[4:]]


def torchrun(*args, extra_env=None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               "-m", "trainledger.cli.main", "train", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=240, env={**env(), **(extra_env or {})})


@pytest.fixture(scope="module")
def single(token_file, tmp_path_factory):
    """{step: loss} of one process, --batch-size 4, no accumulation."""
    out = tmp_path_factory.mktemp("single")
    capsys = _NoCapture()
    status, _, err = train_in_process(capsys, "--data", token_file, "--out-dir", out, "--seq-len", 16, *BASE)
    assert status == 0, err
    return losses(out / "metrics.jsonl")


class _NoCapture:
    """Stands in for pytest's capsys in a module fixture (output is not checked there)."""

    def readouterr(self):
        return "", ""


@pytest.mark.slow
@pytest.mark.parametrize("parallel, accum", [("ddp", 2), ("fsdp", 1)])
def test_two_ranks_match_one_process_and_resume(token_file, tmp_path, single, parallel, accum):
    args = ["--data", token_file, "--seq-len", 16, *BASE, "--parallel", parallel, "--grad-accum", accum]
    # interrupted at step 5 (a NaN injected there stops every rank), then resumed from the step-3 checkpoint
    out = tmp_path / "run"
    stopped = torchrun(*args, "--out-dir", out, extra_env={"TRAINLEDGER_FAULT_NAN_STEP": "5"})
    assert stopped.returncode != 0 and "loss is nan at step 5" in stopped.stderr
    first = losses(out / "metrics.jsonl")
    assert sorted(first) == [1, 2, 3, 4]
    assert [first[s] for s in range(1, 5)] == pytest.approx([single[s] for s in range(1, 5)], rel=1e-5)
    refs = ckpt.list_checkpoints(out / "checkpoints")
    assert [r.step for r in refs] == [3]
    assert ckpt.verify(refs[0].path) == ("dcp" if parallel == "fsdp" else "full", None)

    resumed = torchrun(*args, "--out-dir", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    got = losses(out / "metrics.jsonl")
    assert sorted(got) == sorted(single)
    assert [got[s] for s in sorted(got)] == pytest.approx([single[s] for s in sorted(single)], rel=1e-5)
