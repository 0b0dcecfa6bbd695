"""The training loop in process: accumulation, schedule, precision recipes, the Cruncher task, metrics vs account/."""

from __future__ import annotations

import pytest
import torch

from trainledger.account.counting.flops import flops_per_step
from trainledger.optim import cosine_with_warmup
from trainledger.specs import get_model
from trainledger.train import Trainer, resolve
from trainledger.train import checkpoint as ckpt
from trainledger.train.metrics import read_metrics


def run(tmp_path, token_file=None, **flags):
    values = {"steps": 6, "batch_size": 4, "seq_len": 16, "eval_every": 3, "eval_batches": 2, "plot": False,
              "out_dir": str(tmp_path), **flags}
    if token_file is not None:
        values["data"] = str(token_file)
    summary = Trainer(resolve(values), quiet=True).train()
    return summary, read_metrics(tmp_path / "metrics.jsonl")


def test_gradient_accumulation_gives_the_losses_of_the_full_batch(tmp_path, token_file):
    _, whole = run(tmp_path / "a", token_file, batch_size=8)
    _, accumulated = run(tmp_path / "b", token_file, batch_size=8, grad_accum=4)
    assert [r["loss"] for r in accumulated] == pytest.approx([r["loss"] for r in whole], rel=1e-5)
    assert [r["grad_norm"] for r in accumulated] == pytest.approx([r["grad_norm"] for r in whole], rel=1e-4)


def test_batch_not_divisible_by_accumulation_is_an_error(tmp_path, token_file):
    from trainledger.errors import TrainledgerError
    with pytest.raises(TrainledgerError, match="--global-batch-size 6 is not divisible by --grad-accum 4"):
        run(tmp_path, token_file, batch_size=6, grad_accum=4)


def test_records_carry_units_and_agree_with_account(tmp_path, token_file):
    summary, records = run(tmp_path, token_file, steps=8, warmup_steps=2, lr=1e-3, min_lr=1e-4)
    assert [r["step"] for r in records] == list(range(1, 9))
    step_flops = flops_per_step(get_model("tiny"), 4, 16)["train_flops_per_step"]
    for r in records:
        assert r["tokens"] == r["step"] * 4 * 16
        assert r["tokens_per_s"] == pytest.approx(64 / r["step_time_s"])
        assert r["flops_per_s"] == pytest.approx(step_flops / r["step_time_s"])
        assert r["lr"] == pytest.approx(cosine_with_warmup(r["step"] - 1, 1e-3, 1e-4, 2, 8))  # lr used by this step
        assert r["grad_norm"] > 0
        if r["mfu"] is not None:
            assert 0 < r["mfu"] < 1
    assert [r["step"] for r in records if "eval_loss" in r] == [3, 6, 8]
    assert summary["steps"] == 8 and summary["tokens"] == 8 * 64


def test_grad_clip_bounds_the_update(tmp_path, token_file):
    _, clipped = run(tmp_path / "a", token_file, grad_clip=1e-3, optimizer="sgd", lr=1.0, min_lr=0.0, warmup_steps=0)
    _, free = run(tmp_path / "b", token_file, grad_clip=None, optimizer="sgd", lr=1.0, min_lr=0.0, warmup_steps=0)
    assert clipped[0]["loss"] == free[0]["loss"]              # same init, same first batch
    # both runs see the same second batch: after an unclipped lr=1 SGD step the model has learned (the byte
    # distribution of source code), after a 1e-3-norm step it has barely moved
    assert free[1]["loss"] < clipped[1]["loss"] - 0.2


@pytest.mark.parametrize("precision", ["amp-bf16", "amp-fp16", "bf16"])
def test_precision_recipes_train_and_checkpoint(tmp_path, token_file, precision):
    summary, records = run(tmp_path, token_file, precision=precision, steps=4, lr=1e-3)
    assert all(r["loss"] == r["loss"] for r in records)       # finite, not NaN
    state = ckpt.load_trainer_state(ckpt.latest_good(tmp_path / "checkpoints")[0].path)
    dtypes = {t.dtype for t in state["model"].values()}
    assert dtypes == ({torch.bfloat16} if precision == "bf16" else {torch.float32})
    assert (state["scaler"] is not None) == (precision == "amp-fp16")
    if precision == "amp-fp16":
        assert state["scaler"]["scale"] > 0


def test_cruncher_learns_the_lectures_linear_function(tmp_path):
    """CS336 Lecture 2 train_loop: y = x · (0, 1, ..., D−1); a deep linear Cruncher fits it."""
    summary, records = run(tmp_path, model="cruncher", steps=150, batch_size=32, optimizer="adam", lr=0.05,
                           min_lr=0.005, warmup_steps=5, eval_every=50, weight_decay=0.0)
    assert records[-1]["tokens"] == 150 * 32            # one "token" per regression sample
    assert records[-1]["eval_loss"] < 0.01 * records[0]["loss"]


def test_resume_in_process_continues_exactly(tmp_path, token_file, monkeypatch):
    _, reference = run(tmp_path / "ref", token_file, steps=8, checkpoint_every=2)
    monkeypatch.setenv("TRAINLEDGER_FAULT_NAN_STEP", "6")
    with pytest.raises(Exception, match="loss is nan at step 6"):
        run(tmp_path / "cut", token_file, steps=8, checkpoint_every=2)
    monkeypatch.delenv("TRAINLEDGER_FAULT_NAN_STEP")
    _, resumed = run(tmp_path / "cut", token_file, steps=8, checkpoint_every=2, resume=True)
    assert [r["loss"] for r in resumed] == [r["loss"] for r in reference]
    assert [r["eval_loss"] for r in resumed if "eval_loss" in r] == [r["eval_loss"] for r in reference if "eval_loss" in r]


def test_amp_fp16_scaler_skips_a_step_with_inf_gradients(tmp_path, token_file, monkeypatch):
    """GradScaler path: step 2's gradients are forced to Inf (loss finite); that step is skipped, weights unchanged,
    the scale halved (PyTorch AMP docs: GradScaler.step skips optimizer.step when unscaled grads hold Inf/NaN)."""
    from trainledger.train.loop import Trainer as LoopTrainer
    original = LoopTrainer._loss

    def loss_with_inf_grads_at_step_2(self, x, y):
        loss = original(self, x, y)
        if self.step + 1 == 2:
            loss.register_hook(lambda grad: grad * float("inf"))
        return loss

    monkeypatch.setattr(LoopTrainer, "_loss", loss_with_inf_grads_at_step_2)
    summary, records = run(tmp_path, token_file, precision="amp-fp16", steps=4, lr=1e-3, warmup_steps=0,
                           checkpoint_every=1, keep_checkpoints=10, eval_every=0)
    assert summary["steps"] == 4                                   # the run does not stop
    assert [r.get("skipped", False) for r in records] == [False, True, False, False]
    assert all(r["loss"] is not None and r["loss"] == r["loss"] for r in records)   # the losses stay finite
    states = {ref.step: ckpt.load_trainer_state(ref.path) for ref in ckpt.list_checkpoints(tmp_path / "checkpoints")}
    assert sorted(states) == [1, 2, 3, 4]
    for name, tensor in states[1]["model"].items():               # step 2 changed nothing
        assert torch.equal(tensor, states[2]["model"][name]), name
    assert any(not torch.equal(states[2]["model"][n], states[3]["model"][n]) for n in states[2]["model"])
    assert states[2]["scaler"]["scale"] == pytest.approx(states[1]["scaler"]["scale"] / 2)
