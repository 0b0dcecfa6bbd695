"""The lecture's `Linear`: y = x @ W with W stored (in, out), no bias."""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from torch import Tensor, nn


class Linear(nn.Module):
    """A bias-free linear map d_in -> d_out with the weight stored (d_in, d_out), as in CS336 Lecture 2.

    torch.nn.Linear stores (d_out, d_in) and computes x @ W.T; the lecture stores (d_in, d_out) and computes
    x @ W. Either way the forward is one matmul of 2·B·d_in·d_out FLOPs.

    Init: truncated normal, std 1/√d_in, cut at ±3 std (the lecture's `nn.init.trunc_normal_` variant of its
    `randn / sqrt(input_dim)`), so the output of one layer keeps unit scale for unit-scale inputs
    (Lecture 2, "parameter initialization").
    """

    def __init__(self, input_dim: int, output_dim: int, *, device=None, dtype=None):
        super().__init__()
        self.input_dim = input_dim
        self.output_dim = output_dim
        self.weight = nn.Parameter(torch.empty(input_dim, output_dim, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-draw the weight: N(0, 1/d_in) truncated at ±3 std (works on the meta device: no-op)."""
        std = 1.0 / math.sqrt(self.input_dim)
        nn.init.trunc_normal_(self.weight, mean=0.0, std=std, a=-3 * std, b=3 * std)

    def forward(self, x: Float[Tensor, "... d_in"]) -> Float[Tensor, "... d_out"]:
        return x @ self.weight

    def extra_repr(self) -> str:
        return f"input_dim={self.input_dim}, output_dim={self.output_dim}"
