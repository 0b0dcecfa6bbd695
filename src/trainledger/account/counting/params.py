"""Parameter counts of a model spec, by component: exact, pure arithmetic (no torch).

Counted as the Hugging Face / PyTorch modules the presets come from are built (every weight and bias
that is an `nn.Parameter`), so the totals match `sum(p.numel() for p in unique(model.parameters()))`
of a model built on the meta device. Tied weights (GPT-2's LM head = token embedding) are counted once.

Conventions (DESIGN.md):
- `n_params`: unique parameters, tied weights once.
- `n_params_non_embedding`: `n_params` minus the token embedding, the position embedding and an
  *untied* LM head (the convention of the Qwen and Llama model cards). A tied head costs nothing extra,
  so nothing further is subtracted for it.
- `n_params_active`: parameters a token touches; for mixture-of-experts models only
  `experts_per_token` of the `n_experts` MLPs count (Mixtral 8x7B: ~12.9B of ~46.7B). Equal to
  `n_params` for dense models.
- `n_params_active_excl_embedding`: `n_params_active` without the token and position embeddings, the
  lookups a token reads one row of and multiplies nothing with (the LM head stays). Model cards of MoE
  models differ in which of the two they print: gpt-oss's Table 1 gives this one (5.13B active for
  gpt-oss-120b, "not counting the embedding"), DeepSeek-V3's README_WEIGHTS.md 36.7B matches it (0.2 %) and
  not the 37.55B with the embedding; Qwen3's 22B activated is the count with it.
"""

from __future__ import annotations

from trainledger.specs.model import CruncherSpec, ModelSpec, TransformerSpec

COMPONENTS = ("token_embedding", "position_embedding", "attention", "mlp", "router", "norms", "lm_head")


def attention_params_per_layer(spec: TransformerSpec) -> int:
    """Parameters of one attention block: q, k, v, o projections and their biases.

    q: d_model -> n_heads·d_head; k, v: d_model -> n_kv_heads·d_head (grouped-query attention,
    Ainslie et al. 2023, arXiv:2305.13245); o: n_heads·d_head -> d_model. Biases on q/k/v when
    `qkv_bias` (GPT-2, Qwen2), on o when `attn_out_bias` (GPT-2). Fused projections (GPT-NeoX
    query_key_value, Phi-3 qkv_proj, MPT Wqkv) hold the same weights. QK-norm weights count as norms.
    Multi-head latent attention (`mla_attention_params`) replaces all of it; attention sinks (gpt-oss) add one
    learned logit per head.
    """
    sinks = spec.n_heads if spec.attention_sinks else 0
    if spec.is_mla:
        return mla_attention_params(spec) + sinks
    d, q_dim, kv_dim = spec.d_model, spec.n_heads * spec.head_dim, spec.kv_heads * spec.head_dim
    weights = d * q_dim + 2 * d * kv_dim + q_dim * d
    biases = (q_dim + 2 * kv_dim if spec.qkv_bias else 0) + (d if spec.attn_out_bias else 0)
    return weights + biases + sinks


def mla_attention_matrices(spec: TransformerSpec) -> list[tuple[str, int, int]]:
    """The weight matrices of one multi-head latent attention block: (name, in_features, out_features).

    DeepSeek-V3 (arXiv:2412.19437, Sec. 2.1.1, Eqs. 1-11; transformers' DeepseekV3Attention): queries
    d -> q_lora_rank (q_a_proj) -> n_heads·(nope + rope) (q_b_proj), or d -> n_heads·(nope + rope) directly
    without q_lora_rank; keys and values d -> kv_lora_rank + rope (kv_a_proj_with_mqa: the latent and one shared
    RoPE key), latent -> n_heads·(nope + v_head_dim) (kv_b_proj); output n_heads·v_head_dim -> d (o_proj).
    Here d_head = nope + rope.
    """
    d, h, qk, rope, latent = spec.d_model, spec.n_heads, spec.head_dim, spec.qk_rope_head_dim, spec.kv_lora_rank
    nope = qk - rope
    query = ([("q_a_proj", d, spec.q_lora_rank), ("q_b_proj", spec.q_lora_rank, h * qk)] if spec.q_lora_rank
             else [("q_proj", d, h * qk)])
    return query + [("kv_a_proj", d, latent + rope), ("kv_b_proj", latent, h * (nope + spec.value_dim)),
                    ("o_proj", h * spec.value_dim, d)]


