"""AdaGrad as torch.optim.Adagrad defines it, and the lecture's variant with ε inside the square root.

AdaGrad (Duchi, Hazan & Singer, JMLR 12, 2011): divide each coordinate's step by the root of its summed
squared gradients. torch's form, at step t with gradient g (negated when maximize):
    g ← g + λ·p                                   (L2 weight decay)
    s ← s + g²                                    ('sum', starts at initial_accumulator_value)
    p ← p − lr/(1 + (t−1)·lr_decay) · g / (√s + ε)
CS336 Lecture 2 writes the same idea as p ← p − lr · g / √(s + 1e-5) (ε inside the root, no decay, state
'g2'): `LectureAdaGrad`. The two differ while s is small (ε=1e-5 inside the root floors the denominator at
~3.2e-3, torch's 1e-10 outside at 1e-10).
"""

from __future__ import annotations

import torch

from trainledger.optim._common import add_l2, advance_steps, check_hyperparameters, directions, ForeachOptimizer


class AdaGrad(ForeachOptimizer):
    """AdaGrad with torch.optim.Adagrad's arguments, defaults (lr=1e-2, eps=1e-10) and state ('step', 'sum')."""

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0, eps: float = 1e-10, *, maximize: bool = False):
        check_hyperparameters(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                              initial_accumulator_value=initial_accumulator_value, eps=eps)
        defaults = dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, eps=eps, maximize=maximize)
        super().__init__(params, defaults)

    def _update(self, params: list[torch.Tensor], group: dict) -> None:
        states = []
        for p in params:
            state = self.state[p]
            if not state:
                state["step"] = torch.tensor(0.0, dtype=torch.float32)
                state["sum"] = torch.full_like(p, group["initial_accumulator_value"],
                                               memory_format=torch.preserve_format)
            states.append(state)
        steps = advance_steps(states)
        grads, owned = directions(params, group)
        grads, owned = add_l2(grads, owned, params, group["weight_decay"])
        sums = [s["sum"] for s in states]
        torch._foreach_addcmul_(sums, grads, grads, 1.0)                 # s ← s + g²
        stds = torch._foreach_sqrt(sums)
        torch._foreach_add_(stds, group["eps"])                          # √s + ε
        lr, lr_decay = group["lr"], group["lr_decay"]
        scales = [-lr / (1 + (t - 1) * lr_decay) for t in steps]
        torch._foreach_addcdiv_(params, grads, stds, scales)


class LectureAdaGrad(ForeachOptimizer):
    """The AdaGrad of CS336 Lecture 2: p ← p − lr · g / √(Σg² + eps), eps inside the root (state 'step', 'g2')."""

    def __init__(self, params, lr: float = 0.01, eps: float = 1e-5):
        check_hyperparameters(lr=lr, eps=eps)
        super().__init__(params, dict(lr=lr, eps=eps))

    def _update(self, params: list[torch.Tensor], group: dict) -> None:
        states = []
        for p in params:
            state = self.state[p]
            if not state:
                state["step"] = torch.tensor(0.0, dtype=torch.float32)
                state["g2"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            states.append(state)
        advance_steps(states)
        grads = [p.grad for p in params]
        g2 = [s["g2"] for s in states]
        torch._foreach_addcmul_(g2, grads, grads, 1.0)                   # g2 ← g2 + g²
        denoms = torch._foreach_add(g2, group["eps"])
        torch._foreach_sqrt_(denoms)                                     # √(g2 + eps)
        torch._foreach_addcdiv_(params, grads, denoms, -group["lr"])
