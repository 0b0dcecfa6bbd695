"""Learning-rate schedule: linear warmup, cosine decay to a floor, then constant; and a stateful scheduler.

    t < warmup_steps:                 lr = max_lr · t / warmup_steps
    warmup_steps ≤ t ≤ total_steps:   lr = min_lr + ½(1 + cos(π·(t − warmup)/(total − warmup)))·(max_lr − min_lr)
    t > total_steps:                  lr = min_lr
The cosine schedule is SGDR's (Loshchilov & Hutter, arXiv:1608.03983, eq. 5) without restarts; warmup as in
Goyal et al. (arXiv:1706.02677, §2.2); this exact three-piece form is the one of the CS336 assignments and
nanoGPT. The step t counts optimizer steps from 0.
"""

from __future__ import annotations

import math

import torch

from trainledger.errors import TrainledgerError


def cosine_with_warmup(step: int, max_lr: float, min_lr: float, warmup_steps: int, total_steps: int) -> float:
    """The learning rate at optimizer step `step` (0-based): linear warmup, cosine decay, constant min_lr after."""
    if warmup_steps < 0 or total_steps < warmup_steps:
        raise TrainledgerError(f"need 0 <= warmup_steps <= total_steps, got warmup_steps={warmup_steps}, "
                               f"total_steps={total_steps}")
    if min_lr > max_lr:
        raise TrainledgerError(f"min_lr ({min_lr}) must not exceed max_lr ({max_lr})")
    if step < warmup_steps:
        return max_lr * step / warmup_steps
    if step > total_steps:
        return min_lr
    if total_steps == warmup_steps:
        return max_lr if step == warmup_steps else min_lr
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (max_lr - min_lr)


class CosineWithWarmup(torch.optim.lr_scheduler.LambdaLR):
    """A LambdaLR whose lr at step t is cosine_with_warmup(t, ...) (max_lr = each group's initial lr).

    Call scheduler.step() after optimizer.step(); state_dict()/load_state_dict() carry the step count and
    settings (no function objects), so torch.load(weights_only=True) can read a checkpoint of it.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int,
                 min_lr_ratio: float = 0.1, last_epoch: int = -1):
        if not 0 <= min_lr_ratio <= 1:
            raise TrainledgerError(f"min_lr_ratio must be in [0, 1], got {min_lr_ratio}")
        cosine_with_warmup(0, 1.0, min_lr_ratio, warmup_steps, total_steps)  # validates the settings
        self.warmup_steps, self.total_steps, self.min_lr_ratio = warmup_steps, total_steps, min_lr_ratio
        super().__init__(optimizer, self._factor, last_epoch=last_epoch)

    def _factor(self, step: int) -> float:
        """lr / max_lr at `step`."""
        return cosine_with_warmup(step, 1.0, self.min_lr_ratio, self.warmup_steps, self.total_steps)

    def state_dict(self) -> dict:
        """Everything but the lr_lambdas (a bound method, rebuilt from the settings on load)."""
        return {key: value for key, value in self.__dict__.items() if key not in ("optimizer", "lr_lambdas")}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)
