"""Our Transformer's weights ↔ Hugging Face transformers' GPT2LMHeadModel and LlamaForCausalLM, names and layouts.

GPT-2 (transformers' modeling_gpt2): parameters under `transformer.`; its Conv1D layers store weights as
(in_features, out_features), the transpose of nn.Linear's (out, in), so every matrix is transposed; `c_attn` is
q, k and v in one matrix (columns q | k | v) with one bias; `c_fc` / `c_proj` are the MLP's up and down; the head
is tied to `wte` (transformers drops the shared tensor when saving). GELU is "gelu_new" (tanh).
Llama (modeling_llama): parameters under `model.`, the same nn.Linear layout as ours, q/k/v/o_proj, gate/up/down_proj,
input_layernorm / post_attention_layernorm, `lm_head` when untied. RoPE: ours rotates pairs (i, i + d/2) with the
"rotate half" layout (models/rope.py), exactly transformers' `rotate_half` / `apply_rotary_pos_emb`, so q and k
need no permutation (weights converted from Meta's interleaved layout were permuted once, by transformers'
convert_llama_weights_to_hf.py; a Hugging Face checkpoint is already in this layout). A model in the interleaved
layout (spec.rope_layout) has its q and k rows permuted to the half layout on the way out (to_hf) and back on the
way in (`to_layout`, for --init-from): the same logits in either.
A spec another family describes (biases on q/k/v only, QK-norm, sliding windows, MoE, soft-capping, ...) has no
exact GPT2/Llama equivalent and is refused with the features named. Pure torch: transformers is never imported.
"""

from __future__ import annotations

import re

import torch
from torch import Tensor

from trainledger.errors import TrainledgerError

FAMILIES = ("gpt2", "llama")
# buffers some Hugging Face files carry that are not parameters: GPT-2's causal mask h.N.attn.bias (not
# c_attn.bias) and masked_bias, older Llama files' RoPE frequencies
IGNORED = re.compile(r"^(transformer\.)?h\.\d+\.attn\.(bias|masked_bias)$|rotary_emb\.inv_freq$")
_COMMON = (("n_experts", 1, "mixture of experts"), ("parallel_residual", False, "parallel residual"),
           ("sandwich_norm", False, "sandwich norms"), ("qk_norm", False, "QK-norm"),
           ("scale_embeddings", False, "scaled embeddings"), ("attn_scale", None, "a custom attention scale"),
           ("attn_softcap", None, "attention soft-capping"), ("final_softcap", None, "logit soft-capping"),
           ("clip_qkv", None, "q/k/v clipping"), ("sliding_window", None, "sliding-window attention"),
           ("rope_local_theta", None, "a second RoPE θ"), ("lm_head_bias", False, "a bias on the LM head"))


def family_of(spec, flag: str = "RUN_OR_CHECKPOINT") -> str:
    """"gpt2" or "llama": the transformers class that computes exactly what `spec` does; an error naming what differs."""
    differs = [what for field, plain, what in _COMMON if getattr(spec, field) != plain]
    if spec.position == "learned":
        family = "gpt2"
        need = (("norm", "layernorm", "LayerNorm"), ("norm_bias", True, "LayerNorm biases"), ("mlp", "gelu", "a GELU MLP"),
                ("gelu_approximate", "tanh", "tanh GELU (gelu_new, which config.json readers assume for gpt2)"))
        if spec.kv_heads != spec.n_heads:
            differs.append("grouped-query attention")
        if spec.head_dim * spec.n_heads != spec.d_model:
            differs.append("d_head × n_heads != d_model")
    elif spec.position == "rope":
        family = "llama"
        need = (("norm", "rmsnorm", "RMSNorm"), ("mlp", "swiglu", "a SwiGLU MLP"),
                ("partial_rotary_factor", 1.0, "RoPE on every dim of a head"))
        if spec.qkv_bias != spec.attn_out_bias:
            differs.append("biases on q/k/v but not o (or the reverse)")
    else:
        raise TrainledgerError(f"model '{spec.name}' uses {spec.position} positions: only GPT-2-style (learned "
                               f"positions) and Llama-style (RoPE) models convert to Hugging Face ({flag})")
    differs += [f"not {what}" for field, value, what in need if getattr(spec, field) != value]
    if differs:
        raise TrainledgerError(f"model '{spec.name}' does not match transformers' {family} family exactly ("
                               f"{', '.join(differs)}): only GPT-2-style and Llama-style models convert ({flag})")
    return family


