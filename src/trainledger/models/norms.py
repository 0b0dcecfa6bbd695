"""Normalisation layers: LayerNorm (GPT-2, GPT-NeoX, MPT), RMSNorm (Llama) and Gemma's (1 + w) RMSNorm, chosen by `spec.norm`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn


class RMSNorm(nn.Module):
    """Root-mean-square norm with a weight and no bias (Zhang & Sennrich 2019, arXiv:1910.07467), as Hugging Face Llama computes it.

    y = w · cast(x₃₂ · rsqrt(mean(x₃₂²) + eps)) where x₃₂ is x upcast to fp32 and the cast goes back to x's dtype.
    In 16-bit training this upcast is why RMSNorm saves fp32 copies for backward (see docs/models.md).
    """

    def __init__(self, dim: int, eps: float = 1e-5, *, device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)

    def forward(self, x: Float[Tensor, "... d"]) -> Float[Tensor, "... d"]:
        input_dtype = x.dtype
        x32 = x.to(torch.float32)                       # no-op (same tensor) when x is already fp32
        variance = x32.pow(2).mean(-1, keepdim=True)
        normed = x32 * torch.rsqrt(variance + self.eps)
        return self.weight * normed.to(input_dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class LayerNorm(nn.Module):
    """LayerNorm (Ba et al. 2016, arXiv:1607.06450) with a weight and, when `bias`, a bias (GPT-2 has both).

    One fused `F.layer_norm` call: autograd saves its input, the per-row mean and rstd (fp32 stats), weight, bias.
    """

    def __init__(self, dim: int, eps: float = 1e-5, bias: bool = True, *, device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(dim, device=device, dtype=dtype)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: Float[Tensor, "... d"]) -> Float[Tensor, "... d"]:
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}, bias={self.bias is not None}"


class GemmaRMSNorm(nn.Module):
    """Gemma's RMSNorm: y = cast(x₃₂ · rsqrt(mean(x₃₂²) + eps) · (1 + w₃₂)), weight initialised to 0 (so 1 + w = 1).

    Unlike Llama's, the weight multiplies in fp32 before the cast back (transformers' Gemma2RMSNorm /
    Gemma3RMSNorm; Gemma Team 2024, arXiv:2408.00118). Autograd saves x₃₂, rsqrt, the fp32 normalised x and
    the (1 + w) vector of this call (d fp32 values) for the last product.
    """

    def __init__(self, dim: int, eps: float = 1e-6, *, device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.weight)

    def forward(self, x: Float[Tensor, "... d"]) -> Float[Tensor, "... d"]:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * (1.0 + self.weight.float())).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


def make_norm(spec, dim: int | None = None, *, device=None, dtype=None) -> nn.Module:
    """The norm layer `spec.norm` names, of size `dim` (default d_model; d_head for QK-norm), with `spec.norm_eps`
    (and `spec.norm_bias` for LayerNorm)."""
    dim = spec.d_model if dim is None else dim
    if spec.norm == "rmsnorm":
        return RMSNorm(dim, spec.norm_eps, device=device, dtype=dtype)
    if spec.norm == "gemma_rmsnorm":
        return GemmaRMSNorm(dim, spec.norm_eps, device=device, dtype=dtype)
    return LayerNorm(dim, spec.norm_eps, bias=spec.norm_bias, device=device, dtype=dtype)
