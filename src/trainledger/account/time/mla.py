"""The kernels of multi-head latent attention (DeepSeek-V2/V3) in one layer, forward and backward, on one GPU. Pure.

MLA as it runs (DeepSeek-V2 arXiv:2405.04434 Sec. 2.1; DeepSeek-V3 arXiv:2412.19437 Sec. 2.1.1, Eqs. 1-11), with
H heads (H/tp on this rank), qk heads of nope + rope (128 + 64) and value heads of v (128), over n tokens:
  q down-projection d -> q_lora_rank (1536), its RMSNorm, q up-projection q_lora_rank -> H·(nope + rope);
  kv down-projection d -> kv_lora_rank + rope (512 + 64: the latent and one RoPE key shared by every head), the
  latent's RMSNorm, kv up-projection kv_lora_rank -> H·(nope + v);
  RoPE on the rope dims of q and on the shared key, the shared key broadcast to every head and concatenated after
  k's nope dims (and q's after its nope dims); the attention core with qk head dim nope + rope and v head dim v
  (account.time.kernels._attention_core); the output projection H·v -> d.
The five GEMMs are account.counting.params.mla_attention_matrices, so their FLOPs are account.counting.flops's.

Two implementations:
- `megatron`: Megatron-Core's MLASelfAttention with Transformer Engine (megatron/core/transformer/
  multi_latent_attention.py): the down-projections are TELinear in "duplicated" mode (replicated over TP, each rank
  projecting its own n/tp sequence-parallel tokens), the latent norms fused into the up-projections
  (TELayerNormColumnParallelLinear; q_layernorm and kv_layernorm are IdentityOp), RoPE by the fused kernels
  fused_apply_mla_rope_for_q (reads q, writes the query) and fused_apply_mla_rope_for_kv (reads kv and the shared
  key, writes key and value); backward the same bytes the other way, the shared key's gradient summed over heads.
- `eager` (our torch LatentAttention, models/mla.py): nn.Linear, Hugging Face-style RMSNorm, rotate-half RoPE on
  the rope slices, torch.cat for q and k (k's rope part expanded first), SDPA.
Not modelled: the all-gather of the shared RoPE key under sequence parallelism (n × 64 elements, TP comm is
account.time.comm's, which still sizes MLA's collectives as ordinary attention's).
"""

from __future__ import annotations

from trainledger.account.time import eager
from trainledger.account.time.eager import ew, linear_kernels
from trainledger.account.time.shard import Dtypes, Shard

FP32 = 4


def mla_dims(spec, tp: int) -> dict:
    """MLA's sizes on one tensor-parallel rank: heads h, nope, rope, v, q_rank (0: a direct query), latent."""
    rope = spec.qk_rope_head_dim
    return {"h": spec.n_heads / tp, "nope": spec.head_dim - rope, "rope": rope, "v": spec.value_dim,
            "q_rank": spec.q_lora_rank or 0, "latent": spec.kv_lora_rank}


def _te_linear(name: str, n: float, fan_in: float, fan_out: float, dt: Dtypes) -> tuple[list, list]:
    """A Transformer Engine Linear: one GEMM forward; dgrad + wgrad backward, the weight gradient accumulated into
    fp32 main_grad inside the GEMM (gradient_accumulation_fusion): account.time.eager.linear_kernels, no autocast."""
    dt = dt.without_autocast()
    return (linear_kernels(name, n, fan_in, fan_out, dt, backward=False),
            linear_kernels(name, n, fan_in, fan_out, dt, backward=True, fused_accumulation=True))


