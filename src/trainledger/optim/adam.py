"""Adam (L2 weight decay) and AdamW (decoupled weight decay), vectorized with torch._foreach_* per param group.

Adam (Kingma & Ba, arXiv:1412.6980, Algorithm 1), at step t with gradient g:
    m ← β1·m + (1−β1)·g                      first moment  ('exp_avg')
    v ← β2·v + (1−β2)·g²                     second moment ('exp_avg_sq')
    p ← p − lr/(1−β1ᵗ) · m / (√v/√(1−β2ᵗ) + ε)
Adam adds weight decay to the gradient (g ← g + λ·p, an L2 penalty); AdamW (Loshchilov & Hutter,
arXiv:1711.05101) instead shrinks the weights before the update, p ← p·(1 − lr·λ), decoupled from the moments.
AMSGrad (Reddi et al., ICLR 2018) divides by the running maximum of v ('max_exp_avg_sq').
Argument names, defaults, state names and the order of floating-point operations follow torch.optim.Adam/AdamW,
so the two agree to rounding and their state_dicts load into each other.
State per parameter: 2 tensors of the parameter's size (3 with amsgrad) — AdamW's 8 of the 16 bytes/param
of fp32 training (ZeRO, arXiv:1910.02054, §3.1).
"""

from __future__ import annotations

import torch

from trainledger.optim._common import add_l2, advance_steps, check_hyperparameters, directions, ForeachOptimizer


class Adam(ForeachOptimizer):
    """Adam with L2 weight decay (torch.optim.Adam's arguments and defaults)."""

    decoupled_weight_decay = False

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, *, maximize: bool = False):
        check_hyperparameters(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                        maximize=maximize)
        super().__init__(params, defaults)

    def _update(self, params: list[torch.Tensor], group: dict) -> None:
        lr, (beta1, beta2), eps, weight_decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        states = [self._state_of(p, group["amsgrad"]) for p in params]
        steps = advance_steps(states)
        grads, owned = directions(params, group)
        if weight_decay != 0 and self.decoupled_weight_decay:
            torch._foreach_mul_(params, 1 - lr * weight_decay)          # AdamW: p ← p·(1 − lr·λ)
        elif weight_decay != 0:
            grads, owned = add_l2(grads, owned, params, weight_decay)   # Adam: g ← g + λ·p
        exp_avgs = [s["exp_avg"] for s in states]
        exp_avg_sqs = [s["exp_avg_sq"] for s in states]
        torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)                # m ← m + (1−β1)(g − m)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)   # v ← β2·v + (1−β2)·g²
        del grads
        step_sizes = [-(lr / (1 - beta1 ** t)) for t in steps]
        bias_correction2_sqrts = [(1 - beta2 ** t) ** 0.5 for t in steps]
        if group["amsgrad"]:
            max_sqs = [s["max_exp_avg_sq"] for s in states]
            torch._foreach_maximum_(max_sqs, exp_avg_sqs)
            denoms = torch._foreach_sqrt(max_sqs)
        else:
            denoms = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denoms, bias_correction2_sqrts)
        torch._foreach_add_(denoms, eps)                                # √v̂ + ε
        torch._foreach_addcdiv_(params, exp_avgs, denoms, step_sizes)   # p ← p − lr/(1−β1ᵗ) · m / denom

    def _state_of(self, p: torch.Tensor, amsgrad: bool) -> dict:
        state = self.state[p]
        if not state:
            state["step"] = torch.tensor(0.0, dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if amsgrad and "max_exp_avg_sq" not in state:
            state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state


class AdamW(Adam):
    """Adam with decoupled weight decay (torch.optim.AdamW's arguments and defaults: weight_decay=0.01)."""

    decoupled_weight_decay = True

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                         maximize=maximize)
