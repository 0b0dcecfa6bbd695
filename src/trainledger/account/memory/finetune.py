"""Bytes of a LoRA / QLoRA fine-tuning step per GPU: adapters, a frozen (maybe quantized) base, and the activations a
frozen Linear does not save. Pure, no torch; account/memory/per_gpu.py applies it when run.finetune.adapters.

Model states (the trainer builds the model as train/finetune.py does: adapters made beside fp32 Linears, then the
whole model cast to the recipe's parameter dtype, models/precision.param_dtype, then the frozen Linears quantized):
- frozen base: every base parameter (account.finetune.lora.lora_frozen_params) in the recipe's parameter dtype
  (amp-bf16: fp32, as `train` keeps it; bf16: 2 bytes, torchtune's `dtype: bf16`); with --quantize the Linears of the
  layers in account.finetune.quant's bytes (codes apart from their constants), the embeddings, norms and head not;
- adapters: A (r × d_in) and B (rows × r) per adapted module (Hu et al. 2021, Sec. 4.1), in the parameter dtype, with
  their gradients, fp32 master copies (mixed-* recipes) and optimizer states, tensor by tensor: adamw-8bit as torchao's
  AdamW8bit stores it (tensors of >= 4096 values that are a multiple of 256 get 1-byte codes, an fp32 scale per 256 and
  a 256-entry fp32 map per moment; smaller ones two moments in the parameter dtype), paged-adamw-8bit as bitsandbytes
  (min_8bit_size 4096, absmax per 256-block, padded), others n_states × the state dtype; each tensor's 4-byte step.
Activations (autograd saves a tensor only for a gradient someone needs: a frozen weight needs no weight gradient, so
F.linear(x, W) with W frozen does not save x; derivatives.yaml saves mm's `self` only when mat2 requires grad), relative
to account.memory.activations for full training, per layer:
- the attention norm's output is saved once (fp32 / 16-bit weights) if one of q, k, v has an adapter (its A saves it),
  under autocast one 16-bit copy per adapter; likewise the MLP norm's output for gate / up;
- the MLP's down projection input (the activation's output, or SwiGLU's product) is not saved unless down is adapted;
- an RMSNorm with a frozen weight does not save its normalised output (weight · x̂ saves x̂ for the weight's gradient);
- the head's input is not saved (a frozen head), nor the position ids of a frozen position table;
- the first layer's attention norm saves nothing: its input, the frozen embedding's output, needs no gradient;
- each adapter saves its r-wide hidden (B's input);
- under autocast the 16-bit weight copies of frozen unquantized Linears are saved as before; a quantized Linear saves its
  quantized weight only (torchao's LinearNF4: ctx.save_for_backward(weight), dequantized again in backward).
Measured against measure/finetune.py (tests/account/test_finetune_memory.py): the tiny model's LoRA activations equal.
The dequantized copy: torchao's NF4Tensor.get_original_weight (eager) holds two int64 code tensors (8 bytes a weight),
the two looked-up halves, their scaled copies and the stacked result (3 × the dtype), (8 + 3·b)·numel at once: a
moment `dequantize` at the last layer's largest quantized Linear (forward), with its input and the residual alive.
"""

from __future__ import annotations

from trainledger.account.counting.params import n_params
from trainledger.account.finetune.lora import lora_trainable_params
from trainledger.account.finetune.quant import quantized_base_bytes
from trainledger.account.finetune.targets import parse_lora_targets, projections, targeted

FP32 = 4
INT64 = 8
MIN_8BIT = 4096          # torchao AdamW8bit / bitsandbytes min_8bit_size
BLOCK_8BIT = 256         # block of one fp32 scale (torchao block_size, bitsandbytes blocksize)
QMAP = 256 * FP32        # the dynamic 8-bit map each quantized moment carries


def adapter_tensors(spec, finetune) -> list[tuple[int, int]]:
    """(numel, count) of every adapter tensor: A = r × d_in and B = rows × r per adapted module."""
    r = finetune.lora_rank
    out = []
    for p, rows in targeted(spec, finetune.lora_targets):
        out += [(r * p.in_features, p.count), (rows * r, p.count)]
    return out


