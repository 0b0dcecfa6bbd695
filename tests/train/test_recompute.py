"""`train --recompute full` (issue 41): one torch.utils.checkpoint per block, non-reentrant (models/transformer.py
run_block), so that `train` runs the layouts `layout` picks with full recomputation.

References: the losses of the same run without recomputation (fp32 on CPU: the recomputed forward runs the same
kernels in the same order, so they are equal to the bit); the activations measured by measure.memory.track_step
(a TorchDispatchMode that sees every storage the forward leaves alive) on the model the trainer built, with and
without; account.memory.per_gpu's prediction of both; the run file the trainer writes, read back by `train --config`.
"""

from __future__ import annotations

import tomllib

import pytest

from train_helpers import SMALL, losses, run_train
from trainledger.train import Trainer, resolve

pytestmark = pytest.mark.usefixtures("one_torch_thread")

RUN = ["--steps", "4", "--checkpoint-every", "4", "--global-batch-size", "4", *SMALL]


def _trainer(tmp_path, token_file, recompute: str) -> Trainer:
    values = {"data": str(token_file), "steps": 2, "batch_size": 4, "seq_len": 64, "eval_every": 0, "plot": False,
              "out_dir": str(tmp_path / recompute), "recompute": recompute}
    return Trainer(resolve(values), quiet=True)


def test_losses_equal_with_and_without_full_recomputation(tmp_path, token_file):
    runs = {}
    for recompute in ("none", "full"):
        out = tmp_path / recompute
        done = run_train("--data", token_file, "--out-dir", out, "--recompute", recompute, *RUN)
        assert done.returncode == 0, done.stderr
        runs[recompute] = losses(out / "metrics.jsonl")
    assert sorted(runs["full"]) == [1, 2, 3, 4]
    assert runs["full"] == runs["none"]             # fp32, one thread: the recomputed forward is the same forward


def test_measured_activations_are_lower_and_as_predicted(tmp_path, token_file):
    """The trainer's own model: what the forward leaves for backward is the block inputs (and the head's part) under
    full recomputation, everything each block saves without it."""
    from trainledger.account.memory.per_gpu import memory_per_gpu
    from trainledger.measure.memory import track_step
    from trainledger.specs.run import Run
    measured, predicted = {}, {}
    for recompute in ("none", "full"):
        trainer = _trainer(tmp_path, token_file, recompute)
        try:
            assert trainer.model.recompute == recompute
            x, y = trainer.train_batches.rows(trainer.train_batches.draw(4), 0, 4, trainer.world.device)
            measured[recompute] = track_step(trainer.model, (x, y)).activations_bytes
            run = Run().with_(batch_size=4, global_batch_size=4, seq_len=64, precision="fp32", recompute=recompute,
                              impl="paper", reserve=0.0, zero=0)
            predicted[recompute] = memory_per_gpu(trainer.spec, None, run)["activations_bytes"]
        finally:
            trainer.release()
    assert measured["full"] < 0.6 * measured["none"], measured
    for recompute in measured:          # the accounting's activations of each (equal here: 8.95 MB and 1.05 MB)
        assert measured[recompute] == pytest.approx(predicted[recompute], rel=0.01), (recompute, measured, predicted)


def test_run_file_records_it_and_train_config_reads_it_back(tmp_path, token_file):
    out = tmp_path / "first"
    done = run_train("--data", token_file, "--out-dir", out, "--recompute", "full", *RUN)
    assert done.returncode == 0, done.stderr
    doc = tomllib.loads((out / "run.toml").read_text())
    assert doc["levers"]["recompute"] == "full" and "recompute" not in doc.get("train", {})
    again = tmp_path / "again"
    done = run_train("--config", out / "run.toml", "--out-dir", again, "--steps", "4")
    assert done.returncode == 0, done.stderr
    assert tomllib.loads((again / "run.toml").read_text())["levers"]["recompute"] == "full"
    assert losses(again / "metrics.jsonl") == losses(out / "metrics.jsonl")


def test_resume_may_switch_it(tmp_path, token_file):
    """Recomputation changes no state: a run checkpointed without it resumes with it, and goes on with the losses
    the same checkpoint resumed without it gives."""
    import shutil
    args = ["--data", token_file, "--global-batch-size", "4", "--checkpoint-every", "2", *SMALL]
    first = tmp_path / "first"
    assert run_train("--out-dir", first, "--steps", "2", *args).returncode == 0
    resumed = {}
    for recompute in ("none", "full"):
        out = tmp_path / recompute
        shutil.copytree(first, out)
        done = run_train("--out-dir", out, "--steps", "4", "--resume", "--recompute", recompute, *args)
        assert done.returncode == 0, done.stderr
        resumed[recompute] = losses(out / "metrics.jsonl")
    assert sorted(resumed["full"]) == [1, 2, 3, 4] and resumed["full"] == resumed["none"]


@pytest.mark.parametrize("argv, words", [
    (["--recompute", "selective"], "--recompute"),
    (["--model", "cruncher", "--recompute", "full"], "not the cruncher"),
])
def test_what_train_does_not_recompute_is_one_line(tmp_path, argv, words):
    done = run_train("--out-dir", tmp_path / "o", "--steps", "20", *argv)
    assert done.returncode == 2 and words in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr
