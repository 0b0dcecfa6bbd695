"""Expert parallelism under torchrun (gloo, 2 CPU processes): the same losses as one process over 10 steps, and the
all-to-all bytes measured equal to account/time/expert_parallel's prediction (tests/train/ep_driver.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from train_helpers import env
from trainledger.errors import TrainledgerError
from trainledger.specs import get_model
from trainledger.train.expert_parallel import check_expert_parallel

DRIVER = Path(__file__).with_name("ep_driver.py")


def run_driver(out: Path, nproc: int = 2) -> list[dict]:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", str(DRIVER),
               str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env())
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(path.read_text()) for path in sorted(out.glob("rank*.json"))]


def test_ep2_losses_equal_one_process_and_bytes_equal_prediction(tmp_path):
    ranks = run_driver(tmp_path)
    assert len(ranks) == 2
    for r in ranks:
        assert len(r["split"]) == 10
        for one, split in zip(r["full"], r["split"]):
            assert split == pytest.approx(one, abs=1e-5)
        assert r["measured_all_to_all_bytes"] > 0
        assert r["measured_all_to_all_bytes"] == r["predicted_all_to_all_bytes"]


def test_ep_that_does_not_divide_the_experts_is_an_error():
    spec = get_model("mixtral-8x7b")
    with pytest.raises(TrainledgerError, match="--ep 3 must divide the 8 experts"):
        check_expert_parallel(spec, 3, 3)