def optimizer_bytes_of(tensors, optimizer: str, n_states: int, state_bytes: float, param_bytes: float) -> float:
    """Bytes of the optimizer's state of `tensors` ((numel, count)) as the library keeps them (module docstring)."""
    total = 0.0
    for numel, count in tensors:
        if optimizer == "adamw-8bit":
            quantized = numel >= MIN_8BIT and numel % BLOCK_8BIT == 0
            each = 2 * (numel + FP32 * numel // BLOCK_8BIT + QMAP) if quantized else 2 * numel * param_bytes
        elif optimizer == "paged-adamw-8bit":
            each = (2 * (numel + FP32 * -(-numel // BLOCK_8BIT) + QMAP) if numel >= MIN_8BIT
                    else 2 * numel * FP32)
        else:
            each = n_states * numel * state_bytes
        total += count * (each + (FP32 if n_states else 0))        # the step count each tensor keeps
    return total


def finetune_states(spec, finetune, recipe, optimizer) -> dict:
    """Unsharded bytes of the model states of a LoRA / QLoRA run (module docstring), by category, and the counts."""
    from trainledger.specs.recipes import optimizer_bytes_per_element
    p = recipe.params_bytes_per_param
    trainable = lora_trainable_params(spec, finetune.lora_rank, finetune.lora_targets)
    frozen = n_params(spec)
    storage = finetune.base_storage
    if storage == "none":
        frozen_bytes, codes, constants, quantized_params = frozen * p, 0.0, 0.0, 0
    else:
        base = quantized_base_bytes(spec, storage, None, int(p))
        quantized_params = base["quantized_params"]
        codes = quantized_params / 2 if storage.startswith("nf4") else float(quantized_params)
        constants = base["quantized_weight_bytes"] - codes
        frozen_bytes = base["other_params_bytes"]
    tensors = adapter_tensors(spec, finetune)
    state = recipe.state_bytes_per_element if optimizer.state_bytes_per_element is None else None
    states = optimizer_bytes_of(tensors, optimizer.name, optimizer.n_states,
                                state if state is not None else optimizer_bytes_per_element(recipe, optimizer), p)
    return {"trainable_params": trainable, "frozen_params": frozen, "quantized_params": quantized_params,
            "trainable_params_bytes": trainable * p, "frozen_params_bytes": frozen_bytes,
            "quantized_weights_bytes": codes, "quantization_constants_bytes": constants,
            "grads_bytes": trainable * recipe.grads_bytes_per_param,
            "master_params_bytes": trainable * recipe.master_params_bytes_per_param,
            "optimizer_bytes": states, "largest_trainable_numel": max(n for n, _ in tensors),
            "storage": storage}


def _roles(finetune) -> set[str]:
    return set(parse_lora_targets(finetune.lora_targets))


def activations_delta_bytes(spec, shard, finetune) -> dict:
    """Bytes to add to account.memory.activations' parts of full training (negative: not saved) for LoRA, by part:
    per_layer, layers, head_input, embeddings, final_norm, weight_copies, and the total (module docstring)."""
    from trainledger.account.memory.activations import recipe_bytes
    a, r, w = recipe_bytes(shard.precision)
    amp = w > 0
    n, d, rank, tp = shard.n_tokens, spec.d_model, finetune.lora_rank, shard.tp
    roles = _roles(finetune)
    f = spec.d_ff
    layer = 0.0
    attn = [x for x in ("q", "k", "v") if x in roles]
    full_consumers = 3 if amp else 1
    layer -= (full_consumers - (len(attn) if amp else (1 if attn else 0))) * n * d * a
    if not spec.parallel_shared_norm:
        mlp_roles = [x for x in (("gate", "up") if spec.gated_mlp else ("up",)) if x in roles]
        full = (2 if spec.gated_mlp else 1) if amp else 1
        layer -= (full - (len(mlp_roles) if amp else (1 if mlp_roles else 0))) * n * d * a
    if "down" not in roles:
        layer -= n * f * a                                  # the down projection's input
    norms = 1 if spec.parallel_shared_norm else 2
    if spec.norm == "rmsnorm":
        layer -= norms * n * d * r                          # weight · x̂ no longer saves x̂
    if amp and "o" in roles:
        layer += n * spec.n_heads * spec.head_dim * a       # o's A casts its input: a copy beside SDPA's output
    adapted = [(p, rows) for p, rows in targeted(spec, finetune.lora_targets) if p.count == spec.n_layers]
    layer += sum(n * rank * a for _ in adapted for _ in range(1))
    layer /= tp if tp > 1 else 1
    first_norm = n * d * r + 2 * n * r if spec.norm == "layernorm" else n * FP32 + (n * d * FP32 if r != FP32 else 0)
    if shard.recompute != "none":     # recomputed layers keep their input (full) or as full training: not modelled
        layer = first_norm = 0.0      # per op here; the layers' bytes are full training's (an upper bound)
    head_adapted = "head" in roles
    parts = {"per_layer": layer, "layers": layer * spec.n_layers - first_norm,
             "head_input": 0.0 if head_adapted else -n * d * a,
             "embeddings": -shard.seq_len * INT64 if spec.position == "learned" else 0.0,
             "final_norm": -n * d * r if spec.norm == "rmsnorm" else 0.0}
    if head_adapted:
        parts["head_input"] = n * rank * a
    copies = 0.0
    if amp:
        if finetune.base_storage != "none":        # quantized Linears save their quantized weight, no 16-bit copy
            layers = [q for q in projections(spec) if not any(role == "head" for role, _ in q.parts)]
            copies -= w * sum(q.count * q.in_features * q.out_features for q in layers)
        copies += w * lora_trainable_params(spec, rank, finetune.lora_targets)
    parts["weight_copies"] = copies / (tp if tp > 1 else 1)
    parts["total"] = sum(v for k, v in parts.items() if k != "per_layer")
    return parts


def apply_activations(activations: dict, delta: dict) -> dict:
    """`activations` (account.memory.activations parts) with the LoRA `delta` added, totals and stages included."""
    out = dict(activations)
    for key, value in delta.items():
        if key != "total":
            out[key] = out.get(key, 0.0) + value
    for key in ("total", "first_stage", "last_stage"):
        out[key] = activations[key] + delta["total"]
    return out


def dequantize_moment_extra_bytes(spec, shard, states: dict, param_bytes: float) -> float:
    """Bytes alive at the last layer's largest quantized Linear beyond the saved activations (module docstring): the
    residual, the MLP input and the down projection's input, and the dequantization's (8 + 3·b)·numel temporaries."""
    if states["storage"] == "none":
        return 0.0
    from trainledger.account.memory.activations import recipe_bytes
    a, r, _ = recipe_bytes(shard.precision)
    n, d = shard.n_tokens, spec.d_model
    layers = [q for q in projections(spec) if not any(role == "head" for role, _ in q.parts)]
    biggest = max(q.in_features * q.out_features for q in layers)
    per_weight = (INT64 + 3 * param_bytes) if states["storage"].startswith("nf4") else 2 * param_bytes
    inputs = n * d * r + n * d * a + n * spec.d_ff * a
    return (inputs + per_weight * biggest) / shard.tp


def model_tensors(spec) -> list[tuple[int, int]] | None:
    """(numel, count) of every parameter tensor of trainledger's dense Transformer (models/transformer.py), for the
    optimizers that store each tensor by its size (adamw-8bit); None for a mixture of experts or latent attention."""
    if spec.is_moe or spec.is_mla:
        return None
    d, L, f = spec.d_model, spec.n_layers, spec.d_ff
    q, kv = spec.n_heads * spec.head_dim, spec.kv_heads * spec.head_dim
    norm = [(d, 1)] + ([(d, 1)] if spec.norm == "layernorm" and spec.norm_bias else [])
    layer = [(d * q, 1), (d * kv, 2), (q * d, 1), (d * f, 2 if spec.gated_mlp else 1), (f * d, 1)]
    layer += norm * (1 if spec.parallel_shared_norm else 2) + (norm * 2 if spec.sandwich_norm else [])
    if spec.qkv_bias:
        layer += [(q, 1), (kv, 2)]
    if spec.attn_out_bias:
        layer.append((d, 1))
    if spec.mlp_bias:
        layer += [(f, 2 if spec.gated_mlp else 1), (d, 1)]
    if spec.qk_norm:
        layer += [(spec.head_dim, 2)] * (2 if spec.norm == "layernorm" and spec.norm_bias else 1)
    out = [(n, c * L) for n, c in layer] + [(spec.vocab_size * d, 1)] + norm
    if spec.position == "learned":
        out.append((spec.max_seq_len * d, 1))
    if not spec.tied_embeddings:
        out.append((spec.vocab_size * d, 1))
    if spec.lm_head_bias:
        out.append((spec.vocab_size, 1))
    return out
