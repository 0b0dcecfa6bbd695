"""Operators our torch Transformer dispatches in one inference forward (models/: eager PyTorch, KV cache). Pure.

On a CPU, or a GPU that waits for its launches, a decoding step of a small model costs its operator count ×
the machine's fixed cost per operator (the Python call, the dispatcher, the allocator: independent of the
tensor's size) more than its arithmetic: `measure.calibrate` measures that cost per operator
(`decode_op_overhead_seconds`), and these counts say how many operators a step has. They are the aten operators
torch's dispatcher sees (views included: a view is dispatched and costs bookkeeping too), counted from the code
of models/transformer.py, attention.py, rope.py, norms.py, mlp.py, kv_cache.py, sampling.py and generation.py,
and checked against a TorchDispatchMode count for each family (tests/account/test_inference.py).
Mixture-of-experts layers route data-dependently: counted for min(n_experts, routed tokens) busy experts.
"""

from __future__ import annotations

# torch ops of one norm call (models/norms.py): LayerNorm is one fused op; Llama's RMSNorm: x.to(fp32), pow, mean,
# add eps, rsqrt, mul, .to(dtype), weight·x; Gemma's: x.float(), pow, mean, add, rsqrt, mul, w.float(), 1 + w,
# mul, .to(dtype)
NORM_OPS = {"layernorm": 1, "rmsnorm": 8, "gemma_rmsnorm": 10}
# one MLP call: up, act, down (GELU); gate, act, up, mul, down (SwiGLU, GeGLU)
MLP_OPS = {"gelu": 3, "swiglu": 5, "geglu": 5}
ROPE_TABLE_OPS = 16        # rope_cos_sin: inv_freq (arange, float, div, pow, reciprocal, mul), positions (arange,
                           # float), outer product (2 unsqueeze, mul), cat, cos, cast, sin, cast
ROPE_OPS = 6               # apply_rope on one tensor: x·cos, chunk, neg, cat, ·sin, add
PARTIAL_ROPE_EXTRA = 3     # partial rotary: two slices and the cat back
SOFTCAP_CORE_OPS = 15      # Attention.softcapped_core: reshape, transpose, matmul, mul, div, tanh, mul, view, add,
                           # float, softmax, to, view, matmul, view
MASK_OPS = 9               # KVCache.mask for decoding queries: positions (2 arange, 2 unsqueeze), compare, any,
                           # its bool, zeros, fill
ALIBI_MASK_EXTRA = 10      # ... ALiBi's slopes tensor (lift, detach, 4 unsqueeze), distance, cast, multiply, cast
WINDOW_MASK_EXTRA = 8      # ... a wrapped ring buffer: slot positions (rsub, remainder, rsub) and the window test
PREFILL_MASK_OPS = 8       # masks.attention_mask: 2 arange, 2 unsqueeze, compare, zeros, fill, one more cast/view
PREFILL_WINDOW_EXTRA = 8   # ... the window: subtract, compare, or, and the views around them
PREFILL_ALIBI_EXTRA = 8    # ... ALiBi: slopes tensor, distance, cast, multiply, cast, unsqueeze
GENERATION_LOOP_OPS = 5    # per step: [:, -1] of the logits, .float(), argmax, last[:, None] (slice, unsqueeze)
SAMPLING_EXTRA_OPS = 15    # temperature, top-k and top-p filtering and the multinomial draw, over greedy's argmax


def layer_ops(spec, layer: int, decoding: bool, busy_experts: int = 1) -> int:
    """Operators of transformer layer `layer` in one forward: decoding (one new token against the cache) or prefill."""
    norm = NORM_OPS[spec.norm]
    ops = norm + 3 + 6                                   # norm1; q, k, v Linears; three rearranges (reshape, permute)
    ops += 3 if spec.clip_qkv is not None else 0         # clamps
    ops += 2 * norm if spec.qk_norm else 0
    if spec.position == "rope":
        per = ROPE_OPS + (PARTIAL_ROPE_EXTRA if spec.rotary_dim < spec.head_dim else 0)
        ops += 2 * per + 2                               # q and k; the layer's cos[start:], sin[start:]
    ops += 8 if decoding else 6                          # cache: k/v aliases, slot slices + copies (+ read slices)
    if decoding and (spec.position == "alibi" or spec.attn_softcap is not None):
        ops += MASK_OPS + (ALIBI_MASK_EXTRA if spec.position == "alibi" else 0)
        ops += WINDOW_MASK_EXTRA if spec.is_sliding(layer) else 0
    ops += SOFTCAP_CORE_OPS if spec.attn_softcap is not None else 1
    ops += 2 + 1                                         # rearrange back (permute, reshape); o_proj
    ops += 2 * norm if spec.sandwich_norm else 0
    ops += norm + 2                                      # norm2; two residual adds (parallel residual: x + a + m)
    if spec.is_moe_layer(layer):
        ops += moe_ops(spec, busy_experts)
    else:
        ops += MLP_OPS[spec.mlp]
    return ops


def moe_ops(spec, busy_experts: int) -> int:
    """Operators of one MoE MLP call (models/mlp.py MoE): rearranges, router and its fp32 top-k softmax, a
    torch.where per expert, and for each busy expert its gather, MLP, weighting and scatter-add; the shared expert."""
    mlp = MLP_OPS[spec.mlp]
    ops = 2 + 1 + 4 + (2 if spec.renormalize_topk else 0) + 1      # rearranges, router, softmax/topk/casts, zeros
    ops += 2 * spec.n_experts                                       # where(top_index == e): eq, nonzero
    ops += busy_experts * (1 + mlp + 3 + 1)                         # index_select, MLP, weights[...], mul, index_put_
    if spec.shared_expert_d_ff:
        ops += mlp + 1 + (3 if spec.shared_expert_gate else 0)
    return ops


def forward_ops(spec, decoding: bool, batch_size: int = 1, new_tokens: int = 1) -> int:
    """Operators of one Transformer.forward_cached call: embeddings, RoPE tables, the layers, final norm and head."""
    ops = 1                                                          # token embedding
    ops += 4 if spec.scale_embeddings else 0                         # √d as a Python scalar, times x
    ops += 3 if spec.position == "learned" else 0                    # arange, position embedding, add
    if spec.position == "rope":
        ops += ROPE_TABLE_OPS * len({spec.layer_rope_theta(i) for i, _ in spec.layer_groups()})
    if not decoding:                                                 # one mask per kind of layer that needs one
        for sliding in {spec.is_sliding(i) for i, _ in spec.layer_groups()}:
            if sliding or spec.position == "alibi" or spec.attn_softcap is not None:
                ops += PREFILL_MASK_OPS + PREFILL_WINDOW_EXTRA * sliding + PREFILL_ALIBI_EXTRA * (spec.position == "alibi")
    routed = batch_size * new_tokens * spec.experts_per_token
    busy = min(spec.n_experts, routed)
    ops += sum(count * layer_ops(spec, layer, decoding, busy) for layer, count in spec.layer_groups())
    ops += 1 + NORM_OPS[spec.norm] + 1                               # last position's slice, final norm, LM head
    ops += 3 if spec.final_softcap is not None else 0
    return ops


def decode_step_ops(spec, batch_size: int = 1, greedy: bool = True) -> int:
    """Operators of one decoding step of models.generation.generate with a KV cache: the forward of one token
    per sequence plus choosing the next token."""
    return forward_ops(spec, True, batch_size) + GENERATION_LOOP_OPS + (0 if greedy else SAMPLING_EXTRA_OPS)