def megatron_mla(spec, shard: Shard, core: dict) -> tuple[list, list]:
    """(forward, backward) kernels of Megatron-Core's MLASelfAttention after the input norm for micro-batch `shard`
    (module docstring), given the attention core's kernels `core`."""
    n, n_sp, dt = shard.tokens, shard.stream_tokens, shard.dtypes
    a = dt.a
    m = mla_dims(spec, shard.tp)
    h, nope, rope, v, q_rank, latent = m["h"], m["nope"], m["rope"], m["v"], m["q_rank"], m["latent"]
    d, qk = spec.d_model, nope + rope
    ops = []                                              # (forward, backward) pairs in forward order
    if q_rank:
        ops.append(_te_linear("q_down_proj", n_sp, d, q_rank, dt))
    ops.append(_te_linear("kv_down_proj", n_sp, d, latent + rope, dt))
    if q_rank:   # the down-projections' input gradients summed (both read the input norm's output)
        ops.append(([], [ew("mla_down_proj_grad_add", 3 * n_sp * d * a, role="dgrad")]))
        ops.append(([ew("q_layernorm", 2 * n_sp * q_rank * a)],
                    [ew("q_layernorm_backward", 5 * n_sp * q_rank * a, count=2, role="dgrad")]))
        ops.append(_te_linear("q_up_proj", n, q_rank, h * qk, dt))
    else:
        ops.append(_te_linear("q_proj", n, d, h * qk, dt))
    ops.append(([ew("kv_layernorm", 2 * n_sp * latent * a)],
                [ew("kv_layernorm_backward", 5 * n_sp * latent * a, count=2, role="dgrad")]))
    ops.append(_te_linear("kv_up_proj", n, latent, h * (nope + v), dt))
    # fused RoPE: q read and written; kv and the shared key read, key and value written (backward the reverse)
    q_bytes = 2 * n * h * qk * a
    kv_bytes = n * (h * (nope + v) + rope) * a + n * h * (qk + v) * a
    ops.append(([ew("mla_rope_q", q_bytes), ew("mla_rope_kv", kv_bytes)],
                [ew("mla_rope_q_backward", q_bytes, role="dgrad"),
                 ew("mla_rope_kv_backward", kv_bytes, role="dgrad")]))
    ops.append((core["forward"], core["backward"]))
    ops.append(_te_linear("proj", n, h * v, d, dt))
    return [k for f, _ in ops for k in f], [k for _, b in reversed(ops) for k in b]


def eager_mla(spec, shard: Shard, core: dict, rope_kernels) -> list[tuple[list, list]]:
    """(forward, backward) pairs of our torch LatentAttention (models/mla.py) after the input norm for micro-batch
    `shard`, in forward order (eager.layer runs the backward in reverse), given the attention core's kernels `core`
    and the RoPE's `rope_kernels` (account/time/eager.py rope). The input norm's output is fp32 under autocast."""
    n, dt = shard.tokens, shard.dtypes
    a = dt.a
    norm_out = eager.norm_output_bytes(dt)
    m = mla_dims(spec, shard.tp)
    h, nope, rope, v, q_rank, latent = m["h"], m["nope"], m["rope"], m["v"], m["q_rank"], m["latent"]
    d, qk = spec.d_model, nope + rope
    fp32_in = norm_out == FP32
    pairs = [([], eager.grad_sum("mla_input_grad_sum", n * d, norm_out, 2))]     # x feeds q and kv
    if q_rank:
        pairs.append(eager.linear("q_a_proj", n, d, q_rank, dt, input_fp32=fp32_in))
        pairs.append(eager.norm(spec, n, q_rank, a, norm_out, "q_a"))
        pairs.append(eager.linear("q_b_proj", n, q_rank, h * qk, dt, input_fp32=fp32_in))
    else:
        pairs.append(eager.linear("q_proj", n, d, h * qk, dt, input_fp32=fp32_in))
    pairs.append(eager.linear("kv_a_proj", n, d, latent + rope, dt, input_fp32=fp32_in))
    pairs.append(eager.norm(spec, n, latent, a, norm_out, "kv_a"))
    pairs.append(eager.linear("kv_b_proj", n, latent, h * (nope + v), dt, input_fp32=fp32_in))
    pairs.append(rope_kernels(n, h * qk, h * rope, a))        # q's rope slices, rotated and concatenated back
    pairs.append(rope_kernels(n, rope, rope, a))              # the one shared key
    # the shared key expanded to every head (a view) and concatenated after k's nope dims; backward the nope slice
    # of its gradient made contiguous and the rope slice summed over the heads
    pairs.append(([ew("mla_cat_k", 2 * n * h * qk * a)],
                  [ew("mla_cat_k_backward", 2 * n * h * nope * a + n * h * rope * a + n * rope * a, count=2,
                      role="dgrad")]))
    pairs.append((eager.host("head_rearranges", 8) + core["forward"],
                  core["backward"] + eager.host("head_rearranges_backward", 8, "dgrad")))
    pairs.append(eager.linear("o_proj", n, h * v, d, dt))
    return pairs
