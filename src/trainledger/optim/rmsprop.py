"""RMSProp (Tieleman & Hinton, Coursera lecture 6.5, 2012), torch.optim.RMSprop's form, vectorized with _foreach_*.

At each step with gradient g (negated when maximize):
    g ← g + λ·p                                     (L2 weight decay)
    v ← α·v + (1−α)·g²                              ('square_avg')
    centered: ḡ ← α·ḡ + (1−α)·g ('grad_avg'), d = √(v − ḡ²) + ε   (Graves, arXiv:1308.0850, eq. 38–45)
    otherwise: d = √v + ε
    momentum μ > 0: b ← μ·b + g/d ('momentum_buffer'), p ← p − lr·b;  else p ← p − lr·g/d
Arguments, defaults (lr=1e-2, alpha=0.99, eps=1e-8) and state names follow torch.optim.RMSprop.
"""

from __future__ import annotations

import torch

from trainledger.optim._common import (ForeachOptimizer, add_l2, advance_steps, check_hyperparameters,
                                       directions)


class RMSProp(ForeachOptimizer):
    """RMSProp with torch.optim.RMSprop's arguments, defaults and state."""

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
                 momentum: float = 0.0, centered: bool = False, *, maximize: bool = False):
        check_hyperparameters(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum)
        defaults = dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                        centered=centered, maximize=maximize)
        super().__init__(params, defaults)

    def _update(self, params: list[torch.Tensor], group: dict) -> None:
        alpha, eps, momentum = group["alpha"], group["eps"], group["momentum"]
        states = [self._state_of(p, group) for p in params]
        advance_steps(states)
        grads, owned = directions(params, group)
        grads, owned = add_l2(grads, owned, params, group["weight_decay"])
        square_avgs = [s["square_avg"] for s in states]
        torch._foreach_mul_(square_avgs, alpha)
        torch._foreach_addcmul_(square_avgs, grads, grads, 1 - alpha)          # v ← α·v + (1−α)·g²
        if group["centered"]:
            grad_avgs = [s["grad_avg"] for s in states]
            torch._foreach_lerp_(grad_avgs, grads, 1 - alpha)                  # ḡ ← α·ḡ + (1−α)·g
            denoms = torch._foreach_addcmul(square_avgs, grad_avgs, grad_avgs, -1.0)
            torch._foreach_sqrt_(denoms)                                       # √(v − ḡ²)
        else:
            denoms = torch._foreach_sqrt(square_avgs)
        torch._foreach_add_(denoms, eps)
        if momentum > 0:
            bufs = [s["momentum_buffer"] for s in states]
            torch._foreach_mul_(bufs, momentum)
            torch._foreach_addcdiv_(bufs, grads, denoms)                       # b ← μ·b + g/d
            torch._foreach_add_(params, bufs, alpha=-group["lr"])
        else:
            torch._foreach_addcdiv_(params, grads, denoms, -group["lr"])

    def _state_of(self, p: torch.Tensor, group: dict) -> dict:
        state = self.state[p]
        if not state:
            state["step"] = torch.tensor(0.0, dtype=torch.float32)
            state["square_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if group["momentum"] > 0 and "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if group["centered"] and "grad_avg" not in state:
            state["grad_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state
