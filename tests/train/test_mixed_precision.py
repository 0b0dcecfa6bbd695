"""mixed-bf16 / mixed-fp16: 16-bit weights and grads, an fp32 master copy that the optimizer steps (ZeRO's
2 + 2 + 12 bytes per parameter with Adam), loss scaling for fp16; checkpoints hold the master copy."""

from __future__ import annotations

import pytest
import torch

from trainledger.train import Trainer, resolve
from trainledger.train import checkpoint as ckpt
from trainledger.train.metrics import read_metrics

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SIXTEEN_BIT = {"mixed-bf16": torch.bfloat16, "mixed-fp16": torch.float16}


def trainer(tmp_path, token_file, precision, **flags):
    values = {"data": str(token_file), "steps": 6, "batch_size": 4, "seq_len": 16, "eval_every": 3, "eval_batches": 2,
              "checkpoint_every": 3, "plot": False, "lr": 1e-3, "out_dir": str(tmp_path), "precision": precision,
              **flags}
    return Trainer(resolve(values), quiet=True)


@pytest.mark.parametrize("precision", ["mixed-bf16", "mixed-fp16"])
def test_mixed_precision_trains_on_a_master_copy_and_resumes_exactly(tmp_path, token_file, precision, monkeypatch):
    run = trainer(tmp_path / "ref", token_file, precision)
    summary = run.train()
    records = read_metrics(tmp_path / "ref" / "metrics.jsonl")
    assert summary["steps"] == 6 and all(r["loss"] is not None and r["loss"] == r["loss"] for r in records)
    assert {p.dtype for p in run.model.parameters()} == {SIXTEEN_BIT[precision]}
    assert {p.dtype for p in run.master.params} == {torch.float32}
    states = [s for group in run.optimizer.state.values() for s in group.values() if torch.is_tensor(s) and s.ndim]
    assert states and {s.dtype for s in states} == {torch.float32}
    for p, master in zip(run.model.parameters(), run.master.params):   # the model is the master, rounded
        assert torch.equal(p, master.to(p.dtype))
    assert any(not torch.equal(master, p.float()) for p, master in zip(run.model.parameters(), run.master.params))
    assert (run.scaler is not None) == (precision == "mixed-fp16")

    refs = ckpt.list_checkpoints(tmp_path / "ref" / "checkpoints")
    state = ckpt.load_trainer_state(refs[-1].path)
    assert {t.dtype for t in state["master_params"]} == {torch.float32}
    assert {t.dtype for t in state["model"].values()} == {SIXTEEN_BIT[precision]}

    # the same run stopped at step 4 (a NaN injected), resumed from its step-3 checkpoint: the same losses
    cut = tmp_path / "cut"
    monkeypatch.setenv("TRAINLEDGER_FAULT_NAN_STEP", "4")
    with pytest.raises(Exception, match="loss is nan at step 4"):
        trainer(cut, token_file, precision).train()
    monkeypatch.delenv("TRAINLEDGER_FAULT_NAN_STEP")
    resumed = trainer(cut, token_file, precision, resume=True)
    resumed.train()
    again = {r["step"]: r["loss"] for r in read_metrics(cut / "metrics.jsonl")}
    assert [again[s] for s in range(1, 7)] == [r["loss"] for r in records]
    for master, other in zip(run.master.params, resumed.master.params):
        assert torch.equal(master, other)


def test_master_copy_keeps_updates_that_16_bit_weights_round_away(tmp_path, token_file):
    """With a learning rate far below bf16's resolution (8 mantissa bits: steps below ~|w|/256 round to nothing),
    pure bf16 weights do not move while mixed-bf16's fp32 master does, and its losses follow fp32's."""
    final, fp32_init = {}, None
    for precision in ("fp32", "bf16", "mixed-bf16"):
        run = trainer(tmp_path / precision, token_file, precision, steps=3, lr=1e-5, min_lr=1e-5, warmup_steps=0,
                      eval_every=0, optimizer="sgd", weight_decay=0.0)
        start = [p.detach().float().clone() for p in run.model.parameters()]
        fp32_init = fp32_init or start                       # the same seed: the master starts from fp32's init
        start = fp32_init if precision == "mixed-bf16" else start
        run.train()
        params = run.master.params if run.master else list(run.model.parameters())
        final[precision] = sum(float((p.detach().float() - s).abs().sum()) for p, s in zip(params, start))
    assert final["bf16"] < 0.1 * final["fp32"]               # bf16 weights: most updates round away
    assert final["mixed-bf16"] == pytest.approx(final["fp32"], rel=0.1)


def test_mixed_precision_refuses_sharded_layouts(tmp_path):
    from trainledger.errors import TrainledgerError
    with pytest.raises(TrainledgerError, match="one process or with --parallel ddp"):
        resolve({"precision": "mixed-bf16", "parallel": "fsdp", "out_dir": str(tmp_path)})
