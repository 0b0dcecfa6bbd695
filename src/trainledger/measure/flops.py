"""Measured FLOPs: torch's FlopCounterMode plus the attention kernels it misses, split forward/backward.

`torch.utils.flop_counter.FlopCounterMode` counts matmuls (mm, addmm, bmm, baddbmm, convolutions) and
the CUDA SDPA kernels, 2·m·k·n per matmul, but counts 0 for PyTorch's CPU flash-attention kernel
(`aten._scaled_dot_product_flash_attention_for_cpu` and its backward) — which is what SDPA runs on CPU
and under FakeTensorMode. `flop_formulas()` adds them with torch's own SDPA formula (full T×T, grouped-query
heads broadcast: 4·B·H·T·T·dh forward, the PaLM convention), and counts SDPA backward as model FLOPs
(2 × forward); torch's own backward formula adds the QKᵀ that flash kernels recompute (hardware FLOPs,
`hardware=True`). `aten._grouped_mm` (MoE experts, transformers' grouped_mm path) is counted as 2·K per output
element (torch counts 0). On the meta device SDPA falls back to its math path (explicit bmm), counted by torch.

Everything here works on real tensors, on the meta device and under FakeTensorMode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch.utils import flop_counter
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten


def _sdpa_forward(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """FLOPs of SDPA forward: QKᵀ and A·V over the full T×T, 4·B·H·T·T·dh (torch's sdpa_flop_count)."""
    return flop_counter.sdpa_flop_count(query_shape, key_shape, value_shape)


def _sdpa_backward_hardware(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """FLOPs a flash/efficient SDPA backward kernel runs: QKᵀ recomputed + 4 gradient matmuls (2.5× forward)."""
    return flop_counter.sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def _sdpa_backward_model(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """Model FLOPs of SDPA backward: the 4 gradient matmuls only, 2× forward (recomputing QKᵀ is hardware FLOPs)."""
    b, h_q, s_q, d_q = query_shape
    recompute = 2 * b * h_q * s_q * d_q * key_shape[2]
    return _sdpa_backward_hardware(grad_out_shape, query_shape, key_shape, value_shape) - recompute


def _grouped_mm(mat_a_shape, mat_b_shape, *args, out_shape=None, **kwargs) -> int:
    """FLOPs of aten._grouped_mm (the MoE experts of transformers' grouped_mm path), which torch counts as 0.

    Each row of the output is one group's matmul: 2·K·(out elements) with K = mat_a's last dim, the contracted
    one ((M, K) × (G, K, N) -> (M, N); (G, M, K) × (G, K, N) -> (G, M, N); (G, M, K) × (K, N) -> (M, N)). The weight
    gradient (K, M) × (M, N) -> (G, K, N), split along M by `offs`, contracts M once overall: 2·K·M·N.
    """
    if len(mat_a_shape) == 2 and len(mat_b_shape) == 2:
        return 2 * mat_a_shape[0] * mat_a_shape[1] * mat_b_shape[1]
    return 2 * mat_a_shape[-1] * math.prod(int(size) for size in out_shape)


_FORWARD = ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_fused_attention_overrideable")
_BACKWARD = ("_scaled_dot_product_flash_attention_for_cpu_backward",
             "_scaled_dot_product_fused_attention_overrideable_backward",
             "_scaled_dot_product_flash_attention_backward", "_scaled_dot_product_efficient_attention_backward",
             "_scaled_dot_product_cudnn_attention_backward")


def flop_formulas(hardware: bool = False) -> dict:
    """custom_mapping for FlopCounterMode: CPU flash attention (which torch counts as 0) and SDPA backward.

    hardware=False (model FLOPs, the DESIGN convention): SDPA backward = 2 × forward.
    hardware=True: torch's count, which includes the QKᵀ that flash kernels recompute in backward.
    """
    formulas = {aten._grouped_mm: _grouped_mm} if hasattr(aten, "_grouped_mm") else {}
    for name in _FORWARD + _BACKWARD:
        packet = getattr(aten, name, None)
        if packet is None:
            continue
        if name in _FORWARD:
            formulas[packet] = _sdpa_forward
        else:
            formulas[packet] = _sdpa_backward_hardware if hardware else _sdpa_backward_model
    return formulas


def flop_counter_mode(hardware: bool = False) -> flop_counter.FlopCounterMode:
    """A FlopCounterMode that also counts CPU flash attention (no printing, module depth unlimited)."""
    return flop_counter.FlopCounterMode(display=False, depth=None, custom_mapping=flop_formulas(hardware))


class OpFlopCounter(TorchDispatchMode):
    """Total FLOPs (`total`) of the ops run while active, by torch's formulas + `flop_formulas()`; no module hooks.

    Lighter than FlopCounterMode (no per-module breakdown) and safe around torch.utils.checkpoint in
    backward, where FlopCounterMode's module hooks keep recomputed tensors alive.
    """

    def __init__(self, hardware: bool = False):
        super().__init__()
        extra = {k: flop_counter.shape_wrapper(v) for k, v in flop_formulas(hardware).items()}
        self.registry = {**flop_counter.flop_registry, **extra}
        self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = self.registry.get(func._overloadpacket)
        if formula is not None:
            self.total += int(formula(*args, **kwargs, out_val=out))
        return out


@dataclass
class FlopReport:
    """FLOPs counted while a function ran: `total` (FLOPs), `by_op` (aten op name -> FLOPs), `by_module`."""

    total: int = 0
    by_op: dict[str, int] = field(default_factory=dict)
    by_module: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_counter(cls, counter: flop_counter.FlopCounterMode) -> "FlopReport":
        counts = counter.get_flop_counts()
        by_op: dict[str, int] = {}
        for op, n in counts.get("Global", {}).items():
            key = str(getattr(op, "__name__", op)).split(".")[0]
            by_op[key] = by_op.get(key, 0) + int(n)
        by_module = {name: int(sum(ops.values())) for name, ops in counts.items() if name != "Global"}
        return cls(total=int(counter.get_total_flops()), by_op=by_op, by_module=by_module)

    def to_dict(self) -> dict:
        return {"total": self.total, "by_op": dict(self.by_op), "by_module": dict(self.by_module)}


def count_flops(fn, *args, hardware: bool = False, **kwargs) -> tuple[object, FlopReport]:
    """(fn's result, FlopReport of the FLOPs it ran). Counts matmuls + SDPA: 2·m·k·n each (model FLOPs)."""
    counter = flop_counter_mode(hardware)
    with counter:
        result = fn(*args, **kwargs)
    return result, FlopReport.from_counter(counter)


@dataclass
class StepFlops:
    """Forward and backward FLOPs of one training step, counted under two separate counters."""

    forward: FlopReport
    backward: FlopReport

    @property
    def train(self) -> int:
        """Forward + backward FLOPs (the optimizer's elementwise update is not a matmul: 0 by convention)."""
        return self.forward.total + self.backward.total

    def to_dict(self) -> dict:
        return {"forward_flops": self.forward.total, "backward_flops": self.backward.total,
                "train_flops": self.train, "forward": self.forward.to_dict(), "backward": self.backward.to_dict()}


def count_step_flops(forward_fn, backward_fn=None, hardware: bool = False) -> StepFlops:
    """StepFlops of `loss = forward_fn()` then `backward_fn(loss)` (default: loss.backward()).

    Forward is counted under one FlopCounterMode, backward under another, so the two never mix.
    """
    loss, forward = count_flops(forward_fn, hardware=hardware)
    _, backward = count_flops(backward_fn or (lambda value: value.backward()), loss, hardware=hardware)
    return StepFlops(forward=forward, backward=backward)
