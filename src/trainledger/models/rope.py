"""Rotary position embeddings (RoPE; Su et al. 2021, arXiv:2104.09864) in the Hugging Face Llama layout."""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor


def rope_cos_sin(seq_len: int, head_dim: int, theta: float, *, device=None,
                 dtype=torch.float32) -> tuple[Float[Tensor, "seq head_dim"], Float[Tensor, "seq head_dim"]]:
    """cos and sin tables of shape (seq_len, head_dim), computed in fp32 and cast to `dtype` (head_dim: the rotated dims).

    Frequencies θ^(-2i/head_dim) for i < head_dim/2; position t rotates pair i by angle t·θ^(-2i/head_dim).
    The table is duplicated along the last dimension ("rotate half" layout: pairs are (i, i + head_dim/2),
    as in Hugging Face `LlamaRotaryEmbedding`), so Hugging Face Llama weights load unchanged.
    An outer product by broadcasting, not a matmul: it adds no matmul FLOPs. Recomputed every forward
    (no buffers), so a model built on the meta device needs nothing re-initialised.
    """
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.int64).float() / head_dim))
    positions = torch.arange(seq_len, device=device, dtype=torch.int64).float()
    freqs = positions[:, None] * inv_freq[None, :]
    angles = torch.cat((freqs, freqs), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x: Float[Tensor, "... d"]) -> Float[Tensor, "... d"]:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: Float[Tensor, "batch heads seq head_dim"], cos: Float[Tensor, "seq rotary_dim"],
               sin: Float[Tensor, "seq rotary_dim"]) -> Float[Tensor, "batch heads seq head_dim"]:
    """x rotated by position: x·cos + rotate_half(x)·sin (elementwise; saves only cos and sin for backward).

    Partial rotary (GPT-NeoX rotary_pct, Phi partial_rotary_factor): when the tables are narrower than the head,
    only the first rotary_dim dims rotate and the rest pass through (concatenated back; cat saves nothing).
    """
    rotary_dim = cos.shape[-1]
    if rotary_dim == x.shape[-1]:
        return x * cos + rotate_half(x) * sin
    x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]
    return torch.cat((x_rot * cos + rotate_half(x_rot) * sin, x_pass), dim=-1)