def mla_attention_params(spec: TransformerSpec) -> int:
    """Parameters of one multi-head latent attention block (no biases; its two latent norms count as norms)."""
    return sum(fan_in * fan_out for _, fan_in, fan_out in mla_attention_matrices(spec))


def mlp_params(spec: TransformerSpec, d_ff: int | None = None) -> int:
    """Parameters of one MLP of width `d_ff` (default: spec.d_ff, one expert of an MoE layer).

    GELU MLP (GPT-2): d_model -> d_ff -> d_model, 2 matrices, biases d_ff + d_model when `mlp_bias`.
    Gated (SwiGLU: Shazeer 2020, arXiv:2002.05202, Llama; GeGLU: Gemma): down(act(gate(x)) * up(x)),
    3 matrices, biases 2·d_ff + d_model when `mlp_bias`.
    """
    d, f = spec.d_model, spec.d_ff if d_ff is None else d_ff
    if spec.gated_mlp:
        return 3 * d * f + ((2 * f + d) if spec.mlp_bias else 0)
    return 2 * d * f + ((f + d) if spec.mlp_bias else 0)


mlp_params_per_expert = mlp_params   # its earlier name, kept for callers


def router_params_per_layer(spec: TransformerSpec) -> int:
    """Parameters of one MoE layer's gates: the bias-free router d_model -> n_experts (Mixtral's `gate`), plus the
    shared expert's d_model -> 1 gate when `shared_expert_gate` (Qwen2-MoE); 0 for a dense model."""
    if not spec.is_moe:
        return 0
    return (spec.d_model * spec.n_experts + (spec.n_experts if spec.router_bias else 0)
            + (spec.d_model if spec.shared_expert_gate else 0))


def norm_params(spec: TransformerSpec, dim: int | None = None) -> int:
    """Parameters of one norm over `dim` (default d_model): weight, plus a bias for LayerNorm with `norm_bias` (GPT-2)."""
    dim = spec.d_model if dim is None else dim
    return dim * (2 if spec.norm == "layernorm" and spec.norm_bias else 1)


def norm_params_per_layer(spec: TransformerSpec) -> int:
    """Norm parameters of one layer: 2 norms (4 with Gemma's sandwich norms, 1 for a parallel block whose branches
    share it: transformers' PhiDecoderLayer.input_layernorm, FalconDecoderLayer without num_ln_in_parallel_attn = 2) of
    d_model, plus QK-norm's two of d_head,
    plus multi-head latent attention's norms of its latents (q_a_layernorm, kv_a_layernorm: DeepSeek-V3)."""
    latent = (norm_params(spec, spec.kv_lora_rank) + (norm_params(spec, spec.q_lora_rank) if spec.q_lora_rank else 0)
              if spec.is_mla else 0)
    per_layer = 4 if spec.sandwich_norm else 1 if spec.parallel_shared_norm else 2   # Phi/Falcon-7B: one shared norm
    return (per_layer * norm_params(spec) + (2 * norm_params(spec, spec.head_dim) if spec.qk_norm else 0)
            + latent)


def mlp_params_per_layer(spec: TransformerSpec, layer: int) -> int:
    """MLP parameters of layer `layer`: all n_experts experts and the shared expert (MoE layer), or one dense MLP
    (of `dense_d_ff` in an MoE model's `dense_layers`)."""
    if spec.is_moe_layer(layer):
        shared = mlp_params(spec, spec.shared_expert_d_ff) if spec.shared_expert_d_ff else 0
        return spec.n_experts * mlp_params(spec) + shared
    return mlp_params(spec, spec.dense_d_ff if spec.is_moe else spec.d_ff)


