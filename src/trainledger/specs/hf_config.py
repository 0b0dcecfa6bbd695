"""Read a Hugging Face `config.json` into a TransformerSpec (pure JSON, no transformers import).

Each `model_type` is read as transformers 5 builds that model (keys and defaults of its config class; the
module named beside each reader). Keys common to the Llama-style families: vocab_size, hidden_size,
num_hidden_layers, num_attention_heads, num_key_value_heads (= heads), intermediate_size,
max_position_embeddings, rms_norm_eps, rope_theta (or rope_parameters.rope_theta, as transformers 5
writes), head_dim (= hidden/heads), tie_word_embeddings.
- gpt2:    vocab_size, n_embd, n_layer, n_head, n_inner (null -> 4·n_embd), n_positions,
           layer_norm_epsilon (1e-5), tie_word_embeddings (true). Learned positions, LayerNorm with bias,
           GELU MLP, biases everywhere (Radford et al. 2019; transformers' GPT2Model).
- llama, mistral, qwen2, mixtral: RoPE, RMSNorm, SwiGLU; llama's attention_bias (q, k, v, o) and mlp_bias;
           qwen2's q, k, v biases; mixtral's num_local_experts, num_experts_per_tok; mistral/mixtral's
           sliding_window (every layer), qwen2's use_sliding_window/max_window_layers/layer_types.
- qwen3:   as qwen2 without biases (attention_bias: q, k, v and o), with QK-norm and head_dim (128).
- qwen2_moe, qwen3_moe: num_experts, num_experts_per_tok, moe_intermediate_size (the experts' width),
           norm_topk_prob (false), decoder_sparse_step / mlp_only_layers (dense layers of intermediate_size);
           qwen2_moe: qkv_bias (true), shared_expert_intermediate_size with its sigmoid gate; qwen3_moe: QK-norm.
- phi3:    fused qkv_proj and gate_up_proj (the same parameters as separate ones), partial_rotary_factor,
           sliding_window on every layer (transformers' Phi3Model).
- gpt_neox: LayerNorm with bias, parallel residual (use_parallel_residual, true), partial RoPE (rotary_pct /
           partial_rotary_factor, 0.25; rotary_emb_base), attention_bias (true) on query_key_value and dense,
           MLP biases always, GELU from hidden_act (gelu: erf; gelu_new/gelu_fast/gelu_pytorch_tanh: tanh), untied.
- gemma2, gemma3_text: GeGLU (hidden_activation), Gemma RMSNorm (1 + w), sandwich norms, embeddings × √d,
           head_dim (256), query_pre_attn_scalar, final_logit_softcapping, sliding_window with layer_types
           (gemma2: even layers; gemma3: all but every sliding_window_pattern-th); gemma2's
           attn_logit_softcapping; gemma3's QK-norm and rope_local_base_freq (transformers' Gemma3Attention
           does not apply attn_logit_softcapping, so neither do we).
- phi, falcon: specs/hf_config_parallel.py (parallel attention + MLP blocks, Phi's biased head, Falcon's fused
           multi-query / grouped query_key_value).
- mpt:     d_model, n_heads, n_layers, expansion_ratio, max_seq_len, vocab_size, layer_norm_epsilon, no_bias
           (true: no bias anywhere), attn_config {alibi, alibi_bias_max, clip_qkv, softmax_scale}. ALiBi,
           LayerNorm, exact GELU, tied head (transformers' MptForCausalLM).
What our Transformer does not reproduce (RoPE scaling, MPT's qk_ln, ...) is listed in the spec's
`approximations`, which the commands print. Any other model_type, a missing file, malformed JSON or a
missing key is a one-line TrainledgerError naming the flag.
"""

from __future__ import annotations

import json
from pathlib import Path

from trainledger.errors import TrainledgerError
from trainledger.files import read_regular_file
from trainledger.specs.bounds import check_bounds
from trainledger.specs.hf_config_moe import MOE_MODEL_TYPES, read_moe_config
from trainledger.specs.hf_config_parallel import PARALLEL_MODEL_TYPES, read_parallel_config
from trainledger.specs.model import TransformerSpec

