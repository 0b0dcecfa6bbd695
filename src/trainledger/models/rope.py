"""Rotary position embeddings (RoPE; Su et al. 2021, arXiv:2104.09864) in both layouts that checkpoints use.

A head's rotated dims are cut into pairs, pair i turned by the angle t·θ^(-2i/d) at position t. Which dims form a
pair is the layout (`TransformerSpec.rope_layout`):
- "half": pairs (i, i + d/2), Hugging Face's `rotate_half` (LlamaRotaryEmbedding, apply_rotary_pos_emb), the
  default: Hugging Face Llama weights load unchanged;
- "interleaved": pairs (2i, 2i + 1), Meta's original Llama code (complex multiplication of adjacent dims), GPT-J,
  DeepSeek-V3 (its config's rope_interleave) and most from-scratch implementations (CS336 assignment 1).
The two compute the same function of the input once q and k's rows are permuted (`layout_permutation`);
weights move between layouts with `convert_layout` (transformers' convert_llama_weights_to_hf.py applies the
interleaved -> half permutation to Meta's checkpoints), so loading weights of the other layout without it gives
wrong outputs silently.
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Int
from torch import Tensor

LAYOUTS = ("half", "interleaved")


def rope_cos_sin(seq_len: int, head_dim: int, theta: float, *, device=None, dtype=torch.float32,
                 layout: str = "half", positions: Int[Tensor, "... seq"] | None = None
                 ) -> tuple[Float[Tensor, "... seq head_dim"], Float[Tensor, "... seq head_dim"]]:
    """cos and sin tables of shape (seq_len, head_dim) (or positions.shape + (head_dim,)), computed in fp32 and cast
    to `dtype` (head_dim: the rotated dims).

    Frequencies θ^(-2i/head_dim) for i < head_dim/2; position t rotates pair i by angle t·θ^(-2i/head_dim). The
    table holds each pair's angle at both of its dims: [f0..f_{d/2-1}, f0..f_{d/2-1}] in the "half" layout,
    [f0, f0, f1, f1, ...] in the "interleaved" one. `positions` (token positions, any integer tensor) replaces
    0..seq_len-1. An outer product by broadcasting, not a matmul: it adds no matmul FLOPs. Recomputed every
    forward (no buffers), so a model built on the meta device needs nothing re-initialised.
    """
    _check_layout(layout)
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.int64).float() / head_dim))
    if positions is None:
        positions = torch.arange(seq_len, device=device, dtype=torch.int64)
    freqs = positions.to(device=inv_freq.device).float()[..., None] * inv_freq
    angles = torch.cat((freqs, freqs), dim=-1) if layout == "half" else freqs.repeat_interleave(2, dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x: Float[Tensor, "... d"]) -> Float[Tensor, "... d"]:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotate_pairs(x: Float[Tensor, "... d"]) -> Float[Tensor, "... d"]:
    """(x_2i, x_2i+1) -> (-x_2i+1, x_2i) for every adjacent pair of the last dimension."""
    pairs = x.unflatten(-1, (-1, 2))
    return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)


def apply_rope(x: Float[Tensor, "batch heads seq head_dim"], cos: Float[Tensor, "seq rotary_dim"],
               sin: Float[Tensor, "seq rotary_dim"], layout: str = "half",
               positions: Int[Tensor, "... seq"] | None = None) -> Float[Tensor, "batch heads seq head_dim"]:
    """x rotated by position: x·cos + rotate(x)·sin (elementwise; saves only cos and sin for backward), with the
    rotation of `layout` (rotate_half or rotate_pairs; the tables must be made for the same layout).

    `positions`: the token position of each of x's rows (shape broadcastable to x.shape[:-1], e.g. (seq,) or
    (batch, 1, seq)); the rows of cos and sin at those positions are used instead of rows 0, 1, ... in order.
    Partial rotary (GPT-NeoX rotary_pct, Phi partial_rotary_factor): when the tables are narrower than the head,
    only the first rotary_dim dims rotate and the rest pass through (concatenated back; cat saves nothing).
    """
    _check_layout(layout)
    if positions is not None:
        cos, sin = cos[positions], sin[positions]
    rotate = rotate_half if layout == "half" else rotate_pairs
    rotary_dim = cos.shape[-1]
    if rotary_dim == x.shape[-1]:
        return x * cos + rotate(x) * sin
    x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]
    return torch.cat((x_rot * cos + rotate(x_rot) * sin, x_pass), dim=-1)


def layout_permutation(head_dim: int, rotary_dim: int, source: str, target: str) -> Int[Tensor, "head_dim"]:
    """Indices `p` such that a head's dims in layout `target` are its dims in layout `source` taken at p.

    Half position j < r/2 holds pair j's first dim, j >= r/2 its second; interleaved position 2i holds pair i's
    first, 2i + 1 its second; dims past rotary_dim r do not rotate and stay in place."""
    _check_layout(source)
    _check_layout(target)
    half = rotary_dim // 2
    index = torch.arange(head_dim)
    if source == target:
        return index
    pair, second = torch.arange(half), torch.arange(half) + half
    from_half_to_interleaved = torch.stack((pair, second), dim=-1).flatten()     # interleaved slot 2i <- half i ...
    perm = index.clone()
    if target == "interleaved":
        perm[:rotary_dim] = from_half_to_interleaved
    else:
        perm[:rotary_dim] = torch.argsort(from_half_to_interleaved)
    return perm


def convert_layout(weight: Tensor, n_heads: int, head_dim: int, rotary_dim: int, source: str, target: str) -> Tensor:
    """The rows (output features) of a q or k projection's weight or bias, n_heads heads of head_dim each, moved from
    RoPE layout `source` to `target`: the model computes the same outputs in the target layout."""
    perm = layout_permutation(head_dim, rotary_dim, source, target).to(weight.device)
    rows = weight.reshape(n_heads, head_dim, *weight.shape[1:])
    return rows[:, perm].reshape(weight.shape)


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"RoPE layout must be one of {LAYOUTS}, got {layout!r}")
