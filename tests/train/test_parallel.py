"""Tensor, sequence and pipeline parallelism on CPU: gloo processes under torchrun reproduce the 1-process losses.

Every rank of a data-parallel replica sees the same slice of the global batch, and the split model computes
the same function, so the losses of --tp 2, --tp 2 --sp, --pp 2 and --parallel fsdp --tp 2 (4 processes)
must equal those of one process at the same global batch up to the order of floating-point sums. Each
launch also checks the per-step `comm_bytes` (counted by a dispatch mode) against `predicted_comm_bytes`
(account/), and the TP launches check kill-and-resume (exact) and a resume on another layout (DCP reshards).
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from train_helpers import env, losses, train_in_process
from trainledger.train import checkpoint as ckpt
from trainledger.train.metrics import read_metrics

STEPS = 12
BASE = ["--steps", STEPS, "--checkpoint-every", 3, "--global-batch-size", 4, "--seq-len", 16, "--eval-every", 6,
        "--eval-batches", 2, "--lr", "3e-3", "--no-plot", "--quiet"]
REL = 1e-4        # the bound on the relative loss difference (fp32)
COMM_REL = 0.10   # measured vs predicted bytes


def torchrun(*args, nproc: int = 2, extra_env=None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               "-m", "trainledger.cli.main", "train", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env={**env(), **(extra_env or {})})


class _NoCapture:
    def readouterr(self):
        return "", ""


@pytest.fixture(scope="module")
def single(token_file, tmp_path_factory):
    """The metrics records of one process at the same global batch, by step."""
    out = tmp_path_factory.mktemp("single")
    status, _, err = train_in_process(_NoCapture(), "--data", token_file, "--out-dir", out, *BASE)
    assert status == 0, err
    return {r["step"]: r for r in read_metrics(out / "metrics.jsonl")}


def assert_same_losses(got: dict, single: dict, steps=range(1, STEPS + 1)) -> None:
    assert sorted(got) == list(steps)
    for step in steps:
        assert got[step] == pytest.approx(single[step]["loss"], rel=REL), f"step {step}"


def assert_comm_predicted(metrics, steady_only: bool = False) -> None:
    """Every record within COMM_REL; `steady_only`: leave out the first step and the steps after an evaluation."""
    records = read_metrics(metrics)
    if steady_only:
        after_eval = {r["step"] + 1 for r in records if "eval_loss" in r}
        records = [r for r in records if r["step"] > 1 and r["step"] not in after_eval]
    assert records and all("comm_bytes" in r and "predicted_comm_bytes" in r for r in records)
    for r in records:
        assert r["comm_bytes"] > 0
        assert abs(r["comm_bytes"] - r["predicted_comm_bytes"]) <= COMM_REL * r["predicted_comm_bytes"], r


def run_ok(*args, **kwargs) -> subprocess.CompletedProcess:
    done = torchrun(*args, **kwargs)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_tp_matches_one_process_resumes_exactly_and_reshards(token_file, tmp_path, single):
    args = ["--data", token_file, *BASE, "--tp", 2]
    whole = tmp_path / "whole"
    run_ok(*args, "--out-dir", whole)
    reference = losses(whole / "metrics.jsonl")
    assert_same_losses(reference, single)
    assert_comm_predicted(whole / "metrics.jsonl")
    evals = {r["step"]: r["eval_loss"] for r in read_metrics(whole / "metrics.jsonl") if "eval_loss" in r}
    assert evals == pytest.approx({s: single[s]["eval_loss"] for s in evals}, rel=REL)

    # killed at step 5 (a NaN injected there stops every rank), resumed from the step-3 DCP checkpoint
    out = tmp_path / "run"
    stopped = torchrun(*args, "--out-dir", out, extra_env={"TRAINLEDGER_FAULT_NAN_STEP": "5"})
    assert stopped.returncode != 0 and "loss is nan at step 5" in stopped.stderr
    refs = ckpt.list_checkpoints(out / "checkpoints")
    assert [r.step for r in refs] == [3] and ckpt.verify(refs[0].path) == ("dcp", None)
    other = tmp_path / "other"
    shutil.copytree(out, other)
    run_ok(*args, "--out-dir", out, "--resume")
    resumed = losses(out / "metrics.jsonl")
    assert resumed == reference           # same layout: bit-identical

    # the same checkpoint under FSDP on 2 ranks: DCP reshards the TP shards
    run_ok("--data", token_file, *BASE, "--parallel", "fsdp", "--out-dir", other, "--resume")
    assert_same_losses(losses(other / "metrics.jsonl"), single)


@pytest.mark.slow
@pytest.mark.parametrize("layout, nproc, steady", [(["--tp", 2, "--sp"], 2, False), (["--pp", 2, "--grad-accum", 2], 2, False),
                                                   (["--parallel", "fsdp", "--tp", 2], 4, False),
                                                   (["--parallel", "fsdp", "--pp", 2, "--grad-accum", 2], 4, True)],
                         ids=["tp2-sp", "pp2", "fsdp2-tp2", "fsdp2-pp2"])
def test_layout_matches_one_process(token_file, tmp_path, single, layout, nproc, steady):
    """PP × FSDP's comm is checked on steady steps only: its first step and the step after an evaluation
    gather more than the steady state the prediction describes (a documented gap, docs/train.md)."""
    out = tmp_path / "run"
    run_ok("--data", token_file, *BASE, *layout, "--out-dir", out, nproc=nproc)
    assert_same_losses(losses(out / "metrics.jsonl"), single)
    assert_comm_predicted(out / "metrics.jsonl", steady)
    evals = {r["step"]: r["eval_loss"] for r in read_metrics(out / "metrics.jsonl") if "eval_loss" in r}
    assert evals == pytest.approx({s: single[s]["eval_loss"] for s in evals}, rel=REL)


@pytest.mark.slow
@pytest.mark.parametrize("layout", [["--parallel", "ddp", "--grad-accum", 2], ["--parallel", "fsdp"]], ids=["ddp", "fsdp"])
def test_data_parallel_comm_bytes_match_prediction(token_file, tmp_path, layout):
    out = tmp_path / "run"
    run_ok("--data", token_file, *BASE[2:], "--steps", 2, *layout, "--out-dir", out)
    assert_comm_predicted(out / "metrics.jsonl")


def test_layout_errors_are_one_line(token_file, tmp_path, capsys):
    status, _, err = train_in_process(capsys, "--data", token_file, "--out-dir", tmp_path, *BASE, "--sp")
    assert status == 2 and "--sp needs --tp 2" in err and "Traceback" not in err
    status, _, err = train_in_process(capsys, "--data", token_file, "--out-dir", tmp_path, *BASE, "--tp", 2)
    assert status == 2 and "torchrun --nproc_per_node 2" in err


def test_check_layout():
    from trainledger.errors import TrainledgerError
    from trainledger.train.distributed import check_layout
    check_layout("fsdp", 4, 2, 1)
    check_layout("none", 2, 2, 1)
    check_layout("fsdp", 4, 1, 2)
    for args, words in [(("none", 4, 2, 1), "--parallel is none"), (("ddp", 4, 2, 1), "needs --parallel fsdp"),
                        (("none", 3, 2, 1), "does not divide"), (("ddp", 4, 1, 2), "needs --parallel fsdp"),
                        (("fsdp", 4, 2, 2), "--pp with --tp")]:
        with pytest.raises(TrainledgerError, match=words):
            check_layout(*args)


def test_pipeline_stages_balance_layer_flops():
    from trainledger.specs import get_model
    from trainledger.train.pipeline import stage_layers
    tiny = get_model("tiny")
    assert stage_layers(tiny, 16, 2) == [range(0, 2), range(2, 4)]
    assert [len(r) for r in stage_layers(tiny, 16, 4)] == [1, 1, 1, 1]
    gpt2 = get_model("gpt2")          # its 50257-row head costs ~1.3 blocks: the last stage takes fewer blocks
    split = stage_layers(gpt2, 1024, 4)
    assert sum(len(r) for r in split) == 12 and len(split[-1]) < len(split[0])


@pytest.mark.slow
def test_measure_comm_under_autocast(tmp_path):
    """`measure --comm`: one TP+SP step under amp-bf16 (16-bit row-parallel outputs, fp32 residual stream)."""
    import json
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
               "trainledger.cli.main", "measure", "--model", "tiny", "--comm", "--tp", "2", "--sp", "--batch-size", "2",
               "--seq-len", "32", "--precision", "amp-bf16", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env())
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout[done.stdout.index("{"):])
    assert [r["rank"] for r in result["ranks"]] == [0, 1]
    for r in result["ranks"]:
        assert r["calls"]["all_gather"] > 0 and r["calls"]["reduce_scatter"] > 0
        assert r["comm_bytes"] == pytest.approx(r["predicted_comm_bytes"], rel=COMM_REL)


def test_trainer_comm_prediction_per_stage_and_dtype():
    from trainledger.account.time.trainer_comm import trainer_bytes_sent
    from trainledger.specs import get_model
    from trainledger.specs.run import Run
    tiny = get_model("tiny")
    run = Run().with_(batch_size=4, seq_len=16, precision="fp32")
    hidden = 4 * 16 * 128 * 4                       # one micro-batch's fp32 hidden states, bytes
    first, last = (trainer_bytes_sent(tiny, run.with_(pp=2), micro_batches=2, pp_rank=r) for r in (0, 1))
    tied = 256 * 128 * 4                            # the tied embedding's gradient, all-reduced over 2 stages
    assert first["total"] == last["total"] == 2 * hidden + tied
    fp32, amp, bf16 = (trainer_bytes_sent(tiny, run.with_(tp=2, precision=p)) for p in ("fp32", "amp-bf16", "bf16"))
    forward = 2 * tiny.n_layers * hidden            # the row-parallel outputs' all-reduces, 16-bit under autocast
    assert fp32["total"] - amp["total"] == pytest.approx(forward / 2)
    assert bf16["total"] < amp["total"]
    once = trainer_bytes_sent(tiny, run.with_(dp=2, zero=3), micro_batches=2)["dp_comm"]
    each = trainer_bytes_sent(tiny, run.with_(dp=2, zero=3), micro_batches=1)["dp_comm"]
    from trainledger.account.counting.params import n_params
    reduce_scatter = n_params(tiny) * 4 / 2         # fp32 gradients, (n-1)/n of them sent, n = 2
    assert once == pytest.approx(2 * each - reduce_scatter)   # gathers per micro-batch, reduce-scatter once
