"""Read the config.json of the 2025 mixture-of-experts families that need more than the Llama-style reader.

- deepseek_v3 (transformers' DeepseekV3Config / modeling_deepseek_v3; deepseek-ai/DeepSeek-V3 README_WEIGHTS.md):
  multi-head latent attention from q_lora_rank (null: a direct query projection), kv_lora_rank, qk_nope_head_dim,
  qk_rope_head_dim, v_head_dim; n_routed_experts of moe_intermediate_size, top num_experts_per_tok; n_shared_experts
  always-on experts (one MLP of n_shared_experts · moe_intermediate_size, no gate); layer i is MoE when
  i >= first_k_dense_replace and i % moe_layer_freq == 0, else a dense MLP of intermediate_size;
  num_nextn_predict_layers multi-token-prediction modules (counted apart from n_params); rope_interleave (default
  true: RoPE pairs adjacent dims, rope_layout "interleaved"); n_group / topk_group the
  group-limited routing (expert_groups / expert_groups_per_token; absent or 1: none), used by the token-based
  dispatchers' time (account/time/expert_parallel.py).
- gpt_oss (transformers' GptOssConfig / modeling_gpt_oss): num_local_experts experts of intermediate_size with
  biases, top num_experts_per_tok, a router with bias; q/k/v/o biases (attention_bias, true); one learned
  attention sink per head; sliding_window on the layers layer_types names (default: the even layers).
What our Transformer does not reproduce is listed in the spec's `approximations` (the notes below).
"""

from __future__ import annotations

from trainledger.errors import TrainledgerError
from trainledger.specs.model import TransformerSpec

MOE_MODEL_TYPES = ("deepseek_v3", "gpt_oss")

DEEPSEEK_V3_NOTES = ("DeepSeek-V3's sigmoid routing over expert groups with a bias-corrected score is built as a softmax "
                     "top-k router (the same matrices; e_score_correction_bias is a buffer, not a parameter)",
                     "the multi-token-prediction modules are counted apart (n_params_mtp), not built")
GPT_OSS_NOTES = ("gpt-oss's clamped SwiGLU (swiglu_limit 7, x·sigmoid(1.702·x)·(up + 1)) is built as plain SwiGLU "
                 "(the same matrices)",)


def read_moe_config(config: dict, get, model_type: str, flag: str, *, rope: tuple, n_layers: int,
                    sliding_layers) -> TransformerSpec:
    """The TransformerSpec of a deepseek_v3 or gpt_oss config. From specs.hf_config: `get` its typed key reader,
    `rope` its (θ, partial factor, notes) of the config, `n_layers` the checked layer count, `sliding_layers(rule)`
    the sliding-window layers by layer_types or by the rule."""
    theta, _, notes = rope
    top_theta = get("rope_theta", None, float)
    common = dict(name="config", vocab_size=get("vocab_size"), d_model=get("hidden_size"),
                  n_layers=get("num_hidden_layers"), n_heads=get("num_attention_heads"),
                  max_seq_len=get("max_position_embeddings"), position="rope", norm="rmsnorm", mlp="swiglu",
                  rope_theta=top_theta if top_theta is not None else (theta if theta is not None else 10000.0),
                  tied_embeddings=get("tie_word_embeddings", False, bool))
    if model_type == "gpt_oss":
        bias = get("attention_bias", True, bool)
        return TransformerSpec(
            **common, n_kv_heads=get("num_key_value_heads", common["n_heads"]), d_head=get("head_dim", 64),
            d_ff=get("intermediate_size"), norm_eps=get("rms_norm_eps", 1e-5, float), qkv_bias=bias,
            attn_out_bias=bias, mlp_bias=True, n_experts=get("num_local_experts"),
            experts_per_token=get("num_experts_per_tok"), router_bias=True, attention_sinks=True,
            sliding_window=get("sliding_window", 128),
            sliding_layers=sliding_layers(lambda i: (i + 1) % 2),
            approximations=GPT_OSS_NOTES + notes)
    first_dense, every = get("first_k_dense_replace", 3), get("moe_layer_freq", 1)
    if not 0 <= first_dense <= n_layers or every < 1:
        raise TrainledgerError(f"config keys 'first_k_dense_replace' (0..{n_layers}, the layers) and 'moe_layer_freq' "
                               f"(>= 1) are out of range: {first_dense!r}, {every!r} ({flag})")
    dense = tuple(i for i in range(n_layers) if i < first_dense or i % every)
    expert_d_ff, shared = get("moe_intermediate_size"), get("n_shared_experts", 1)
    rope, nope = get("qk_rope_head_dim", 64), get("qk_nope_head_dim", 128)
    if get("attention_bias", False, bool):
        notes += ("attention_bias true is not built: multi-head latent attention without biases",)
    return TransformerSpec(
        **common, n_kv_heads=common["n_heads"], d_head=nope + rope, d_ff=expert_d_ff,
        rope_layout="interleaved" if get("rope_interleave", True, bool) else "half",   # transformers' DeepseekV3Config
        norm_eps=get("rms_norm_eps", 1e-6, float), n_experts=get("n_routed_experts"),
        experts_per_token=get("num_experts_per_tok"), renormalize_topk=get("norm_topk_prob", True, bool),
        shared_expert_d_ff=shared * expert_d_ff if shared else None, dense_layers=dense,
        dense_d_ff=get("intermediate_size") if dense else None, kv_lora_rank=get("kv_lora_rank"),
        q_lora_rank=get("q_lora_rank", None), qk_rope_head_dim=rope, v_head_dim=get("v_head_dim", 128),
        n_mtp_layers=get("num_nextn_predict_layers", 0), **_router_groups(get("n_group", 1), get("topk_group", 1)),
        approximations=DEEPSEEK_V3_NOTES + notes)


def _router_groups(n_group: int, topk_group: int) -> dict:
    """Group-limited routing of a deepseek_v3 config (n_group groups, a token's top-k within topk_group of them);
    one group is no limit."""
    if n_group <= 1:
        return {"expert_groups": 0, "expert_groups_per_token": 0}
    return {"expert_groups": n_group, "expert_groups_per_token": topk_group}
