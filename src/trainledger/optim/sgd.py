"""SGD with optional momentum, dampening, Nesterov momentum and L2 weight decay, vectorized with torch._foreach_*.

With gradient g (negated when maximize), weight decay λ, momentum μ and dampening τ:
    g ← g + λ·p
    b ← g on the first step, else μ·b + (1−τ)·g        ('momentum_buffer')
    d ← g + μ·b (Nesterov) or b (heavy ball) or g (μ = 0)
    p ← p − lr·d
This is torch.optim.SGD's formulation (Sutskever et al., ICML 2013, rewritten so lr multiplies the whole
step); arguments, defaults and state names match it. State: one buffer of the parameter's size when μ > 0.
"""

from __future__ import annotations

import torch

from trainledger.errors import TrainledgerError
from trainledger.optim._common import add_l2, check_hyperparameters, directions, ForeachOptimizer


class SGD(ForeachOptimizer):
    """Stochastic gradient descent (torch.optim.SGD's arguments and defaults: lr=1e-3, momentum=0)."""

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, *, maximize: bool = False):
        check_hyperparameters(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise TrainledgerError(f"nesterov momentum needs momentum > 0 and dampening = 0, "
                                   f"got momentum={momentum}, dampening={dampening}")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, maximize=maximize)
        super().__init__(params, defaults)

    def _update(self, params: list[torch.Tensor], group: dict) -> None:
        grads, owned = directions(params, group)
        grads, owned = add_l2(grads, owned, params, group["weight_decay"])
        momentum = group["momentum"]
        if momentum != 0:
            fresh = [i for i, p in enumerate(params) if "momentum_buffer" not in self.state[p]]
            for i in fresh:  # first step: the buffer starts as the gradient itself
                self.state[params[i]]["momentum_buffer"] = grads[i].clone().detach()
            old = [i for i in range(len(params)) if i not in set(fresh)]
            if old:
                old_bufs = [self.state[params[i]]["momentum_buffer"] for i in old]
                torch._foreach_mul_(old_bufs, momentum)
                torch._foreach_add_(old_bufs, [grads[i] for i in old], alpha=1 - group["dampening"])
            bufs = [self.state[p]["momentum_buffer"] for p in params]
            if group["nesterov"]:
                grads = torch._foreach_add(grads, bufs, alpha=momentum)
            else:
                grads = bufs
        torch._foreach_add_(params, grads, alpha=-group["lr"])
