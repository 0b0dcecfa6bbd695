"""A fine-tuning run's adapters in PEFT's format, and its merged model: `export RUN --adapter OUT` / `--merge OUT`.

--adapter OUT   adapter_config.json + adapter_model.safetensors as PEFT's LoraModel saves them (peft 0.21:
                PeftModel.save_pretrained), so that, in Python,
                    base = AutoModelForCausalLM.from_pretrained(BASE_DIR)
                    model = PeftModel.from_pretrained(base, OUT)       # our logits (tests: within 1e-4 in fp32)
                Key names: base_model.model.<transformers' module>.lora_A.weight (r × d_in) / lora_B.weight (d_out × r),
                e.g. base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight; target_modules name each adapted
                kind by its parent.module suffix (PEFT matches `key.endswith("." + target)`), so GPT-2's attn.c_proj
                and mlp.c_proj stay apart. GPT-2 fuses q, k and v in one Conv1D, c_attn (columns q | k | v): our
                adapters on the chosen parts P become one c_attn adapter of rank |P|·r, A = [A_p ; ...] stacked and B
                block-diagonal (B_p in p's rows and columns, zeros elsewhere), with α = |P|·α through PEFT's
                rank_pattern / alpha_pattern, so its scale (|P|·α)/(|P|·r) is ours and B·A equals ours part by part;
                `fan_in_fan_out` is true for Conv1D, as PEFT requires. A QLoRA run's adapters were trained against the
                NF4 base: with the unquantized base they give the base's logits plus the adapters' update.
--merge OUT     model.safetensors + config.json: every adapted weight W + (α/r)·B·A, every quantized weight
                dequantized (models/lora.py merged_state_dict), written as `export` writes a full model: transformers
                loads it and greedy-decodes the tokens our adapted model decodes.
"""

from __future__ import annotations

import re

import torch

from trainledger.errors import TrainledgerError
from trainledger.models.lora import lora_layers

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
PREFIX = "base_model.model."
_BLOCK = re.compile(r"^blocks\.(\d+)\.(attn|mlp)\.(\w+)$")
LLAMA = {("attn", "q_proj"): "self_attn.q_proj", ("attn", "k_proj"): "self_attn.k_proj",
         ("attn", "v_proj"): "self_attn.v_proj", ("attn", "o_proj"): "self_attn.o_proj",
         ("mlp", "gate"): "mlp.gate_proj", ("mlp", "up"): "mlp.up_proj", ("mlp", "down"): "mlp.down_proj"}
GPT2 = {("attn", "o_proj"): "attn.c_proj", ("mlp", "up"): "mlp.c_fc", ("mlp", "down"): "mlp.c_proj"}
GPT2_QKV = ("q_proj", "k_proj", "v_proj")


def _hf_module(name: str, family: str) -> tuple[str, str]:
    """(transformers' module name, its PEFT target suffix) of our adapted Linear `name`."""
    if name == "lm_head":
        return "lm_head", "lm_head"
    match = _BLOCK.match(name)
    table = LLAMA if family == "llama" else GPT2
    if match is None or (match.group(2), match.group(3)) not in table:
        raise TrainledgerError(f"adapter on {name}: no {family} module of transformers to write it to (--adapter)")
    suffix = table[(match.group(2), match.group(3))]
    root = "model.layers" if family == "llama" else "transformer.h"
    return f"{root}.{match.group(1)}.{suffix}", suffix


def peft_adapter(model, spec, settings, base_dir: str | None) -> tuple[dict, dict]:
    """(tensors, adapter_config) of an adapted model in PEFT's names and layout (module docstring)."""
    from trainledger.models.hf_weights import family_of
    family = family_of(spec, "--adapter")
    layers = lora_layers(model)
    if not layers:
        raise TrainledgerError("the run has no adapters (--adapter)")
    tensors, targets, rank_pattern, alpha_pattern = {}, set(), {}, {}
    fused: dict[str, dict] = {}
    for name, layer in layers.items():
        match = _BLOCK.match(name)
        if family == "gpt2" and match and match.group(3) in GPT2_QKV:
            fused.setdefault(match.group(1), {})[match.group(3)] = layer
            continue
        module, suffix = _hf_module(name, family)
        tensors[f"{PREFIX}{module}.lora_A.weight"] = layer.lora_A.detach()
        tensors[f"{PREFIX}{module}.lora_B.weight"] = layer.lora_B.detach()
        targets.add(suffix)
    for block, parts in fused.items():
        chosen = [p for p in GPT2_QKV if p in parts]
        r, d = settings.rank, spec.d_model
        A = torch.cat([parts[p].lora_A.detach() for p in chosen])
        B = torch.zeros(3 * d, len(chosen) * r, dtype=A.dtype, device=A.device)
        for column, part in enumerate(chosen):
            row = GPT2_QKV.index(part)
            B[row * d:(row + 1) * d, column * r:(column + 1) * r] = parts[part].lora_B.detach()
        tensors[f"{PREFIX}transformer.h.{block}.attn.c_attn.lora_A.weight"] = A
        tensors[f"{PREFIX}transformer.h.{block}.attn.c_attn.lora_B.weight"] = B
        targets.add("attn.c_attn")
        if len(chosen) > 1:
            rank_pattern["attn.c_attn"] = len(chosen) * r
            alpha_pattern["attn.c_attn"] = len(chosen) * settings.alpha
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_dir,
              "r": settings.rank, "lora_alpha": settings.alpha, "lora_dropout": settings.dropout,
              "target_modules": sorted(targets), "rank_pattern": rank_pattern, "alpha_pattern": alpha_pattern,
              "fan_in_fan_out": family == "gpt2", "bias": "none", "modules_to_save": None, "init_lora_weights": True,
              "use_rslora": False, "use_dora": False, "inference_mode": True, "layers_to_transform": None,
              "layers_pattern": None, "revision": None}
    return {key: t.contiguous() for key, t in tensors.items()}, config