LLAMA_LIKE = ("llama", "mistral", "qwen2", "mixtral", "qwen3", "qwen2_moe", "qwen3_moe", "phi3", "gemma2", "gemma3_text")
# deepseek_v3, gpt_oss: specs/hf_config_moe.py; phi, falcon: specs/hf_config_parallel.py
SUPPORTED = ("gpt2", "gpt_neox", "mpt") + LLAMA_LIKE + MOE_MODEL_TYPES + PARALLEL_MODEL_TYPES
_GELU = {"gelu": "none", "gelu_new": "tanh", "gelu_fast": "tanh", "gelu_pytorch_tanh": "tanh"}   # transformers ACT2FN


def spec_from_config_file(path: str | Path, flag: str = "--model") -> TransformerSpec:
    """The TransformerSpec of a Hugging Face config.json at `path` (a directory means `path/config.json`)."""
    return _spec_of_file(*_read_config_json(path, flag), flag)


def _spec_of_file(path: Path, config: dict, flag: str) -> TransformerSpec:
    name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return spec_from_config_dict(config, name=name, flag=flag, source=f"config.json at {path}")


CONFIG_MAX_BYTES = 16 << 20      # the largest config.json on the Hub is a few hundred KB


def _read_config_json(path: str | Path, flag: str) -> tuple[Path, dict]:
    """(the file's path, its JSON object) of a config.json (a directory means `path/config.json`); one-line errors."""
    path = Path(path)
    try:
        if path.is_dir():
            path = path / "config.json"
        if not path.exists():
            raise FileNotFoundError(path)
        text = read_regular_file(path, flag, CONFIG_MAX_BYTES).decode("utf-8")   # a FIFO or /dev/zero: one line
    except FileNotFoundError:
        raise TrainledgerError(f"no such config file: {str(path)!r} ({flag}); give a preset name or a path to a "
                               "Hugging Face config.json") from None
    except OSError as error:
        raise TrainledgerError(f"cannot read {str(path)!r} ({flag}): {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise TrainledgerError(f"{str(path)!r} is not UTF-8 text ({flag}); give a preset name or a path to a "
                               "Hugging Face config.json") from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise TrainledgerError(f"{str(path)!r} is not valid JSON ({flag}): {error.msg} at line {error.lineno} "
                               f"column {error.colno}") from None
    except RecursionError:         # [[[[...]]]] nested deeper than Python's stack: no config nests like that
        raise TrainledgerError(f"{str(path)!r} nests JSON too deeply to be a config.json ({flag})") from None
    if not isinstance(config, dict):
        raise TrainledgerError(f"{str(path)!r} must hold a JSON object, got {type(config).__name__} ({flag})")
    return path, config


def spec_from_config_dict(config: dict, name: str = "config", flag: str = "--model", source: str = "") -> TransformerSpec:
    """The TransformerSpec of a Hugging Face config given as a dict (see the module docstring for the keys)."""
    model_type = config.get("model_type")
    if model_type not in SUPPORTED:
        raise TrainledgerError(f"unsupported model_type {model_type!r} in config ({flag}); supported: "
                               f"{', '.join(SUPPORTED)}")
    source = source or f"Hugging Face config ({model_type})"
    get = _getter(config, flag, model_type)
    reader = {"gpt2": _gpt2, "gpt_neox": _gpt_neox, "mpt": _mpt, "deepseek_v3": _moe,
              "gpt_oss": _moe, "phi": _parallel, "falcon": _parallel}.get(model_type, _llama_like)
    try:
        spec = reader(config, get, model_type, flag).with_(name=name, source=source, family=model_type)
        hf_run_fields(config, flag, for_impl=False)   # its dropout probabilities in [0, 1), as training reads them
        return check_bounds(spec, flag)
    except TypeError as error:  # a value of the wrong JSON type (a string where a number belongs)
        raise TrainledgerError(f"config has a value of the wrong type ({flag}): {error}") from None
    except TrainledgerError as error:  # TransformerSpec's own checks (heads must divide d_model, ...)
        if error.flag == flag:
            raise
        raise TrainledgerError(f"invalid config: {error}", flag) from None


