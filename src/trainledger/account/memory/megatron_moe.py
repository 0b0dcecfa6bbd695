"""Bytes Megatron-Core keeps for backward in a mixture-of-experts Transformer layer, and its model-state bytes. Pure.

Megatron Bridge's MoE recipes (Qwen3, gpt-oss; scripts/performance/configs) run Megatron-Core with Transformer
Engine modules, the alltoall token dispatcher, TEGroupedMLP experts and selective recomputation of
recompute_modules ["layernorm", "moe_act"]. Per token and layer, what stays alive until backward (a = bytes of a
16-bit activation; q = bytes of a saved Linear input: a, or one FP8 byte + its scales under FP8 recipes, which TE
saves as one FP8 copy; d, f = d_model, one expert's d_ff; h, h_kv, d_h heads; E experts, top-k):

attention (TELayerNormColumnParallelLinear: the input norm is fused into the QKV Linear, so the "layernorm"
  recomputation does not apply to it: megatron/core/transformer/transformer_layer.py sets recompute_input_layernorm
  only when input_layernorm is not IdentityOp):
    the norm's input d·a, its output saved as the QKV Linear's input d·q, the norm's rstd (fp32);
    the fused QKV output (h + 2·h_kv)·d_h·a (split into views: v, the QK-norm inputs keep its storage);
    rotated q and k (h + h_kv)·d_h·a (QK-norm's rstd per head row, fp32); the flash core's output h·d_h·a and
    its fp32 logsumexp h·4; the output projection's saved input: the core output itself (16 bit) or an FP8 copy.
MoE block (megatron/core/transformer/moe):
    pre-MLP norm: "layernorm" recomputed (CheckpointWithoutOutput): its input d·a only; else input, rstd, output;
    router: fp32 scores (softmax output) and the probabilities [tokens, E] (the aux-loss reads the scores), the
      routing map [tokens, E] (bool): 2·E·4 + E;
    dispatch permutation: TE's row_id_map [tokens, 2E + 1] int32 (transformer_engine permutation);
    per routed copy (k per token; under balanced routing each GPU receives as many copies as its tokens send):
      fc1 input (the all-to-all's output, saved by TE GroupedLinear) d·q, fc1 output 2f·a (gated; f·a otherwise:
      the input the checkpointed activation keeps), the permuted probability (fp32), and — only without "moe_act"
      in the recomputation — the activation's output as fc2's saved input f·q (TEGroupedMLP.forward:
      CheckpointWithoutOutput around bias_act_func, discard_output_and_register_recompute after linear_fc2).
      fc2's output is not saved (probabilities are applied inside the activation; unpermute needs only the map).
    shared expert (when the model has one): its fc1 output and activation output, 3·f_s·a (gated).
Tensor parallelism divides the attention heads' and experts' d_ff terms by tp; the norm inputs and outputs are
divided only under sequence parallelism. Not modelled: CUDA-graph static buffers, the interleaved schedule's extra
in-flight micro-batches ((pp − 1)/(pp·vp) of a stage's activations), MTP modules.

Model states: Megatron-LM's distributed optimizer keeps 6 + 12/d bytes per parameter with bf16 parameters and fp32
gradients (docs/source/api-guide/dist_optimizer.md, "Theoretical memory savings": the fp32 main grads are not
distributed). Megatron Bridge's performance runs reduce gradients in bf16 instead (scripts/performance,
set_basic_perf_overrides: recipe.mixed_precision.grad_reduce_in_fp32 = False, recipe.ddp.grad_reduce_in_fp32 = False):
2 + 2 + 12/d bytes, which is what the mixed-bf16 recipe with ZeRO-1 already counts; memory_per_gpu keeps it.
"""

from __future__ import annotations

from trainledger.account.counting.experts import expert_token_share
from trainledger.account.memory.activations import recipe_bytes
from trainledger.specs.fp8 import fp8_scheme

FP32, INT32, BOOL = 4, 4, 1
RECIPE_RECOMPUTE = ("layernorm", "moe_act")  # Megatron Bridge MoE recipes' recompute_modules


def saved_input_bytes(precision: str) -> float:
    """q: bytes per element of a Linear input TE saves for backward: one FP8 copy (+ scales) under an FP8 recipe that
    saves FP8 (specs/fp8.py), else the 16-bit input."""
    scheme = fp8_scheme(precision)
    if scheme is not None and scheme.saved_fp8:
        return scheme.fp8_bytes_per_element() * scheme.saved_copies
    return float(recipe_bytes(precision)[0])


