"""Read a Hugging Face `config.json` into a TransformerSpec (pure JSON, no transformers import).

Supported `model_type`s and the keys read (defaults are those of the transformers config classes):
- gpt2:    vocab_size, n_embd, n_layer, n_head, n_inner (null -> 4·n_embd), n_positions,
           layer_norm_epsilon (1e-5), tie_word_embeddings (true). Learned positions, LayerNorm with bias,
           GELU MLP, biases everywhere (Radford et al. 2019; transformers' GPT2Model).
- llama, mistral, qwen2, mixtral: vocab_size, hidden_size, num_hidden_layers, num_attention_heads,
           num_key_value_heads (= heads), intermediate_size, max_position_embeddings, rms_norm_eps,
           rope_theta (or rope_parameters.rope_theta; 10000), head_dim (= hidden/heads),
           tie_word_embeddings (false). RoPE, RMSNorm, SwiGLU.
           llama: attention_bias (q, k, v and o) and mlp_bias (false); qwen2: q, k, v biases, none on o;
           mixtral: num_local_experts, num_experts_per_tok.
Any other model_type, a missing file, malformed JSON or a missing key is a one-line TrainledgerError
naming the flag.
"""

from __future__ import annotations

import json
from pathlib import Path

from trainledger.errors import TrainledgerError
from trainledger.specs.model import TransformerSpec

LLAMA_LIKE = ("llama", "mistral", "qwen2", "mixtral")
SUPPORTED = ("gpt2",) + LLAMA_LIKE


def spec_from_config_file(path: str | Path, flag: str = "--model") -> TransformerSpec:
    """The TransformerSpec of a Hugging Face config.json at `path` (a directory means `path/config.json`)."""
    path = Path(path)
    try:
        if path.is_dir():
            path = path / "config.json"
        text = path.read_text(encoding="utf-8")
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
    if not isinstance(config, dict):
        raise TrainledgerError(f"{str(path)!r} must hold a JSON object, got {type(config).__name__} ({flag})")
    name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return spec_from_config_dict(config, name=name, flag=flag, source=f"config.json at {path}")


def spec_from_config_dict(config: dict, name: str = "config", flag: str = "--model", source: str = "") -> TransformerSpec:
    """The TransformerSpec of a Hugging Face config given as a dict (see the module docstring for the keys)."""
    model_type = config.get("model_type")
    if model_type not in SUPPORTED:
        raise TrainledgerError(f"unsupported model_type {model_type!r} in config ({flag}); supported: "
                               f"{', '.join(SUPPORTED)}")
    source = source or f"Hugging Face config ({model_type})"
    get = _getter(config, flag, model_type)
    try:
        if model_type == "gpt2":
            return _gpt2(config, get, name, source)
        return _llama_like(config, get, model_type, name, source, flag)
    except TypeError as error:  # a value of the wrong JSON type (a string where a number belongs)
        raise TrainledgerError(f"config has a value of the wrong type ({flag}): {error}") from None
    except TrainledgerError as error:  # TransformerSpec's own checks (heads must divide d_model, ...)
        if error.flag == flag:
            raise
        raise TrainledgerError(f"invalid config: {error}", flag) from None


_KIND_WORDS = {int: "an integer", float: "a number", bool: "true or false"}


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
        if kind is bool and not isinstance(value, bool):
            raise TrainledgerError(f"config key {key!r} must be true or false, got {value!r} ({flag})")
        return kind(value)
    return get


def _gpt2(config: dict, get, name: str, source: str) -> TransformerSpec:
    d_model = get("n_embd")
    n_inner = get("n_inner", None)
    return TransformerSpec(
        name=name, vocab_size=get("vocab_size"), d_model=d_model, n_layers=get("n_layer"), n_heads=get("n_head"),
        d_ff=n_inner if n_inner is not None else 4 * d_model, max_seq_len=get("n_positions"),
        position="learned", norm="layernorm", norm_bias=True, norm_eps=get("layer_norm_epsilon", 1e-5, float),
        mlp="gelu", qkv_bias=True, attn_out_bias=True, mlp_bias=True,
        tied_embeddings=get("tie_word_embeddings", True, bool), source=source,
    )


def _llama_like(config: dict, get, model_type: str, name: str, source: str, flag: str) -> TransformerSpec:
    d_model, n_heads = get("hidden_size"), get("num_attention_heads")
    head_dim = get("head_dim", None)
    if head_dim is not None and head_dim * n_heads == d_model:
        head_dim = None
    n_kv_heads = get("num_key_value_heads", None)
    rope = config.get("rope_parameters") if isinstance(config.get("rope_parameters"), dict) else {}
    rope_theta = get("rope_theta", None, float)  # transformers 5 writes null here and the value under rope_parameters
    if rope_theta is None:
        rope_theta = _getter(rope, flag, model_type)("rope_theta", 10000.0, float)
    attention_bias = get("attention_bias", False, bool) if model_type == "llama" else False
    moe = {}
    if model_type == "mixtral":
        moe = {"n_experts": get("num_local_experts"), "experts_per_token": get("num_experts_per_tok")}
    return TransformerSpec(
        name=name, vocab_size=get("vocab_size"), d_model=d_model, n_layers=get("num_hidden_layers"),
        n_heads=n_heads, n_kv_heads=n_kv_heads if n_kv_heads is not None else n_heads, d_head=head_dim,
        d_ff=get("intermediate_size"), max_seq_len=get("max_position_embeddings"),
        position="rope", norm="rmsnorm", mlp="swiglu",
        norm_eps=get("rms_norm_eps", 1e-5 if model_type == "mixtral" else 1e-6, float),
        qkv_bias=attention_bias or model_type == "qwen2", attn_out_bias=attention_bias,
        mlp_bias=get("mlp_bias", False, bool) if model_type == "llama" else False,
        tied_embeddings=get("tie_word_embeddings", False, bool), rope_theta=rope_theta, source=source, **moe,
    )