_KIND_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _getter(config: dict, flag: str, model_type: str):
    missing = object()

    def get(key: str, default=missing, kind=int):
        value = config.get(key, default)
        if value is missing:
            raise TrainledgerError(f"config.json of model_type {model_type!r} lacks the key {key!r} ({flag})")
        if value is None and default is not missing:
            return default  # a key written as null means "the config class's default", as for an absent key
        if value is None:
            raise TrainledgerError(f"config key {key!r} is null; it must be {_KIND_WORDS.get(kind, 'set')} ({flag})")
        if kind is None:
            return value
        if kind is int and not (isinstance(value, int) and not isinstance(value, bool)):
            raise TrainledgerError(f"config key {key!r} must be an integer, got {value!r} ({flag})")
        if kind is float and not (isinstance(value, (int, float)) and not isinstance(value, bool)):
            raise TrainledgerError(f"config key {key!r} must be a number, got {value!r} ({flag})")
        if kind in (bool, str) and not isinstance(value, kind):
            raise TrainledgerError(f"config key {key!r} must be {_KIND_WORDS[kind]}, got {value!r} ({flag})")
        return kind(value)
    return get


GPT2_ACTIVATIONS = ("gelu_new", "gelu", "gelu_pytorch_tanh", "gelu_fast")   # transformers' ACT2FN GELU variants


def _gpt2(config: dict, get, model_type: str, flag: str) -> TransformerSpec:
    activation = config.get("activation_function", "gelu_new")
    if activation not in GPT2_ACTIVATIONS:     # our GPT-2 MLP is a GELU: a relu model would load with another function
        raise TrainledgerError(f"{model_type} config has activation_function {str(activation)[:40]!r} ({flag}); "
                               f"trainledger's GPT-2 supports {', '.join(GPT2_ACTIVATIONS)}")
    d_model = get("n_embd")
    n_inner = get("n_inner", None)
    return TransformerSpec(
        name="config", vocab_size=get("vocab_size"), d_model=d_model, n_layers=get("n_layer"), n_heads=get("n_head"),
        d_ff=n_inner if n_inner is not None else 4 * d_model, max_seq_len=get("n_positions"),
        position="learned", norm="layernorm", norm_bias=True, norm_eps=get("layer_norm_epsilon", 1e-5, float),
        mlp="gelu", qkv_bias=True, attn_out_bias=True, mlp_bias=True,
        tied_embeddings=get("tie_word_embeddings", True, bool),
    )


def _rope(config: dict, get, flag: str, model_type: str, default_theta: float, layer_type: str | None = None):
    """(θ, partial_rotary_factor, notes) from rope_theta / rope_parameters (transformers 5) / rope_scaling."""
    block = config.get("rope_parameters") if isinstance(config.get("rope_parameters"), dict) else {}
    if layer_type is not None:                       # Gemma 3 keeps one block per layer type
        block = block.get(layer_type) if isinstance(block.get(layer_type), dict) else {}
    read = _getter(block, flag, model_type)
    theta = read("rope_theta", None, float)
    factor = read("partial_rotary_factor", None, float)
    legacy = config.get("rope_scaling") if isinstance(config.get("rope_scaling"), dict) else None
    scaling = block if layer_type == "sliding_attention" or legacy is None else legacy   # Gemma 3 scales global layers
    kind = scaling.get("rope_type") or scaling.get("type") or "default"
    notes = () if kind == "default" else (f"rope_scaling {kind!r} ignored: plain RoPE with θ as given (positions past "
                                          "the pre-scaling range differ; no count changes)",)
    return theta, factor, notes


def rope_layout(get, default: str = "half") -> str:
    """The RoPE layout a config's weights use (models/rope.py): transformers' Llama-style models pair (i, i + d/2)
    ("half"); trainledger reads an optional `rope_layout` key ("half" or "interleaved", not a transformers key) for
    weights in Meta's (2i, 2i + 1) layout."""
    value = get("rope_layout", default, str)
    if value not in ("half", "interleaved"):
        raise TrainledgerError(f"config key 'rope_layout' must be 'half' (Hugging Face) or 'interleaved' (Meta), "
                               f"got {value[:40]!r} (--model)")
    return value