def hf_config(spec, dtype: torch.dtype) -> dict:
    """The config.json of the transformers model that computes `spec` (GPT2LMHeadModel or LlamaForCausalLM)."""
    family = family_of(spec)
    name = str(dtype).removeprefix("torch.")
    if family == "gpt2":
        return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": spec.vocab_size,
                "n_embd": spec.d_model, "n_layer": spec.n_layers, "n_head": spec.n_heads, "n_inner": spec.d_ff,
                "n_positions": spec.max_seq_len, "layer_norm_epsilon": spec.norm_eps,
                "activation_function": "gelu_new",
                "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "scale_attn_weights": True,
                "tie_word_embeddings": spec.tied_embeddings, "bos_token_id": None, "eos_token_id": None,
                "use_cache": True, "dtype": name}
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": spec.vocab_size,
            "hidden_size": spec.d_model, "intermediate_size": spec.d_ff, "num_hidden_layers": spec.n_layers,
            "num_attention_heads": spec.n_heads, "num_key_value_heads": spec.kv_heads, "head_dim": spec.head_dim,
            "max_position_embeddings": spec.max_seq_len, "rms_norm_eps": spec.norm_eps, "hidden_act": "silu",
            "rope_theta": spec.rope_theta, "attention_bias": spec.qkv_bias, "attention_dropout": 0.0,
            "mlp_bias": spec.mlp_bias, "tie_word_embeddings": spec.tied_embeddings, "bos_token_id": None,
            "eos_token_id": None, "use_cache": True, "dtype": name}


