"""Additive attention masks: causal, sliding-window (Mistral, Phi-3, Gemma) and ALiBi (MPT), built once per forward.

A mask is a float tensor added to the attention scores: 0 where a query may look, -inf where it may not,
plus ALiBi's linear distance penalty. Every layer of one kind receives the same tensor, so autograd keeps
one copy however many layers save it (the CPU flash kernel saves its mask for backward).
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from torch import Tensor


def alibi_slopes(n_heads: int, bias_max: float = 8.0) -> list[float]:
    """ALiBi's per-head slopes (Press et al. 2021, arXiv:2108.12409), as MPT computes them for any head count.

    With H' = n_heads rounded up to a power of two: slope_k = 2^(-bias_max·k/H') for k = 1..H'; when
    H' != n_heads, the odd-indexed slopes come first, then the even ones, cut to n_heads (MPT's
    `gen_slopes`; transformers' build_mpt_alibi_tensor). For 8 heads: 1/2, 1/4, ..., 1/256.
    """
    n2 = 2 ** math.ceil(math.log2(n_heads))
    slopes = [2.0 ** (-bias_max * k / n2) for k in range(1, n2 + 1)]
    if n2 != n_heads:
        slopes = (slopes[1::2] + slopes[::2])[:n_heads]
    return slopes


def attention_mask(seq_len: int, *, window: int | None = None, alibi: list[float] | None = None, device=None,
                   dtype=torch.float32) -> Float[Tensor, "... seq seq"]:
    """Additive mask (seq, seq), or (1, heads, seq, seq) with ALiBi: query i sees key j iff j <= i (and j > i - window).

    ALiBi's mask is 4-D because PyTorch's CPU flash kernel takes 2-D or 4-D masks only (a 3-D one sends SDPA
    to its math path, which saves the T×T probabilities).

    ALiBi adds slope_h·(j - i) (<= 0) to the scores a query gives earlier keys; transformers' MPT adds
    slope_h·(j - T + 1) instead, which differs by a constant per row and so gives the same softmax.
    """
    i = torch.arange(seq_len, device=device)[:, None]
    j = torch.arange(seq_len, device=device)[None, :]
    blocked = j > i
    if window is not None:
        blocked = blocked | (j <= i - window)
    if alibi is None:
        return torch.zeros(seq_len, seq_len, device=device, dtype=dtype).masked_fill_(blocked, float("-inf"))
    slopes = torch.tensor(alibi, device=device, dtype=torch.float32)[:, None, None]
    bias = slopes * (j - i).to(torch.float32)
    return bias.masked_fill_(blocked, float("-inf")).to(dtype)[None]