def attention_bytes_per_token(spec, precision: str, tp: int = 1, sp: bool = False) -> dict:
    """Bytes one token's attention block keeps in Megatron-Core with TE (module docstring), by named part."""
    a, q = recipe_bytes(precision)[0], saved_input_bytes(precision)
    d, h, hkv, dh = spec.d_model, spec.n_heads / tp, spec.kv_heads / tp, spec.head_dim
    seq = tp if sp else 1
    out_copy = 0.0 if q == a else h * dh * q
    return {"norm_input": d * a / seq, "qkv_input": d * q / seq, "norm_rstd": FP32 / seq,
            "qkv_output": (h + 2 * hkv) * dh * a,
            "rotated_qk": (h + hkv) * dh * a + ((h + hkv) * FP32 if spec.qk_norm else 0.0),
            "core_output": h * dh * a, "logsumexp": h * FP32, "out_proj_input": out_copy}


def moe_bytes_per_token(spec, precision: str, tp: int = 1, sp: bool = False,
                        recompute_modules: tuple = RECIPE_RECOMPUTE, etp: int | None = None) -> dict:
    """Bytes one token's MoE block keeps in Megatron-Core (alltoall dispatcher, TEGroupedMLP), by named part.
    `etp` (default tp): expert tensor parallelism; with sequence parallelism a rank's experts run etp/tp of the
    micro-batch's routed copies (account.counting.experts.expert_token_share), each with d_ff/etp."""
    a, q = recipe_bytes(precision)[0], saved_input_bytes(precision)
    etp = tp if etp is None else etp
    share = expert_token_share(tp, sp, etp)
    d, f, e, k = spec.d_model, spec.d_ff / etp, spec.n_experts, spec.experts_per_token * share
    seq = tp if sp else 1
    norm = d * a if "layernorm" in recompute_modules else 2 * d * a + FP32
    fc1_out = (2 if spec.gated_mlp else 1) * f * a
    act_out = 0.0 if "moe_act" in recompute_modules else f * q
    shared = 0.0
    if spec.shared_expert_d_ff:
        shared = (3 if spec.gated_mlp else 2) * spec.shared_expert_d_ff / tp * a
    return {"pre_mlp_norm": norm / seq, "router": 2 * e * FP32 + e * BOOL, "permute_map": (2 * e + 1) * INT32,
            "fc1_input": k * d * q, "fc1_output": k * fc1_out, "probs": k * FP32, "fc2_input": k * act_out,
            "shared_expert": shared}


def layer_bytes_per_token(spec, layer: int, precision: str, tp: int = 1, sp: bool = False,
                          recompute_modules: tuple = RECIPE_RECOMPUTE, etp: int | None = None) -> float:
    """Bytes one token keeps in layer `layer` (attention + MoE block; a dense layer of an MoE model: its MLP's fc1
    output and fc2 input, 16 bit, with the norm as the MoE block's)."""
    attention = sum(attention_bytes_per_token(spec, precision, tp, sp).values())
    if spec.is_moe_layer(layer):
        return attention + sum(moe_bytes_per_token(spec, precision, tp, sp, recompute_modules, etp).values())
    a, q = recipe_bytes(precision)[0], saved_input_bytes(precision)
    f = (spec.dense_d_ff or spec.d_ff) / tp
    seq = tp if sp else 1
    return attention + (2 * spec.d_model * a + FP32) / seq + (3 if spec.gated_mlp else 2) * f * a + f * q


def activations_bytes(spec, shard, *, base: dict, etp: int | None = None) -> dict:
    """account.memory.activations.activations_bytes' parts with the layers replaced by Megatron-Core's (above), for
    the micro-batch `shard` (account.memory.activations.ActivationShard: its tokens, recipe, tp, sp and pp).

    `base`: the parts account.memory.activations gives the same run (embeddings, rope, masks, the head and loss
    are kept); per_layer, layers, total, first_stage and last_stage are recomputed the same way (1F1B: the first
    stage holds pp micro-batches of ceil(L/pp) layers)."""
    precision, tp, sp, pp = shard.precision, shard.tp, shard.sp, shard.pp
    n = shard.batch_size * shard.seq_len
    per_group = [(n * layer_bytes_per_token(spec, i, precision, tp, sp, etp=etp), count)
                 for i, count in spec.layer_groups()]
    per_layer = max(b for b, _ in per_group)
    layers_per_stage = -(-spec.n_layers // pp)
    layers = sum(b * c for b, c in per_group) if pp == 1 else per_layer * layers_per_stage * pp
    outside_first = base["embeddings"] + base["rope"] + base["masks"]
    head = base["final_norm"] + base["head_input"] + base["head_logits"] + base["loss"]
    first = layers + outside_first
    last = per_layer * layers_per_stage + base["rope"] + base["masks"] + head
    if pp == 1:
        first, last = first + head, 0.0
    parts = dict(base, per_layer=per_layer, layers=layers)
    parts["total"] = max(first, last) + base["weight_copies"]
    parts["first_stage"] = first + base["weight_copies"]
    parts["last_stage"] = (last if pp > 1 else first) + base["weight_copies"]
    return parts
