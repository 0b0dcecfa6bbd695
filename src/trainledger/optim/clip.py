"""Global-norm gradient clipping (Pascanu, Mikolov & Bengio, ICML 2013, Algorithm 2).

    n = ‖(g₁, …, gₖ)‖₂ over every gradient;  if n > max_norm: gᵢ ← gᵢ · max_norm / (n + 1e-6)
Parameters without a gradient are skipped. Same result as torch.nn.utils.clip_grad_norm_ (same 1e-6 guard,
so a norm exactly at max_norm is left, to rounding, unchanged).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from trainledger.errors import TrainledgerError


@torch.no_grad()
def clip_grad_norm_(params: Iterable[torch.Tensor] | torch.Tensor, max_norm: float, eps: float = 1e-6) -> torch.Tensor:
    """The total L2 norm of all gradients before clipping (0-dim float tensor); scales them in place when above max_norm."""
    if isinstance(params, torch.Tensor):
        params = [params]
    if not max_norm > 0:
        raise TrainledgerError(f"max_norm must be positive, got {max_norm}")
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    device = grads[0].device
    per_tensor = torch._foreach_norm(grads, 2.0)
    total = torch.linalg.vector_norm(torch.stack([n.to(device) for n in per_tensor]), 2.0)
    scale = torch.clamp(max_norm / (total + eps), max=1.0)  # a tensor: no host sync on CUDA
    torch._foreach_mul_(grads, scale)
    return total
