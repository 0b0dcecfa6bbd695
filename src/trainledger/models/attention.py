"""Causal self-attention with q/k/v/o projections, optional RoPE and grouped-query attention, via PyTorch SDPA."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

from trainledger.models.rope import apply_rope


class Attention(nn.Module):
    """Multi-head causal self-attention: n_heads query heads, n_kv_heads key/value heads of size head_dim.

    Matmuls (the only FLOPs counted), for x of shape (B, T, d_model), H = n_heads, K = n_kv_heads, D = head_dim:
        q = x Wq (+bq)   2·B·T·d_model·H·D        k = x Wk (+bk)   2·B·T·d_model·K·D
        v = x Wv (+bv)   2·B·T·d_model·K·D        o = a Wo (+bo)   2·B·T·H·D·d_model
        inside SDPA: QKᵀ and A·V over the full T×T, 2·B·H·T·T·D each (the causal kernel skips about half).
    Grouped-query attention (Ainslie et al. 2023, arXiv:2305.13245) is passed to SDPA as `enable_gqa=True`,
    so keys and values are never copied per query head.
    `selective` recompute (Korthikanti et al. 2022, arXiv:2205.05198, Sec. 5) checkpoints the SDPA call only.
    """

    def __init__(self, spec, *, device=None, dtype=None):
        super().__init__()
        self.n_heads = spec.n_heads
        self.n_kv_heads = spec.kv_heads
        self.head_dim = spec.head_dim
        self.use_rope = spec.position == "rope"
        self.selective = False
        factory = {"device": device, "dtype": dtype}
        d, q_dim, kv_dim = spec.d_model, spec.n_heads * spec.head_dim, spec.kv_heads * spec.head_dim
        self.q_proj = nn.Linear(d, q_dim, bias=spec.qkv_bias, **factory)
        self.k_proj = nn.Linear(d, kv_dim, bias=spec.qkv_bias, **factory)
        self.v_proj = nn.Linear(d, kv_dim, bias=spec.qkv_bias, **factory)
        self.o_proj = nn.Linear(q_dim, d, bias=spec.attn_out_bias, **factory)

    def forward(self, x: Float[Tensor, "batch seq d_model"], cos: Tensor | None = None,
                sin: Tensor | None = None) -> Float[Tensor, "batch seq d_model"]:
        q = rearrange(self.q_proj(x), "b t (h d) -> b h t d", h=self.n_heads)
        k = rearrange(self.k_proj(x), "b t (h d) -> b h t d", h=self.n_kv_heads)
        v = rearrange(self.v_proj(x), "b t (h d) -> b h t d", h=self.n_kv_heads)
        if self.use_rope:
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.selective and torch.is_grad_enabled() and x.requires_grad:
            with set_checkpoint_early_stop(False):   # recompute the whole core (matters for the math backend)
                out = checkpoint(self.core, q, k, v, use_reentrant=False)
        else:
            out = self.core(q, k, v)
        return self.o_proj(rearrange(out, "b h t d -> b t (h d)"))

    def core(self, q: Float[Tensor, "batch heads seq head_dim"], k: Float[Tensor, "batch kv_heads seq head_dim"],
             v: Float[Tensor, "batch kv_heads seq head_dim"]) -> Float[Tensor, "batch heads seq head_dim"]:
        """softmax(QKᵀ/√head_dim + causal mask)·V: the attention core, one SDPA call (flash kernel where available)."""
        gqa = self.n_kv_heads != self.n_heads
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
