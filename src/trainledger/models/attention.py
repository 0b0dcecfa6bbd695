"""Causal self-attention with q/k/v/o projections, optional RoPE, QK-norm, grouped-query attention, masks and soft-capping."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from jaxtyping import Float
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

from trainledger.models.mla import sink_core
from trainledger.models.norms import make_norm
from trainledger.models.rope import apply_rope


class Attention(nn.Module):
    """Multi-head causal self-attention: n_heads query heads, n_kv_heads key/value heads of size head_dim.

    Matmuls (the only FLOPs counted), for x of shape (B, T, d_model), H = n_heads, K = n_kv_heads, D = head_dim:
        q = x Wq (+bq)   2·B·T·d_model·H·D        k = x Wk (+bk)   2·B·T·d_model·K·D
        v = x Wv (+bv)   2·B·T·d_model·K·D        o = a Wo (+bo)   2·B·T·H·D·d_model
        the core: QKᵀ and A·V over the full T×T, 2·B·H·T·T·D each (masks, windows and the causal kernel skip
        work without changing what is counted).
    Grouped-query attention (Ainslie et al. 2023, arXiv:2305.13245) is passed to SDPA as `enable_gqa=True`,
    so keys and values are never copied per query head.
    Optional, per spec: q, k, v clamped to ±clip_qkv (MPT); QK-norm, a norm over each head's D dims of q and k
    before RoPE (Qwen3, Gemma 3; Dehghani et al. 2023, arXiv:2302.05442); RoPE on the first rotary_dim dims
    (GPT-NeoX, Phi); softmax scale attn_scale; an additive mask (sliding window, ALiBi) passed in by the model;
    logit soft-capping s -> c·tanh(s/c) (Gemma 2), which SDPA cannot do: then the core is written out
    (`softcapped_core`).
    `selective` recompute (Korthikanti et al. 2022, arXiv:2205.05198, Sec. 5) checkpoints the core only.
    """

    def __init__(self, spec, *, device=None, dtype=None):
        super().__init__()
        self.n_heads = spec.n_heads
        self.n_kv_heads = spec.kv_heads
        self.head_dim = spec.head_dim
        self.use_rope = spec.position == "rope"
        self.rope_layout = spec.rope_layout
        self.scale = spec.attn_scale
        self.softcap = spec.attn_softcap
        self.clip = spec.clip_qkv
        self.selective = False
        factory = {"device": device, "dtype": dtype}
        d, q_dim, kv_dim = spec.d_model, spec.n_heads * spec.head_dim, spec.kv_heads * spec.head_dim
        self.q_proj = nn.Linear(d, q_dim, bias=spec.qkv_bias, **factory)
        self.k_proj = nn.Linear(d, kv_dim, bias=spec.qkv_bias, **factory)
        self.v_proj = nn.Linear(d, kv_dim, bias=spec.qkv_bias, **factory)
        self.o_proj = nn.Linear(q_dim, d, bias=spec.attn_out_bias, **factory)
        self.q_norm = make_norm(spec, spec.head_dim, **factory) if spec.qk_norm else None
        self.k_norm = make_norm(spec, spec.head_dim, **factory) if spec.qk_norm else None
        # gpt-oss: one learned logit per head joins each softmax (models.mla.sink_core)
        self.sinks = nn.Parameter(torch.zeros(spec.n_heads, **factory)) if spec.attention_sinks else None

    def forward(self, x: Float[Tensor, "batch seq d_model"], cos: Tensor | None = None, sin: Tensor | None = None,
                mask: Tensor | None = None, cache=None) -> Float[Tensor, "batch seq d_model"]:
        """`cache` (a models.kv_cache.LayerCache, inference only): the new keys and values are stored there and
        the queries attend to every cached position they may see (the mask and causality then come from it)."""
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.clip is not None:
            q, k, v = (t.clamp(-self.clip, self.clip) for t in (q, k, v))
        q = rearrange(q, "b t (h d) -> b h t d", h=self.n_heads)
        k = rearrange(k, "b t (h d) -> b h t d", h=self.n_kv_heads)
        v = rearrange(v, "b t (h d) -> b h t d", h=self.n_kv_heads)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.use_rope:
            q, k = apply_rope(q, cos, sin, self.rope_layout), apply_rope(k, cos, sin, self.rope_layout)
        core = self.softcapped_core if self.softcap is not None else self.core
        if self.sinks is not None:
            core = self.sink_core
        if cache is not None:
            k, v, mask, causal = cache.update(k, v, mask)
            out = core(q, k, v, mask, causal)
        elif self.selective and torch.is_grad_enabled() and x.requires_grad:
            with set_checkpoint_early_stop(False):   # recompute the whole core (matters for the math backend)
                out = checkpoint(core, q, k, v, mask, mask is None, use_reentrant=False)
        else:
            out = core(q, k, v, mask, mask is None)     # the model's layers are causal: no mask = the causal kernel
        return self.o_proj(rearrange(out, "b h t d -> b t (h d)"))

    def core(self, q: Float[Tensor, "batch heads seq head_dim"], k: Float[Tensor, "batch kv_heads keys head_dim"],
             v: Float[Tensor, "batch kv_heads keys head_dim"], mask: Tensor | None = None, causal: bool = False
             ) -> Float[Tensor, "batch heads seq head_dim"]:
        """softmax(QKᵀ·scale + mask)·V: one SDPA call (flash kernel where available). `mask` None means no mask:
        every query sees every key, as None means everywhere else (torch's SDPA, CS336's attention), unless
        `causal` (SDPA's is_causal: query i sees keys up to i). The layers pass causal=True with no mask."""
        gqa = self.n_kv_heads != self.n_heads
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None,
                                              scale=self.scale, enable_gqa=gqa)

    def sink_core(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False) -> Tensor:
        """The core with gpt-oss's attention sinks (models.mla.sink_core)."""
        return sink_core(q, k, v, self.sinks, mask, self.scale, causal)

    def softcapped_core(self, q: Float[Tensor, "batch heads seq head_dim"], k: Float[Tensor, "batch kv_heads keys head_dim"],
                        v: Float[Tensor, "batch kv_heads keys head_dim"], mask: Tensor, causal: bool = False
                        ) -> Float[Tensor, "batch heads seq head_dim"]:
        """softmax(c·tanh(QKᵀ·scale / c) + mask) in fp32, cast back, times V (Gemma 2's soft-capped attention).

        The g = H/K query heads that share a key/value head are stacked along the sequence axis, so QKᵀ and A·V
        are two batched matmuls over (B, K) without copying k or v per head (2·B·H·T·T·D FLOPs each). Saved for
        backward: q (that stacked copy), k, tanh's output and the fp32 softmax (B·H·T·T each), the probabilities
        cast to the activation dtype when it is not fp32, and v. The mask is always given (the model builds one for
        soft-capped layers), so `causal` changes nothing; queries and keys may differ in number (a KV cache).
        """
        b, h, t, d = q.shape
        keys = k.shape[2]
        g = h // self.n_kv_heads
        scale = self.scale if self.scale is not None else d ** -0.5
        scores = q.reshape(b, self.n_kv_heads, g * t, d) @ k.transpose(-1, -2) * scale
        scores = torch.tanh(scores / self.softcap) * self.softcap
        scores = scores.view(b, self.n_kv_heads, g, t, keys) + mask
        probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        return (probs.view(b, self.n_kv_heads, g * t, keys) @ v).view(b, h, t, d)
