"""Read the config.json of the parallel-block families, Phi and Falcon, into a TransformerSpec (pure JSON).

Each is read as transformers 5 builds it (its config class's keys and defaults; the modeling file named):
- phi (PhiConfig / modeling_phi; microsoft/phi-1, phi-1_5, phi-2): hidden_size, intermediate_size,
  num_hidden_layers, num_attention_heads, num_key_value_heads (= heads), max_position_embeddings (2048),
  layer_norm_eps (1e-5), hidden_act (gelu_new), tie_word_embeddings (false), partial_rotary_factor (0.5, at the top
  level or under rope_parameters), rope_theta (10000), qk_layernorm (false). One LayerNorm per layer
  (input_layernorm) feeds attention and MLP in parallel: x + attn(h) + mlp(h); q_proj, k_proj, v_proj and dense
  with biases, fc1/fc2 with biases, a final LayerNorm, and an untied lm_head with a bias.
- falcon (FalconConfig / modeling_falcon; tiiuae/falcon-7b, 40b, 180B): hidden_size (4544), num_hidden_layers (32),
  num_attention_heads (71), num_kv_heads (= heads), ffn_hidden_size (4·hidden), bias (false: on
  query_key_value, dense, dense_h_to_4h, dense_4h_to_h), layer_norm_epsilon (1e-5), activation (gelu), alibi
  (false: RoPE), parallel_attn (true), multi_query (true), new_decoder_architecture (false),
  num_ln_in_parallel_attn (2 under new_decoder_architecture), tie_word_embeddings (true). The fused
  query_key_value is d -> (H + 2·kv)·d_head with kv = num_kv_heads (new_decoder_architecture), 1 (multi_query)
  or H; a parallel block reads one shared LayerNorm (falcon-7b) or two (ln_attn, ln_mlp: falcon-40b/180B), a
  sequential one (parallel_attn false) input_layernorm then post_attention_layernorm.
What transformers refuses to build (a Falcon with new_decoder_architecture and parallel_attn false), or builds with
another position scheme we do not (Falcon with ALiBi: the falcon-rw models), is a one-line TrainledgerError.
"""

from __future__ import annotations

from trainledger.errors import TrainledgerError
from trainledger.specs.model import TransformerSpec

PARALLEL_MODEL_TYPES = ("phi", "falcon")
_GELU = {"gelu": "none", "gelu_new": "tanh", "gelu_fast": "tanh", "gelu_pytorch_tanh": "tanh"}   # transformers ACT2FN


def read_parallel_config(config: dict, get, model_type: str, flag: str, *, rope: tuple) -> TransformerSpec:
    """The TransformerSpec of a phi or falcon config. From specs.hf_config: `get` its typed key reader and `rope` the
    (θ, partial factor, notes) of the config's rope_parameters / rope_scaling."""
    return (_phi if model_type == "phi" else _falcon)(config, get, flag, rope)


def _activation(get, key: str, default: str, flag: str) -> str:
    act = get(key, default, str)
    if act not in _GELU:
        raise TrainledgerError(f"config key {key!r} is {act!r}; supported: {', '.join(_GELU)} ({flag})")
    return _GELU[act]


def _theta(get, rope: tuple) -> float:
    top = get("rope_theta", None, float)
    return top if top is not None else (rope[0] if rope[0] is not None else 10000.0)


def _phi(config: dict, get, flag: str, rope: tuple) -> TransformerSpec:
    """transformers' PhiForCausalLM: partial RoPE, a shared-norm parallel block, biases everywhere, a biased head."""
    d_model, n_heads = get("hidden_size", 2048), get("num_attention_heads", 32)
    top_factor = get("partial_rotary_factor", None, float)
    factor = top_factor if top_factor is not None else (rope[1] if rope[1] is not None else 0.5)   # PhiConfig's 0.5
    head_dim = get("head_dim", None)
    return TransformerSpec(
        name="config", vocab_size=get("vocab_size", 51200), d_model=d_model, n_layers=get("num_hidden_layers", 24),
        n_heads=n_heads, n_kv_heads=get("num_key_value_heads", n_heads), d_ff=get("intermediate_size", 8192),
        d_head=None if head_dim is None or head_dim * n_heads == d_model else head_dim,
        max_seq_len=get("max_position_embeddings", 2048), position="rope", rope_theta=_theta(get, rope),
        partial_rotary_factor=factor, norm="layernorm", norm_bias=True, norm_eps=get("layer_norm_eps", 1e-5, float),
        mlp="gelu", gelu_approximate=_activation(get, "hidden_act", "gelu_new", flag),
        qkv_bias=True, attn_out_bias=True, mlp_bias=True, lm_head_bias=True,
        tied_embeddings=get("tie_word_embeddings", False, bool), qk_norm=get("qk_layernorm", False, bool),
        parallel_residual=True, parallel_shared_norm=True, family="phi", approximations=rope[2],
    )


def _falcon(config: dict, get, flag: str, rope: tuple) -> TransformerSpec:
    """transformers' FalconForCausalLM: fused query_key_value (MQA / GQA layouts), parallel or sequential blocks."""
    if get("alibi", False, bool):
        raise TrainledgerError(f"falcon with alibi = true (the falcon-rw models) is not supported: trainledger builds "
                               f"Falcon with RoPE only ({flag})")
    d_model, n_heads = get("hidden_size", 4544), get("num_attention_heads", 71)
    new_arch, parallel = get("new_decoder_architecture", False, bool), get("parallel_attn", True, bool)
    n_norms = get("num_ln_in_parallel_attn", 2 if new_arch else None)
    if new_arch and not parallel:
        raise TrainledgerError(f"falcon with new_decoder_architecture and parallel_attn = false is not buildable "
                               f"(transformers' FalconDecoderLayer reads ln_attn, which it only makes for a parallel "
                               f"block) ({flag})")
    if parallel and not new_arch and n_norms == 2:
        raise TrainledgerError(f"falcon with num_ln_in_parallel_attn = 2 needs new_decoder_architecture = true "
                               f"(transformers reads input_layernorm otherwise, which it does not make) ({flag})")
    if new_arch:
        kv = get("num_kv_heads", None) or n_heads
    else:
        kv = 1 if get("multi_query", True, bool) else n_heads
    bias = get("bias", False, bool)
    return TransformerSpec(
        name="config", vocab_size=get("vocab_size", 65024), d_model=d_model, n_layers=get("num_hidden_layers", 32),
        n_heads=n_heads, n_kv_heads=kv, d_ff=get("ffn_hidden_size", None) or 4 * d_model,
        max_seq_len=get("max_position_embeddings", 2048), position="rope", rope_theta=_theta(get, rope),
        partial_rotary_factor=rope[1] if rope[1] is not None else 1.0, norm="layernorm", norm_bias=True,
        norm_eps=get("layer_norm_epsilon", 1e-5, float), mlp="gelu",
        gelu_approximate=_activation(get, "activation", "gelu", flag), qkv_bias=bias, attn_out_bias=bias,
        mlp_bias=bias, tied_embeddings=get("tie_word_embeddings", True, bool), parallel_residual=parallel,
        parallel_shared_norm=parallel and n_norms != 2, family="falcon", approximations=rope[2],
    )