# Configs that name layers one by one (sliding windows, dense MoE layers) are read layer by layer; the deepest
# published models have ~128 layers, so more than this is a planted or broken file, not a model.
MAX_LISTED_LAYERS = 100_000


def _listable(n_layers, flag: str) -> int:
    if not isinstance(n_layers, int) or not 0 < n_layers <= MAX_LISTED_LAYERS:
        raise TrainledgerError(f"config key 'num_hidden_layers' must be an integer in 1..{MAX_LISTED_LAYERS} for a model "
                               f"that names its layers ({flag}), got {n_layers!r}")
    return n_layers


def _layer_types(config: dict, n_layers: int, flag: str, default) -> tuple[int, ...] | None:
    """Sliding-window layer indices from `layer_types` (transformers 5) or the model's default rule; None = all."""
    n_layers = _listable(n_layers, flag)
    types = config.get("layer_types")
    if types is None:
        types = ["sliding_attention" if default(i) else "full_attention" for i in range(n_layers)]
    if not isinstance(types, list) or len(types) != n_layers:
        raise TrainledgerError(f"config key 'layer_types' must list {n_layers} layer types ({flag})")
    sliding = tuple(i for i, kind in enumerate(types) if kind == "sliding_attention")
    return None if len(sliding) == n_layers else sliding