def to_hf(spec, state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Our state dict -> the tensors of the transformers model (contiguous, ready for safetensors).

    GPT-2 layers without a bias in our spec get zero biases (Conv1D always has one: the same function)."""
    family = family_of(spec)
    out = {}
    if family == "gpt2":
        out["transformer.wte.weight"] = state["tok_embeddings.weight"]
        out["transformer.wpe.weight"] = state["pos_embeddings.weight"]
        for i in range(spec.n_layers):
            ours, theirs = f"blocks.{i}.", f"transformer.h.{i}."
            for a, b in (("norm1", "ln_1"), ("norm2", "ln_2")):
                out[f"{theirs}{b}.weight"] = state[f"{ours}{a}.weight"]
                out[f"{theirs}{b}.bias"] = state[f"{ours}{a}.bias"]
            qkv = [f"{ours}attn.{p}" for p in ("q_proj", "k_proj", "v_proj")]
            out[f"{theirs}attn.c_attn.weight"] = torch.cat([state[p + ".weight"] for p in qkv], dim=0).T
            out[f"{theirs}attn.c_attn.bias"] = torch.cat([_bias(state, p) for p in qkv])
            for a, b in (("attn.o_proj", "attn.c_proj"), ("mlp.up", "mlp.c_fc"), ("mlp.down", "mlp.c_proj")):
                out[f"{theirs}{b}.weight"] = state[f"{ours}{a}.weight"].T
                out[f"{theirs}{b}.bias"] = _bias(state, f"{ours}{a}")
        out["transformer.ln_f.weight"], out["transformer.ln_f.bias"] = state["norm.weight"], state["norm.bias"]
    else:
        state = to_layout(spec, state, spec.rope_layout, "half")
        for ours, theirs in _llama_names(spec):
            out[theirs] = state[ours]
    if not spec.tied_embeddings:
        out["lm_head.weight"] = state["lm_head.weight"]
    return {name: tensor.detach().contiguous() for name, tensor in out.items()}


def to_layout(spec, state: dict[str, Tensor], source: str, target: str) -> dict[str, Tensor]:
    """Our state dict for `spec` with every layer's q and k projection (weight and bias) moved from RoPE layout
    `source` to `target` (models/rope.py convert_layout); the other tensors as they are."""
    from trainledger.models.rope import convert_layout
    if source == target or spec.position != "rope":
        return state
    out = dict(state)
    for i in range(spec.n_layers):
        for proj, heads in (("q_proj", spec.n_heads), ("k_proj", spec.kv_heads)):
            for kind in ("weight", "bias"):
                name = f"blocks.{i}.attn.{proj}.{kind}"
                if name in out:
                    out[name] = convert_layout(out[name], heads, spec.head_dim, spec.rotary_dim, source, target)
    return out


def _bias(state: dict, prefix: str) -> Tensor:
    """The bias of Linear `prefix`, or zeros of its output size when it has none."""
    bias = state.get(prefix + ".bias")
    if bias is not None:
        return bias
    weight = state[prefix + ".weight"]
    return torch.zeros(weight.shape[0], dtype=weight.dtype, device=weight.device)


def _llama_names(spec) -> list[tuple[str, str]]:
    """(our name, transformers' name) of every Llama parameter."""
    names = [("tok_embeddings.weight", "model.embed_tokens.weight"), ("norm.weight", "model.norm.weight")]
    for i in range(spec.n_layers):
        ours, theirs = f"blocks.{i}.", f"model.layers.{i}."
        names += [(f"{ours}norm1.weight", f"{theirs}input_layernorm.weight"),
                  (f"{ours}norm2.weight", f"{theirs}post_attention_layernorm.weight")]
        linears = [(f"attn.{p}", f"self_attn.{p}", spec.qkv_bias) for p in ("q_proj", "k_proj", "v_proj", "o_proj")]
        linears += [(f"mlp.{a}", f"mlp.{b}_proj", spec.mlp_bias) for a, b in (("gate", "gate"), ("up", "up"), ("down", "down"))]
        for a, b, bias in linears:
            names.append((f"{ours}{a}.weight", f"{theirs}{b}.weight"))
            if bias:
                names.append((f"{ours}{a}.bias", f"{theirs}{b}.bias"))
    return names


def from_hf(spec, tensors: dict[str, Tensor], family: str, source: str = "--init-from") -> dict[str, Tensor]:
    """The tensors of a transformers GPT2LMHeadModel / LlamaForCausalLM file -> our state dict for `spec`.

    Accepts names with or without the `transformer.` / `model.` prefix (files saved from the base model have
    none); ignores the non-parameter buffers some files carry; a missing or unexpected tensor is an error."""
    prefix = "transformer." if family == "gpt2" else "model."
    named = {}
    for name, tensor in tensors.items():
        if IGNORED.search(name):
            continue
        key = name if name.startswith(prefix) or name == "lm_head.weight" else prefix + name
        named[key] = tensor
    if spec.tied_embeddings:
        named.pop("lm_head.weight", None)  # some files store the tied head too
    state = {}
    if family == "gpt2":
        d = spec.d_model
        take = _taker(named, source)
        state["tok_embeddings.weight"] = take("transformer.wte.weight")
        state["pos_embeddings.weight"] = take("transformer.wpe.weight")
        for i in range(spec.n_layers):
            ours, theirs = f"blocks.{i}.", f"transformer.h.{i}."
            for a, b in (("norm1", "ln_1"), ("norm2", "ln_2")):
                state[f"{ours}{a}.weight"] = take(f"{theirs}{b}.weight")
                state[f"{ours}{a}.bias"] = take(f"{theirs}{b}.bias")
            w, b = take(f"{theirs}attn.c_attn.weight").T, take(f"{theirs}attn.c_attn.bias")
            for name, tensor, shape in (("weight", w.T, (d, 3 * d)), ("bias", b, (3 * d,))):
                if tuple(tensor.shape) != shape:    # slicing would take part of it silently (transformers refuses)
                    raise TrainledgerError(f"{source}: tensor '{theirs}attn.c_attn.{name}' has shape "
                                           f"{tuple(tensor.shape)}, the model needs {shape}")
            for j, p in enumerate(("q_proj", "k_proj", "v_proj")):
                state[f"{ours}attn.{p}.weight"] = w[j * d:(j + 1) * d]
                state[f"{ours}attn.{p}.bias"] = b[j * d:(j + 1) * d]
            for a, hf in (("attn.o_proj", "attn.c_proj"), ("mlp.up", "mlp.c_fc"), ("mlp.down", "mlp.c_proj")):
                state[f"{ours}{a}.weight"] = take(f"{theirs}{hf}.weight").T
                state[f"{ours}{a}.bias"] = take(f"{theirs}{hf}.bias")
        state["norm.weight"], state["norm.bias"] = take("transformer.ln_f.weight"), take("transformer.ln_f.bias")
    else:
        take = _taker(named, source)
        for ours, theirs in _llama_names(spec):
            state[ours] = take(theirs)
    if not spec.tied_embeddings:
        state["lm_head.weight"] = take("lm_head.weight")
    if named:
        extra = sorted(named)
        raise TrainledgerError(f"{source}: the checkpoint has {len(extra)} tensor(s) this {family} model does not use "
                               f"({', '.join(extra[:3])}{', ...' if len(extra) > 3 else ''}); is config.json the one "
                               "these weights were saved with?")
    return state


def _taker(named: dict, source: str):
    def take(key: str) -> Tensor:
        if key not in named:
            raise TrainledgerError(f"{source}: the checkpoint lacks the tensor {key!r}; is config.json the one these "
                                   "weights were saved with?")
        return named.pop(key)
    return take


@torch.no_grad()
def load_into(model, state: dict[str, Tensor], source: str = "--init-from") -> None:
    """Copies `state` into `model` (cast to its dtype); a shape that differs is an error naming the tensor."""
    own = model.state_dict()
    for name, tensor in state.items():
        target = own[name]
        if tuple(tensor.shape) != tuple(target.shape):
            raise TrainledgerError(f"{source}: tensor {name!r} has shape {tuple(tensor.shape)}, the model needs "
                                   f"{tuple(target.shape)}")
        target.copy_(tensor)
    missing = sorted(set(own) - set(state) - ({"lm_head.weight"} if model.lm_head is None else set()))
    if missing:
        raise TrainledgerError(f"{source}: no weights for {', '.join(missing[:3])}")
