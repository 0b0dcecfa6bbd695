"""Helpers shared by the optimizers: gather a group's parameters with gradients into per-(device, dtype) lists.

torch._foreach_* kernels take lists of tensors that share a device and dtype; one call updates every tensor of
the list (on CUDA in a handful of kernel launches instead of one per parameter).
"""

from __future__ import annotations

from collections import defaultdict

import torch

from trainledger.errors import TrainledgerError


def grouped_params(group: dict) -> list[list[torch.Tensor]]:
    """Lists of the group's parameters that have a gradient, one list per (device, dtype, DTensor mesh).

    Plain tensors and DTensors (tensor parallelism, FSDP2), or DTensors on different meshes (FSDP over "dp"
    beside TP over ("dp", "tp")), cannot share a foreach call: each gets its own list.
    """
    buckets: dict = defaultdict(list)
    for p in group["params"]:
        if p.grad is None:
            continue
        if p.grad.is_sparse:
            raise TrainledgerError("trainledger optimizers do not support sparse gradients")
        buckets[(p.device, p.dtype, getattr(p, "device_mesh", None))].append(p)
    return list(buckets.values())


def directions(params: list[torch.Tensor], group: dict) -> tuple[list[torch.Tensor], bool]:
    """(g, owned): the gradients, negated when group['maximize']; owned is True when g is a fresh copy
    (so it may be modified in place without touching p.grad)."""
    grads = [p.grad for p in params]
    if group.get("maximize", False):
        return list(torch._foreach_neg(grads)), True
    return grads, False


def add_l2(grads: list[torch.Tensor], owned: bool, params: list[torch.Tensor], weight_decay: float):
    """(g + weight_decay·p, owned): coupled (L2) weight decay folded into the gradient."""
    if weight_decay == 0:
        return grads, owned
    if owned:
        torch._foreach_add_(grads, params, alpha=weight_decay)
        return grads, True
    return list(torch._foreach_add(grads, params, alpha=weight_decay)), True


def advance_steps(states: list[dict]) -> list[float]:
    """The new step counts (1 on the first update): increments each state's 0-dim float32 'step' tensor.

    'step' is stored as a tensor, as torch.optim does, so state_dict()/load_state_dict() carry it and the
    two libraries' checkpoints are interchangeable.
    """
    steps = [s["step"] for s in states]
    torch._foreach_add_(steps, 1.0)
    return [float(t) for t in steps]


def check_hyperparameters(**values) -> None:
    """Raises TrainledgerError for a negative learning rate, eps, weight decay or a beta outside [0, 1)."""
    for name, value in values.items():
        if name == "betas":
            for i, beta in enumerate(value):
                if not 0.0 <= beta < 1.0:
                    raise TrainledgerError(f"betas[{i}] must be in [0, 1), got {beta}")
        elif name in ("alpha", "momentum", "dampening") and not 0.0 <= value <= 1.0:
            raise TrainledgerError(f"{name} must be in [0, 1], got {value}")
        elif not value >= 0.0:
            raise TrainledgerError(f"{name} must be non-negative, got {value}")


class ForeachOptimizer(torch.optim.Optimizer):
    """Base of the trainledger optimizers: step() runs self._update(params, group) once per (device, dtype)
    list of each group's parameters that have gradients; state_dict()/load_state_dict() are torch's."""

    @torch.no_grad()
    def step(self, closure=None):
        """The closure's loss (or None), after one update of every parameter that has a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for params in grouped_params(group):
                self._update(params, group)
        return loss

    def _update(self, params: list[torch.Tensor], group: dict) -> None:
        raise TrainledgerError(f"{type(self).__name__} does not define its update")