def param_counts(spec: ModelSpec) -> dict:
    """Parameter counts (a count, not bytes) of `spec`: totals and per-component breakdown.

    Returns {"n_params", "n_params_non_embedding", "n_params_active", "n_params_active_excl_embedding",
    "n_params_per_layer",
    "components": {token_embedding, position_embedding, attention, mlp, router, norms, lm_head}}.
    Components sum to n_params. `attention`, `mlp` (all experts, shared experts, dense layers), `router`
    (router + shared-expert gate) and `norms` (incl. QK-norms and the final norm) are totals over all layers;
    `lm_head` is 0 when tied to the token embedding (plus Phi's bias when `lm_head_bias`). `n_params_per_layer` is
    the largest layer (an MoE layer when some layers are dense). n_params_active counts a token's `experts_per_token` routed experts and
    everything else (the shared expert included).
    CruncherSpec (CS336 Lecture 2): n_layers × Linear(dim, dim) + Linear(dim, 1), no biases,
    dim²·n_layers + dim parameters, reported under component `linear`.
    """
    if isinstance(spec, CruncherSpec):
        n = spec.dim * spec.dim * spec.n_layers + spec.dim
        return {"n_params": n, "n_params_non_embedding": n, "n_params_active": n, "n_params_active_excl_embedding": n,
                "n_params_per_layer": spec.dim * spec.dim, "components": {"linear": n}}
    if not isinstance(spec, TransformerSpec):
        raise TypeError(f"param_counts needs a TransformerSpec or CruncherSpec, got {type(spec).__name__}")
    L, moe_layers = spec.n_layers, spec.n_moe_layers
    token = spec.vocab_size * spec.d_model
    position = spec.max_seq_len * spec.d_model if spec.position == "learned" else 0
    attention = attention_params_per_layer(spec)
    norms_per_layer = norm_params_per_layer(spec)
    # the head's bias (Phi: PhiForCausalLM.lm_head = nn.Linear(d, V, bias=True)) counts with the head, but stays in
    # n_params_non_embedding (only the untied head's matrix leaves it, as Transformer.n_params(non_embedding) does)
    head = 0 if spec.tied_embeddings else spec.vocab_size * spec.d_model
    head_bias = spec.vocab_size if spec.lm_head_bias else 0
    mlp_groups = [(mlp_params_per_layer(spec, layer), count) for layer, count in spec.layer_groups()]
    components = {
        "token_embedding": token,
        "position_embedding": position,
        "attention": L * attention,
        "mlp": sum(n * count for n, count in mlp_groups),
        "router": moe_layers * router_params_per_layer(spec),
        "norms": L * norms_per_layer + norm_params(spec),
        "lm_head": head + head_bias,
    }
    n_params = sum(components.values())
    inactive = moe_layers * (spec.n_experts - spec.experts_per_token) * mlp_params(spec)
    return {
        "n_params_mtp": mtp_params(spec),
        "n_params": n_params,
        "n_params_non_embedding": n_params - token - position - head,
        "n_params_active": n_params - inactive,
        "n_params_active_excl_embedding": n_params - inactive - token - position,
        "n_params_per_layer": attention + max(n for n, _ in mlp_groups) + (router_params_per_layer(spec) if moe_layers else 0)
                              + norms_per_layer,
        "components": components,
    }


def n_params(spec: ModelSpec) -> int:
    """Unique parameters of `spec` (a count), tied weights counted once."""
    return param_counts(spec)["n_params"]


def kaplan_non_embedding_params(spec: TransformerSpec) -> int:
    """Kaplan et al.'s approximation of non-embedding parameters: 12·n_layers·d_model² (a count).

    Kaplan et al. 2020, "Scaling Laws for Neural Language Models" (arXiv:2001.08361), Table 1:
    N ≈ 2·d_model·n_layer·(2·d_attn + d_ff) = 12·n_layer·d_model² with d_attn = d_model, d_ff = 4·d_model.
    Leaves out biases and norms, and is wrong for SwiGLU/GQA models whose d_ff and kv widths differ;
    use it to compare, `param_counts` for the exact figure.
    """
    return 12 * spec.n_layers * spec.d_model ** 2


def mtp_params(spec: TransformerSpec) -> int:
    """Parameters of the multi-token-prediction modules (a count), kept apart from `n_params` (0 without them).

    DeepSeek-V3 (arXiv:2412.19437, Sec. 2.2; README_WEIGHTS.md of deepseek-ai/DeepSeek-V3): each module is two
    RMSNorms of d_model (enorm, hnorm), a projection 2·d_model -> d_model (eh_proj), one more transformer layer
    like the last one (an MoE layer), and the shared head's final norm; the embedding and the output head are
    shared with the main model and not counted again.
    """
    if not isinstance(spec, TransformerSpec) or not spec.n_mtp_layers:
        return 0
    last = spec.n_layers - 1
    layer = (attention_params_per_layer(spec) + mlp_params_per_layer(spec, last) + norm_params_per_layer(spec)
             + (router_params_per_layer(spec) if spec.is_moe_layer(last) else 0))
    return spec.n_mtp_layers * (layer + 3 * norm_params(spec) + 2 * spec.d_model * spec.d_model)
