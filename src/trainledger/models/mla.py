"""Multi-head latent attention (DeepSeek-V2/V3) and attention with learned sinks (gpt-oss)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from jaxtyping import Float
from torch import Tensor, nn

from trainledger.models.norms import make_norm
from trainledger.models.rope import apply_rope


class LatentAttention(nn.Module):
    """DeepSeek-V3's multi-head latent attention (arXiv:2412.19437, Sec. 2.1.1, Eqs. 1-11), in training form.

    For x of shape (B, T, d), H heads, query/key heads of D = nope + rope dims, value heads of V dims:
        c_q = norm(x W_qa)          d -> q_lora_rank          (or q = x W_q directly without q_lora_rank)
        q   = c_q W_qb              q_lora_rank -> H·D; its last `rope` dims of each head get RoPE
        [c_kv, k_r] = x W_kva       d -> kv_lora_rank + rope; k_r is one RoPE key shared by every head
        [k_c, v] = norm(c_kv) W_kvb kv_lora_rank -> H·(nope + V)
        k = [k_c, RoPE(k_r)] per head; out = softmax(q kᵀ / √D) v W_o, W_o: H·V -> d
    The matrices are those of account.counting.params.mla_attention_matrices, so numel and FLOPs agree with the
    count. RoPE is applied in the spec's rope_layout (DeepSeek-V3's config: interleaved pairs, rope_interleave). With a KV cache (generation) the full per-head keys and values are cached, not the latent
    (DeepSeek-V2's weight absorption is not done).
    """

    def __init__(self, spec, *, device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        d, h = spec.d_model, spec.n_heads
        self.n_heads, self.rope_dim, self.value_dim = h, spec.qk_rope_head_dim, spec.value_dim
        self.nope_dim, self.latent = spec.head_dim - spec.qk_rope_head_dim, spec.kv_lora_rank
        self.selective = False
        self.rope_layout = spec.rope_layout
        if spec.q_lora_rank:
            self.q_a_proj = nn.Linear(d, spec.q_lora_rank, bias=False, **factory)
            self.q_a_norm = make_norm(spec, spec.q_lora_rank, **factory)
            self.q_b_proj = nn.Linear(spec.q_lora_rank, h * spec.head_dim, bias=False, **factory)
        else:
            self.q_proj = nn.Linear(d, h * spec.head_dim, bias=False, **factory)
        self.kv_a_proj = nn.Linear(d, self.latent + self.rope_dim, bias=False, **factory)
        self.kv_a_norm = make_norm(spec, self.latent, **factory)
        self.kv_b_proj = nn.Linear(self.latent, h * (self.nope_dim + self.value_dim), bias=False, **factory)
        self.o_proj = nn.Linear(h * self.value_dim, d, bias=False, **factory)

    def forward(self, x: Float[Tensor, "batch seq d_model"], cos: Tensor | None = None, sin: Tensor | None = None,
                mask: Tensor | None = None, cache=None) -> Float[Tensor, "batch seq d_model"]:
        q = self.q_b_proj(self.q_a_norm(self.q_a_proj(x))) if hasattr(self, "q_a_proj") else self.q_proj(x)
        q = rearrange(q, "b t (h d) -> b h t d", h=self.n_heads)
        latent, k_rope = self.kv_a_proj(x).split([self.latent, self.rope_dim], dim=-1)
        kv = rearrange(self.kv_b_proj(self.kv_a_norm(latent)), "b t (h d) -> b h t d", h=self.n_heads)
        k_nope, v = kv.split([self.nope_dim, self.value_dim], dim=-1)
        q_nope, q_rope = q.split([self.nope_dim, self.rope_dim], dim=-1)
        k_rope = apply_rope(k_rope[:, None], cos, sin, self.rope_layout).expand(-1, self.n_heads, -1, -1)
        q = torch.cat((q_nope, apply_rope(q_rope, cos, sin, self.rope_layout)), dim=-1)
        k = torch.cat((k_nope, k_rope), dim=-1)
        causal = mask is None
        if cache is not None:       # the full per-head keys and values are cached (not the latent: no absorption)
            k, v, mask, causal = cache.update(k, v, mask)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        return self.o_proj(rearrange(out, "b h t d -> b t (h d)"))


def sink_core(q: Float[Tensor, "batch heads seq head_dim"], k: Float[Tensor, "batch kv_heads keys head_dim"],
              v: Float[Tensor, "batch kv_heads keys head_dim"], sinks: Float[Tensor, "heads"], mask: Tensor | None,
              scale: float | None, causal: bool = True) -> Float[Tensor, "batch heads seq head_dim"]:
    """softmax over [QKᵀ·scale + mask, sink_h] without the sink column, times V (gpt-oss's attention sinks:
    one learned logit per head that takes probability mass but contributes no value; OpenAI gpt-oss model card,
    arXiv:2508.10925, Sec. 2.1). Written out (SDPA has no sinks): 2·B·H·T·T·D FLOPs each for QKᵀ and A·V.
    No `mask`: causal when `causal` (the T queries are the last T of the keys), else every key is seen (a decoding
    query over its cache; it saw only the first key before)."""
    b, h, t, d = q.shape
    g = h // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    scores = q @ k.transpose(-1, -2) * (scale if scale is not None else d ** -0.5)
    keys = k.shape[2]
    if mask is None and causal:
        mask = torch.full((t, keys), float("-inf"), device=q.device, dtype=q.dtype).triu(keys - t + 1)
    if mask is not None:
        scores = scores + mask
    column = sinks.to(scores.dtype).view(1, h, 1, 1).expand(b, h, t, 1)
    probs = torch.softmax(torch.cat((scores, column), dim=-1).float(), dim=-1)[..., :-1].to(q.dtype)
    return probs @ v