def _llama_like(config: dict, get, model_type: str, flag: str) -> TransformerSpec:
    """Llama and its descendants (transformers' llama, mistral, qwen2, mixtral, qwen3, qwen2_moe, qwen3_moe,
    phi3, gemma2, gemma3 modeling files): RoPE, RMSNorm, a gated MLP."""
    gemma = model_type in ("gemma2", "gemma3_text")
    d_model, n_heads, n_layers = get("hidden_size"), get("num_attention_heads"), get("num_hidden_layers")
    head_dim = get("head_dim", 256 if gemma else (128 if model_type == "qwen3" else None))
    if head_dim is not None and head_dim * n_heads == d_model:
        head_dim = None
    n_kv_heads = get("num_key_value_heads", None)
    default_theta = 1e6 if model_type == "gemma3_text" else 10000.0
    theta, factor, notes = _rope(config, get, flag, model_type, default_theta,
                                 "full_attention" if model_type == "gemma3_text" else None)
    top_theta = get("rope_theta", None, float)   # transformers 5 writes null here and the value under rope_parameters
    theta = top_theta if top_theta is not None else (theta if theta is not None else default_theta)
    top_factor = get("partial_rotary_factor", None, float)
    factor = top_factor if top_factor is not None else (factor if factor is not None else 1.0)
    bias = model_type in ("llama", "qwen3", "qwen3_moe", "gemma2", "gemma3_text") and get("attention_bias", False, bool)
    qkv_bias = bias or (model_type == "qwen2") or (model_type == "qwen2_moe" and get("qkv_bias", True, bool))
    fields = dict(
        position="rope", norm="gemma_rmsnorm" if gemma else "rmsnorm", mlp="geglu" if gemma else "swiglu",
        norm_eps=get("rms_norm_eps", 1e-5 if model_type in ("mixtral", "phi3") else 1e-6, float),
        qkv_bias=qkv_bias, attn_out_bias=bias, rope_theta=theta, partial_rotary_factor=factor,
        mlp_bias=get("mlp_bias", False, bool) if model_type == "llama" else False,
        tied_embeddings=get("tie_word_embeddings", gemma, bool), qk_norm=model_type in ("qwen3", "qwen3_moe", "gemma3_text"),
        rope_layout=rope_layout(get),
    )
    if gemma:
        fields.update(_gemma(config, get, model_type, flag, head_dim or d_model // n_heads, n_layers))
        notes += fields.pop("notes")
    else:
        fields.update(_window(config, get, model_type, flag, n_layers))
    d_ff = get("intermediate_size")
    if model_type == "mixtral":
        fields.update(n_experts=_n_experts(get, "num_local_experts", "num_experts"), experts_per_token=get("num_experts_per_tok"))
    elif model_type in ("qwen2_moe", "qwen3_moe"):
        fields.update(_qwen_moe(config, get, model_type, n_layers, d_ff))
        d_ff = get("moe_intermediate_size")
    return TransformerSpec(
        name="config", vocab_size=get("vocab_size"), d_model=d_model, n_layers=n_layers, n_heads=n_heads,
        n_kv_heads=n_kv_heads if n_kv_heads is not None else n_heads, d_head=head_dim, d_ff=d_ff,
        max_seq_len=get("max_position_embeddings"), approximations=notes, **fields,
    )


def _window(config: dict, get, model_type: str, flag: str, n_layers: int) -> dict:
    """Sliding window of the non-Gemma families, as each transformers 5 config class sets it."""
    window = get("sliding_window", None)
    if model_type in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe") and not get("use_sliding_window", False, bool):
        window = None
    if model_type in ("llama",) or not window:   # llama has no window; qwen2_moe writes 0 for "none"
        return {}
    first = get("max_window_layers", 28)
    rules = {"qwen2": lambda i: i >= first, "qwen3": lambda i: i >= first,
             "qwen2_moe": lambda i: (i + 1) % 2 and i < first}
    if model_type in rules:
        return {"sliding_window": window, "sliding_layers": _layer_types(config, n_layers, flag, rules[model_type])}
    return {"sliding_window": window}          # mistral, mixtral, phi3, qwen3_moe: every layer


def _gemma(config: dict, get, model_type: str, flag: str, head_dim: int, n_layers: int) -> dict:
    """Gemma 2 and Gemma 3 text (transformers' modeling_gemma2 / modeling_gemma3)."""
    act = get("hidden_activation", None, str) or get("hidden_act", "gelu_pytorch_tanh", str)
    if act not in _GELU:
        raise TrainledgerError(f"config key 'hidden_activation' is {act!r}; supported: {', '.join(_GELU)} ({flag})")
    scalar = get("query_pre_attn_scalar", 256, float)
    notes = ()
    final = _optional(config, get, "final_logit_softcapping", 30.0 if model_type == "gemma2" else None)
    if model_type == "gemma2":
        softcap = _optional(config, get, "attn_logit_softcapping", 50.0)
        pattern, local_theta = (lambda i: (i + 1) % 2), None
    else:
        softcap = None
        every = get("sliding_window_pattern", None) or get("_sliding_window_pattern", 6)
        pattern = lambda i: (i + 1) % every          # noqa: E731
        local, _, local_notes = _rope(config, get, flag, model_type, 10000.0, "sliding_attention")
        local_theta = get("rope_local_base_freq", None, float) or local or 10000.0
        notes += local_notes
        if config.get("attn_logit_softcapping") is not None:
            notes += ("attn_logit_softcapping not applied, as transformers' Gemma3Attention does not apply it",)
        if config.get("use_bidirectional_attention"):
            notes += ("use_bidirectional_attention ignored: causal attention",)
    window = get("sliding_window", 4096)
    return {"gelu_approximate": _GELU[act], "sandwich_norm": True, "scale_embeddings": True,
            "attn_scale": None if scalar == head_dim else scalar ** -0.5, "attn_softcap": softcap,
            "final_softcap": final, "sliding_window": window, "rope_local_theta": local_theta,
            "sliding_layers": _layer_types(config, n_layers, flag, pattern), "notes": notes}


def _optional(config: dict, get, key: str, default: float | None) -> float | None:
    """A number that null switches off (Gemma's soft-capping): the class default when absent, None when null."""
    return get(key, None, float) if key in config else default


def _n_experts(get, key: str, alias: str) -> int:
    """The expert count under either name (transformers 5 writes Qwen3-MoE's num_experts as num_local_experts)."""
    value = get(key, None)
    return value if value is not None else get(alias)


def _qwen_moe(config: dict, get, model_type: str, n_layers: int, dense_d_ff: int) -> dict:
    """Qwen2-MoE / Qwen3-MoE experts: a layer is MoE unless in mlp_only_layers or off the decoder_sparse_step grid."""
    step, only = get("decoder_sparse_step", 1), get("mlp_only_layers", [], None)
    n_layers = _listable(n_layers, "--model")
    if step < 1:
        raise TrainledgerError(f"config key 'decoder_sparse_step' must be a positive integer, got {step!r} (--model)")
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise TrainledgerError(f"config key 'mlp_only_layers' must be a list of layer indices, got {str(only)[:60]} (--model)")
    outside = next((i for i in only if not 0 <= i < n_layers), None)
    if outside is not None:
        raise TrainledgerError(f"config key 'mlp_only_layers' names layer {outside}, outside the model's layers "
                               f"0..{n_layers - 1} (--model)")
    only = set(only)
    dense = tuple(i for i in range(n_layers) if i in only or (i + 1) % step)
    fields = {"n_experts": _n_experts(get, "num_experts", "num_local_experts"), "experts_per_token": get("num_experts_per_tok"),
              "renormalize_topk": get("norm_topk_prob", False, bool), "dense_layers": dense,
              "dense_d_ff": dense_d_ff if dense else None}
    if model_type == "qwen2_moe":
        shared = get("shared_expert_intermediate_size", 5632)
        fields.update(shared_expert_d_ff=shared or None, shared_expert_gate=bool(shared))
    return fields


def _moe(config: dict, get, model_type: str, flag: str) -> TransformerSpec:
    """deepseek_v3 and gpt_oss (specs/hf_config_moe.py), given this module's RoPE and layer-list readers."""
    n_layers = _listable(get("num_hidden_layers"), flag)
    rope = _rope(config, get, flag, model_type, 150000.0 if model_type == "gpt_oss" else 10000.0)
    return read_moe_config(config, get, model_type, flag, rope=rope, n_layers=n_layers,
                           sliding_layers=lambda rule: _layer_types(config, n_layers, flag, rule))


def _parallel(config: dict, get, model_type: str, flag: str) -> TransformerSpec:
    """phi and falcon (specs/hf_config_parallel.py), given this module's RoPE reader."""
    return read_parallel_config(config, get, model_type, flag, rope=_rope(config, get, flag, model_type, 10000.0))


def _gpt_neox(config: dict, get, model_type: str, flag: str) -> TransformerSpec:
    """GPT-NeoX / Pythia (transformers' modeling_gpt_neox): parallel residual, partial RoPE, biases, untied head."""
    act = get("hidden_act", "gelu", str)
    if act not in _GELU:
        raise TrainledgerError(f"config key 'hidden_act' is {act!r}; supported: {', '.join(_GELU)} ({flag})")
    theta, factor, notes = _rope(config, get, flag, model_type, 10000.0)
    bias = get("attention_bias", True, bool)
    return TransformerSpec(
        name="config", vocab_size=get("vocab_size"), d_model=get("hidden_size"), n_layers=get("num_hidden_layers"),
        n_heads=get("num_attention_heads"), d_ff=get("intermediate_size"), max_seq_len=get("max_position_embeddings"),
        position="rope", norm="layernorm", norm_bias=True, norm_eps=get("layer_norm_eps", 1e-5, float),
        mlp="gelu", gelu_approximate=_GELU[act], qkv_bias=bias, attn_out_bias=bias, mlp_bias=True,
        tied_embeddings=get("tie_word_embeddings", False, bool),
        rope_theta=get("rotary_emb_base", None, float) or get("rope_theta", None, float) or theta or 10000.0,
        partial_rotary_factor=get("rotary_pct", None, float) or factor or 0.25,
        parallel_residual=get("use_parallel_residual", True, bool), approximations=notes,
    )


def _mpt(config: dict, get, model_type: str, flag: str) -> TransformerSpec:
    """MPT (transformers' modeling_mpt): ALiBi, bias-free LayerNorm and linears, exact GELU, tied head."""
    attn = config.get("attn_config") if isinstance(config.get("attn_config"), dict) else {}
    read = _getter(attn, flag, model_type)
    if not read("alibi", True, bool):
        raise TrainledgerError(f"MPT with attn_config.alibi = false is not supported (transformers' MptModel only "
                               f"builds ALiBi) ({flag})")
    d_model, no_bias, notes = get("d_model"), get("no_bias", True, bool), ()
    ratio = get("expansion_ratio", 4)
    if read("qk_ln", False, bool):
        notes += ("attn_config.qk_ln ignored, as transformers' MptAttention ignores it",)
    if get("logit_scale", None, None) is not None:
        notes += ("logit_scale ignored (logits are not rescaled)",)
    if ratio != 4 or not no_bias:
        notes += ("transformers' MptForCausalLM hard-codes expansion_ratio 4 and no biases; this spec follows the config",)
    scale = read("softmax_scale", None, float)
    head_dim = d_model // get("n_heads")
    return TransformerSpec(
        name="config", vocab_size=get("vocab_size"), d_model=d_model, n_layers=get("n_layers"), n_heads=get("n_heads"),
        d_ff=ratio * d_model, max_seq_len=get("max_seq_len", 2048), position="alibi", norm="layernorm",
        norm_bias=not no_bias, norm_eps=get("layer_norm_epsilon", 1e-5, float), mlp="gelu", gelu_approximate="none",
        qkv_bias=not no_bias, attn_out_bias=not no_bias, mlp_bias=not no_bias,
        tied_embeddings=get("tie_word_embeddings", True, bool), alibi_bias_max=read("alibi_bias_max", 8, float),
        clip_qkv=read("clip_qkv", None, float),
        attn_scale=None if scale is None or scale == head_dim ** -0.5 else scale, approximations=notes,
    )


# Dropout keys of each model_type's config class (transformers 5): (embeddings, residual branches, attention)
_DROPOUT_KEYS = {"gpt2": ("embd_pdrop", "resid_pdrop", "attn_pdrop"),       # GPT2Config defaults 0.1 each
                 "gpt_neox": ("hidden_dropout", "hidden_dropout", "attention_dropout"),   # emb_dropout too
                 "phi3": ("embd_pdrop", "resid_pdrop", "attention_dropout"),
                 "mpt": ("emb_pdrop", "resid_pdrop", "attn_pdrop")}          # mpt's attn_pdrop is in attn_config
_DROPOUT_DEFAULTS = {"gpt2": 0.1}


def hf_run_fields(config: dict, flag: str = "--model", for_impl: bool = True) -> dict:
    """How transformers runs a config.json in training (for account.memory.hf_activations.HfImpl): model_type,
    use_cache (default true), the activation as written, and the dropout probabilities (train mode). `for_impl`
    False: only the checks every reader of the config makes (its dropout probabilities in [0, 1)), for any family."""
    model_type = config.get("model_type")
    if model_type not in SUPPORTED:
        raise TrainledgerError(f"unsupported model_type {model_type!r} in config ({flag}); supported: {', '.join(SUPPORTED)}")
    if for_impl and model_type in PARALLEL_MODEL_TYPES:   # account/memory/hf_activations.py has no rules for them yet
        raise TrainledgerError(f"--impl hf does not describe transformers' {model_type} code yet; leave --impl at its "
                               "default (trainledger's Transformer)")
    get = _getter(config, flag, model_type)
    keys = _DROPOUT_KEYS.get(model_type, (None, None, "attention_dropout"))
    default = _DROPOUT_DEFAULTS.get(model_type, 0.0)
    attn_block = config.get("attn_config") if isinstance(config.get("attn_config"), dict) else {}

    def prob(key):
        if key is None:
            return 0.0
        source = _getter(attn_block, flag, model_type) if model_type == "mpt" and key == "attn_pdrop" else get
        value = source(key, default, float)
        if not 0.0 <= value < 1.0:
            raise TrainledgerError(f"config key {key!r} must be a dropout probability in [0, 1), got {value!r} ({flag})")
        return value
    activation = config.get("activation_function") or config.get("hidden_act") or config.get("hidden_activation")
    if model_type == "gpt2" and not activation:
        activation = "gelu_new"                       # GPT2Config's default activation_function
    return {"model_type": model_type, "use_cache": get("use_cache", True, bool),
            "activation": activation if isinstance(activation, str) else "",
            "embd_dropout": prob(keys[0]), "resid_dropout": prob(keys[1]), "attn_dropout": prob(keys[2])}


def read_config_file(path: str | Path, flag: str = "--model") -> dict:
    """The JSON object of a config.json (a directory means `path/config.json`), errors as spec_from_config_file's."""
    path, config = _read_config_json(path, flag)
    _spec_of_file(path, config, flag)                  # the same checks and one-line errors, on the same bytes
    return config
