"""Bytes FP8 training adds or saves on one GPU, beside the 16-bit recipe it rests on (specs/fp8.py). Pure.

- FP8 weight copies (Transformer Engine: the FP8 weight and its transpose, cached across micro-batches; MXFP8: the
  row- and column-wise copies with one E8M0 byte per 32 elements): weight_copies × (1 + scales) bytes per Linear
  parameter of the layers, placed and sharded as the parameters are (tp, pp, ZeRO-3). torchao keeps none.
- Saved Linear inputs: TE saves each Linear's input once, in FP8 (its column-wise copy, for wgrad), instead of
  16 bit: per layer and token (d_model for q/k/v, n_heads·head_dim for the output projection, d_model for the
  MLP's up/gate, d_ff for its down projection; experts: k·d_ff) × (a − FP8 bytes), over the layers whose
  activations the recomputation policy keeps (none under full recomputation, which keeps only layer inputs).
  torchao saves the 16-bit input and recasts it in backward: no change.
- Amax histories (delayed scaling): 3 scaled tensors per Linear (input, weight, output gradient) × history × 4 B.
Not modelled: transient FP8 casts of the layer being computed (freed within the layer), FP8 all-gathers.
"""

from __future__ import annotations

from trainledger.account.counting.params import param_counts
from trainledger.specs.fp8 import fp8_scheme

FP32 = 4
SCALED_TENSORS_PER_LINEAR = 3      # input, weight, output gradient (TE's FP8 metadata per GEMM)


def linear_params(spec) -> float:
    """Parameters of the Linears inside the layers (what FP8 casts): all parameters but embeddings, the LM head and
    the norms (param_counts' components)."""
    counts = param_counts(spec)
    c = counts["components"]
    outside = c.get("token_embedding", 0) + c.get("position_embedding", 0) + c.get("lm_head", 0)
    norms = sum(v for k, v in c.items() if "norm" in k)
    return max(counts["n_params"] - outside - norms, 0.0)


def linears_per_layer(spec) -> int:
    """Linear modules per layer: q, k, v, o and the MLP's matrices (each expert's)."""
    mlp = 3 if spec.gated_mlp else 2
    return 4 + mlp * max(1, getattr(spec, "n_experts", 0) or 1)


def saved_input_elements_per_token(spec, tp: int) -> float:
    """Elements of the Linear inputs one token saves per layer on one GPU (module docstring): the column-parallel
    inputs (q/k/v, MLP up) replicated over tp, the row-parallel ones (output projection, MLP down) split."""
    k = spec.experts_per_token if spec.is_moe else 1
    return 2 * spec.d_model + (spec.n_heads * spec.head_dim + spec.d_ff * k) / tp


def fp8_memory(spec, precision: str, shard, *, n_params_per_gpu: float, params_divisor: float,
               activations: dict | None, a: int = 2) -> dict | None:
    """{"weight_copies_bytes", "saved_inputs_bytes_saved", "amax_history_bytes"} on one GPU, or None without FP8.

    `precision`: the run's recipe; `shard` (account.memory.activations.ActivationShard): the micro-batch's tokens on
    this GPU, its tp and recomputation; `activations`: its saved parts (None: no FP8-saved inputs counted)."""
    scheme = fp8_scheme(precision)
    if scheme is None or spec is None or getattr(spec, "kind", None) != "transformer":
        return None
    total = param_counts(spec)["n_params"]
    linear = linear_params(spec)
    share = linear / total if total else 0.0
    copies = n_params_per_gpu * share / params_divisor * scheme.weight_copies * scheme.fp8_bytes_per_element()
    saved = 0.0
    tp = shard.tp
    if scheme.saved_fp8 and activations and shard.recompute != "full" and activations.get("per_layer"):
        layers_held = activations.get("layers", 0.0) / activations["per_layer"]
        per_layer = shard.batch_size * shard.seq_len * saved_input_elements_per_token(spec, tp)
        saved = layers_held * per_layer * (a - scheme.fp8_bytes_per_element() * scheme.saved_copies)
    layers_here = n_params_per_gpu * share / max(linear / spec.n_layers, 1.0) * tp     # layers on this GPU
    amax = layers_here * linears_per_layer(spec) * SCALED_TENSORS_PER_LINEAR * scheme.amax_history * FP32
    return {"weight_copies_bytes": copies, "saved_inputs_bytes_saved": max(saved, 0.0), "amax_history_bytes": amax}


def apply(parts: dict, extra: dict | None) -> dict:
    """`parts` (memory_per_gpu's params_bytes ... activations_bytes) with FP8's bytes: copies and histories with
    the parameters, the saved-input saving off the activations."""
    if extra is None:
        return parts
    out = dict(parts)
    out["params_bytes"] += extra["weight_copies_bytes"] + extra["amax_history_bytes"]
    out["activations_bytes"] -= extra["saved_inputs_bytes_saved"]
    return out
