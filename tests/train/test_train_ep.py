"""`train --ep` under torchrun (gloo, CPU): tiny-moe's experts split over 2 ranks (DDP) and over 2 of 4 ranks (FSDP2,
each expert held twice) give the losses of one process, and the bytes each rank sends equal the prediction."""

from __future__ import annotations

import subprocess
import sys

import pytest

from train_helpers import env, losses, train_in_process
from trainledger.train.metrics import read_metrics

STEPS = 10
BASE = ["--model", "tiny-moe", "--steps", STEPS, "--global-batch-size", 4, "--seq-len", 32, "--lr", "3e-3",
        "--eval-every", 0, "--no-plot", "--quiet", "--threads", 1]
LOSS_ABS = 1e-5
LOSS_ALLREDUCE_BYTES = 4      # the trainer's loss, averaged over the ranks each step (fp32): outside the prediction


def torchrun(*args, nproc: int) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               "-m", "trainledger.cli.main", "train", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env())


class _NoCapture:
    def readouterr(self):
        return "", ""


@pytest.fixture(scope="module")
def single(token_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("single-moe")
    status, _, err = train_in_process(_NoCapture(), "--data", token_file, "--out-dir", out, *BASE)
    assert status == 0, err
    return losses(out / "metrics.jsonl")


@pytest.mark.slow
@pytest.mark.parametrize("layout, nproc", [(["--parallel", "ddp", "--ep", 2], 2), (["--parallel", "fsdp", "--ep", 2], 4)],
                         ids=["ddp-ep2", "fsdp-ep2-4procs"])
def test_ep_losses_equal_one_process(token_file, tmp_path, single, layout, nproc):
    out = tmp_path / "run"
    done = torchrun("--data", token_file, *BASE, *layout, "--out-dir", out, nproc=nproc)
    assert done.returncode == 0, done.stderr[-3000:]
    got = losses(out / "metrics.jsonl")
    assert sorted(got) == list(range(1, STEPS + 1))
    for step in got:
        assert got[step] == pytest.approx(single[step], abs=LOSS_ABS), step
    for record in read_metrics(out / "metrics.jsonl"):     # the learned router: off by its skew only
        assert record["comm_bytes"] == pytest.approx(record["predicted_comm_bytes"], rel=0.02)


@pytest.mark.slow
def test_ep_bytes_equal_prediction_under_forced_balance(token_file, tmp_path):
    out = tmp_path / "run"
    done = torchrun("--data", token_file, *BASE[:3], 3, *BASE[4:], "--parallel", "ddp", "--ep", 2, "--force-balance",
                    "--out-dir", out, nproc=2)
    assert done.returncode == 0, done.stderr[-3000:]
    for record in read_metrics(out / "metrics.jsonl"):
        assert record["comm_bytes"] == record["predicted_comm_bytes"] + LOSS_ALLREDUCE_BYTES


def test_ep_errors_are_one_line(token_file, tmp_path, capsys):
    """--ep 3 with 8 experts, --ep on a dense model, --ep without torchrun: exit 2, one line naming the flag."""
    base = ["--data", token_file, "--out-dir", tmp_path, "--steps", 1, "--global-batch-size", 6, "--seq-len", 32,
            "--no-plot", "--quiet"]
    for extra, words in ((["--model", "tiny-moe", "--ep", 3], "--ep 3 must divide the 8 experts of 'tiny-moe'"),
                         (["--model", "tiny", "--ep", 2], "--ep 2 needs a mixture-of-experts model"),
                         (["--model", "tiny-moe", "--ep", 2], "--ep 2 needs 2 processes or more")):
        status, _, err = train_in_process(capsys, *base, *extra)
        lines = [line for line in err.splitlines() if line.strip()]
        assert status == 2 and "Traceback" not in err, err
        assert any(words in line for line in lines) and sum(line.startswith("error:") for line in lines) == 1, err
