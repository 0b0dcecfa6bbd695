"""Bytes of activations that Hugging Face transformers' own model of a config.json saves for backward (pure, no torch).

account/memory/activations.py predicts trainledger's Transformer to the byte; transformers' modeling files compute
the same function with other code, and autograd keeps other tensors. This module starts from that prediction
and applies, per model_type, the differences of transformers' code, each rule naming the source it reads
(transformers 5.x, tested with 5.24; file paths under src/transformers/):

- loss (loss/loss_utils.py, ForCausalLMLoss): `labels[..., 1:].contiguous()` makes an int64 copy of the shifted
  labels that nll_loss saves (+N·8). The fp32 upcast of the logits (`logits.float()`) is the log-softmax input
  our model also uses, so the log-softmax term is the same.
- GPT-2's `gelu_new` (activations.py, NewGELUActivation) is written in Python:
  0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) keeps x (pow), 0.5·x, tanh's output and 1 + tanh (mul) beside
  the output: 3 more N·d_ff tensors per layer than one fused F.gelu (gelu_pytorch_tanh / gelu: fused).
- KV cache (cache_utils.py, DynamicLayer.update): with config.use_cache (the default, also in training) every
  layer concatenates k and v into a cache, `torch.cat([empty, k])`, so attention sees fresh copies. In GPT-2
  (models/gpt2/modeling_gpt2.py, GPT2Attention.forward) q is a view of the fused c_attn output, which SDPA
  keeps whole (N·3d) beside the copies of k and v: +2·N·d. Without the cache, the fused projection output of
  GPT-NeoX and Phi-3 stays alive through v, a view of it: +N·(H + Hkv)·dh.
- Phi-3's rotary code (models/phi3/modeling_phi3.py, apply_rotary_pos_emb) always concatenates the rotated and
  pass-through parts (`torch.cat([q_rot..., q_pass])`), so q is laid out (B, H, T, dh) and merging heads for
  o_proj copies the attention output (+N·H·dh), as partial RoPE does in ours.
- Eager attention (`--attn-impl eager`; the default where the model has no SDPA: gemma2's `_supports_sdpa =
  False`, mpt) and SDPA with attention dropout (PyTorch's math path, `_scaled_dot_product_attention_math`):
  eager_attention_forward (models/llama/modeling_llama.py and its copies) saves q, repeat_kv(k), repeat_kv(v)
  (H heads each: repeat_kv expands and copies, and matmul copies a transposed view), the fp32 softmax
  (`softmax(dtype=float32)`; GPT-2's plain softmax is in the scores' dtype), its cast to the activation dtype
  (`.to(query.dtype)`, or autocast's copy for the next matmul), Gemma 2's tanh of soft-capping, the dropout
  noise and the dropped probabilities when attention_dropout > 0 (SDPA's math path on CPU upcasts 16-bit q, k, v
  and keeps all of these in fp32), and the merged heads (`.transpose(1,
  2).contiguous()`, o_proj's input). The additive mask (causal, sliding, ALiBi) is read by an add and not kept.
- Dropout (train mode; the config's probabilities): PyTorch's CPU dropout (`at::dropout` → input · noise, the
  fused `native_dropout` is CUDA-only) keeps a noise tensor of the input's size and dtype. CUDA keeps a 1-byte
  bool mask instead (not modelled: the prediction describes the CPU and fake-tensor kernels, as
  account/memory/activations.py does for LayerNorm). GPT-2: embd_pdrop after the embeddings, resid_pdrop after the
  attention and MLP outputs, attn_pdrop on the probabilities; Llama-style models: attention_dropout;
  GPT-NeoX: hidden_dropout (after the embeddings, attention and MLP) and attention_dropout; Phi-3: embd_pdrop, resid_pdrop,
  attention_dropout; MPT: emb_pdrop, resid_pdrop, attn_config.attn_pdrop.
- Autocast (amp-*): a fused projection (GPT-2's c_attn, NeoX's query_key_value, Phi-3's qkv_proj and
  gate_up_proj, MPT's Wqkv) saves one 16-bit copy of its input where our separate q, k, v (gate, up) Linears
  save one each.
- MPT (models/mpt/modeling_mpt.py): MptModel builds a (B, 1, T, T) bool causal mask that MptAttention's
  `masked_fill` keeps; the ALiBi bias is added (not kept), where our SDPA keeps an additive (H, T, T) mask.
- SDPA with a sliding window shorter than the sequence (masking_utils.py builds a (B, 1, T, T) bool mask;
  integrations/sdpa_attention.py, use_gqa_in_sdpa is False with a mask, so repeat_kv copies k and v to H heads):
  per such layer +2·N·(H − Hkv)·dh and the mask converted to the query's dtype by SDPA, B·T·T.
- Mixture of experts (integrations/moe.py, the grouped_mm experts path transformers uses by default): as ours,
  plus one more int64 per routed token (the inverse permutation) and the int32 offsets of the E groups. Under
  autocast `aten._grouped_mm` is not cast: the routed tokens and the experts' tensors stay fp32 and the expert
  weights are not copied to 16 bit; Qwen's routers cast the routing weights to the (16-bit) logits' dtype
  (modeling_qwen3_moe.py, Qwen3MoeTopKRouter), Mixtral's keep them fp32.

Notation as in account/memory/activations.py: N = B·T tokens, a = activation bytes, r = residual/norm bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainledger.account.memory.activations import _FP32, _INDEX, ActivationShard, activations_bytes, recipe_bytes
from trainledger.errors import TrainledgerError

ATTN_IMPLS = ("eager", "sdpa")
# What transformers picks without attn_implementation: SDPA where the model class declares `_supports_sdpa = True`
# (modeling_utils.py, PreTrainedModel._check_and_adjust_attn_implementation), else eager.
# modeling_gemma2.py: `_supports_sdpa = False  # sdpa does not support softcapping`; modeling_mpt.py declares none.
EAGER_ONLY = ("gemma2", "mpt")
# model_types whose q, k, v come from one fused projection (c_attn, query_key_value, qkv_proj, Wqkv)
FUSED_QKV = ("gpt2", "gpt_neox", "phi3", "mpt")
# activation functions transformers writes in Python (activations.py ACT2FN): extra N·d_ff tensors saved per layer
PYTHON_GELU_EXTRA = {"gelu_new": 3, "gelu_fast": 3}


@dataclass(frozen=True)
class HfImpl:
    """How transformers runs a config: model_type, attention implementation, KV cache, dropout probabilities (train mode)."""

    model_type: str
    attn_impl: str = "sdpa"
    use_cache: bool = True
    activation: str = ""            # hidden_act / activation_function as written in the config
    embd_dropout: float = 0.0       # after the embeddings
    resid_dropout: float = 0.0      # after the attention output and after the MLP output
    attn_dropout: float = 0.0       # on the attention probabilities
    meta: bool = False              # on the meta device SDPA has no flash kernel: its math path runs

    def __post_init__(self):
        if self.attn_impl not in ATTN_IMPLS:
            raise TrainledgerError(f"--attn-impl must be one of {', '.join(ATTN_IMPLS)}, got {self.attn_impl!r}")
        if self.attn_impl == "sdpa" and self.model_type in EAGER_ONLY:
            raise TrainledgerError(f"--attn-impl sdpa: transformers' {self.model_type} supports eager attention only")

    @property
    def math_attention(self) -> bool:
        """Eager attention, or SDPA with dropout (PyTorch's CPU flash kernel has no dropout: the math path runs)."""
        return self.attn_impl == "eager" or self.attn_dropout > 0 or self.meta


def default_attn_impl(model_type: str) -> str:
    """The attention transformers picks for `model_type` when the config names none."""
    return "eager" if model_type in EAGER_ONLY else "sdpa"


def hf_activations_bytes(spec, impl: HfImpl, batch_size: int, seq_len: int, *, precision: str = "fp32") -> dict:
    """Bytes transformers' model of `spec` saves for backward in one forward (one device, no recompute), by part + total.

    Parts: "trainledger" (account/memory/activations.py's total for our Transformer, flash attention), then the
    differences named in the module docstring: labels, per_layer_attention, per_layer_mlp, dropout, moe, total.
    """
    ours = activations_bytes(spec, ActivationShard(batch_size, seq_len, precision, flash=True))
    a, r, w = recipe_bytes(precision)
    amp = w > 0
    B, T, n = batch_size, seq_len, batch_size * seq_len
    d, L = spec.d_model, spec.n_layers
    mt = impl.model_type

    attention = sum(count * _attention_delta(spec, impl, B, T, a, amp, _sdpa_mask(spec, impl, i, T))
                    for i, count in spec.layer_groups()) / L
    mlp = n * spec.d_ff * a * PYTHON_GELU_EXTRA.get(impl.activation, 0) if mt in ("gpt2", "gpt_neox") else 0
    if mt == "mpt":      # ALiBi: our SDPA keeps its additive (H, T, T) mask; MptAttention only adds the bias and
        # masked_fill's the (B, 1, T, T) bool causal mask of MptModel.forward, which it keeps
        attention_masks = -ours["masks"] + B * T * T
    else:                # ours keeps one (T, T) mask per kind; transformers keeps its masks per layer (below) or none
        attention_masks = -ours["masks"]
    # dropout noise: the embeddings' (residual dtype), two residual branches' (activation dtype) per layer
    dropout = (n * d * r if impl.embd_dropout > 0 else 0) + (L * 2 * n * d * a if impl.resid_dropout > 0 else 0)
    if amp and mt in FUSED_QKV:
        # one autocast copy of the norm output feeds the fused projection, where ours makes one per q, k, v
        # nn.Linear (Phi-3's fused gate_up_proj likewise saves one copy where ours makes two)
        attention -= 2 * n * d * a
        mlp -= n * d * a if mt == "phi3" else 0
    moe = spec.n_moe_layers * (n * spec.experts_per_token * _INDEX + spec.n_experts * 4) if spec.is_moe else 0
    if spec.is_moe and amp:
        # aten._grouped_mm is not on autocast's list: the experts run in the residual's fp32 on fp32 weights (no
        # 16-bit copies of the tokens or of the expert weights); ours casts both
        d_ff, k, m = spec.d_ff, spec.experts_per_token, (3 if spec.gated_mlp else 2)
        ours_routed = d * a * (2 if spec.gated_mlp else 1) + (4 if spec.gated_mlp else 2) * d_ff * a + d * a
        hf_routed = 2 * d * r + (4 if spec.gated_mlp else 2) * d_ff * r
        moe += spec.n_moe_layers * (n * k * (hf_routed - ours_routed) - w * spec.n_experts * m * d * d_ff)
        if mt in ("qwen2_moe", "qwen3_moe"):
            # Qwen*MoeTopKRouter: `router_top_value.to(router_logits.dtype)`, 16-bit logits under autocast
            moe -= spec.n_moe_layers * n * k * (r - a)
    labels = n * _INDEX
    parts = {"trainledger": ours["total"], "labels": labels, "per_layer_attention": attention, "per_layer_mlp": mlp,
             "masks": attention_masks, "dropout": dropout, "moe": moe}
    parts["total"] = ours["total"] + labels + L * (attention + mlp) + attention_masks + dropout + moe
    return parts


def _sdpa_mask(spec, impl: HfImpl, layer: int, T: int) -> bool:
    """Whether SDPA gets a materialised mask in `layer`: a sliding window shorter than the sequence (masking_utils
    cannot hand SDPA `is_causal` then). Eager attention adds its mask and keeps nothing."""
    return not impl.math_attention and spec.is_sliding(layer) and T > spec.sliding_window


def _attention_delta(spec, impl: HfImpl, B: int, T: int, a: int, amp: bool, masked: bool = False) -> float:
    """Bytes one layer of transformers' attention keeps minus what our SDPA layer keeps (account/memory/activations.py)."""
    n, h, hkv, dh = B * T, spec.n_heads, spec.kv_heads, spec.head_dim
    partial = spec.position == "rope" and spec.rotary_dim < dh
    ours_copy = n * h * dh * a if partial else 0
    if spec.attn_softcap is not None:
        # ours writes soft-capped attention out: q per group, k, v; tanh, fp32 softmax, its cast; the output
        ours_core = (n * (h + 2 * hkv) * dh * a + B * h * T * T * (a + _FP32 + (a if a != _FP32 else 0))
                     + n * h * dh * a)
    else:
        ours_core = n * (h + 2 * hkv) * dh * a + n * h * dh * a + ours_copy + B * h * T * _FP32
    scores = B * h * T * T
    if impl.math_attention and impl.attn_impl == "sdpa":
        # SDPA with dropout (or on the meta device) runs PyTorch's math path (_scaled_dot_product_attention_math),
        # which computes 16-bit inputs in fp32 there: it keeps q, k, v (H heads) and the softmax (with dropout also
        # the noise and the dropped probabilities) in fp32; only the output is cast back (o_proj's input)
        kept_scores = 3 if impl.attn_dropout > 0 else 1
        return 3 * n * h * dh * _FP32 + scores * kept_scores * _FP32 + n * h * dh * a - ours_core
    if impl.math_attention:
        if impl.model_type == "gpt2":
            softmax = _FP32 if (a == _FP32 or amp) else a         # softmax in the scores' dtype (fp32 under autocast)
            dropped = a                                            # .type(value.dtype)
        else:
            softmax = _FP32                                        # softmax(dtype=torch.float32)
            # .to(query.dtype): under autocast RoPE's fp32 tables leave q in fp32, so dropout runs in fp32
            dropped = _FP32 if amp and spec.position == "rope" else a
        probs = softmax + (a if softmax != a else 0)               # the cast back (or autocast's copy) for the next matmul
        if impl.attn_dropout > 0:
            # dropout keeps its noise; the next matmul keeps the dropped probabilities (or autocast's 16-bit copy)
            probs = softmax + dropped + a
        tanh = a if spec.attn_softcap is not None else 0           # Gemma 2's soft-capping keeps tanh's output
        hf_core = 3 * n * h * dh * a + scores * (probs + tanh) + n * h * dh * a
        return hf_core - ours_core
    # SDPA (flash kernel on CPU): the same tensors as ours, except where the code around it differs
    extra = 0
    if impl.model_type == "gpt2" and impl.use_cache:
        extra += 2 * n * h * dh * a          # k, v cache copies; c_attn's output stays whole through q
    if impl.model_type in ("gpt_neox", "phi3") and not impl.use_cache:
        extra += n * (h + hkv) * dh * a      # v is a view of the fused projection, which stays whole
    if impl.model_type == "phi3" and not partial:
        extra += n * h * dh * a              # q laid out (B, H, T, dh) by the rotary cat: o_proj's input is a copy
    if masked:
        # integrations/sdpa_attention.py: with a mask, use_gqa_in_sdpa is False and repeat_kv copies k, v to H heads;
        # SDPA converts the bool (B, 1, T, T) mask to the query's dtype and keeps it
        extra += 2 * n * (h - hkv) * dh * a + B * T * T * a
    return extra


def hf_impl_note(impl: HfImpl) -> str:
    """One line naming what the prediction assumes about transformers' run."""
    drops = [f"{k} {v:g}" for k, v in (("embeddings", impl.embd_dropout), ("residual", impl.resid_dropout),
                                        ("attention", impl.attn_dropout)) if v > 0]
    return (f"--impl hf: transformers' {impl.model_type} with {impl.attn_impl} attention, KV cache "
            f"{'on' if impl.use_cache else 'off'} (config use_cache), dropout {', '.join(drops) if drops else 'none'} "
            "(train mode; CPU kernels: dropout noise in the input dtype, CUDA keeps a 1-byte mask)")


def hf_impl_from_config(config: dict, attn_impl: str | None = None, flag: str = "--model") -> HfImpl:
    """The HfImpl of a config.json's dict; attn_impl None = what transformers picks for its model_type."""
    from trainledger.specs.hf_config import hf_run_fields
    fields = hf_run_fields(config, flag)
    return HfImpl(attn_impl=attn_impl or default_attn_impl(fields["model_type"]), **fields)


def hf_memory_per_gpu(spec, impl: HfImpl, hardware, run) -> dict:
    """account.memory.per_gpu.memory_per_gpu of `run` on `hardware` with the activations of transformers' model (one
    GPU: no tp, pp, recompute)."""
    from trainledger.account.memory.per_gpu import cuda_reserve_bytes, memory_per_gpu, training_peak_bytes
    from trainledger.specs.recipes import get_optimizer
    for flag, value, plain in (("--tp", run.layout.tp, 1), ("--pp", run.layout.pp, 1),
                               ("--recompute", run.levers.recompute, "none")):
        if value != plain:
            raise TrainledgerError(f"{flag} {value} applies to trainledger's Transformer; --impl hf predicts transformers' "
                                   f"model on one device without it (drop {flag} or --impl hf)")
    result = memory_per_gpu(spec, hardware, run)
    batch_size, seq_len, precision = result["batch_size"], result["seq_len"], result["precision"]
    parts = hf_activations_bytes(spec, impl, batch_size, seq_len, precision=precision)
    result["total_bytes"] += parts["total"] - result["activations_bytes"]
    result["activations_bytes"] = parts["total"]
    result["activations_parts_hf"] = parts
    # the step's peaks over transformers' activations (the loss's logits-sized buffers as in ours)
    state_parts = {k: result[k] for k in ("params_bytes", "grads_bytes", "master_params_bytes", "optimizer_bytes",
                                          "activations_bytes")}
    peaks = training_peak_bytes(spec, state_parts, None, n_params=result["n_params"],
                                shard=ActivationShard(batch_size, seq_len, result["precision"]),
                                optimizer=get_optimizer(result["optimizer"]), grad_accum=result["grad_accum"])
    result.update(peak_bytes=peaks["later_steps"], first_step_peak_bytes=peaks["first_step"], peak_moment=peaks["moment"])
    if result["reserve_parts"] is not None:     # the CUDA reserve of the new peak
        result["reserve_parts"] = cuda_reserve_bytes(peaks["later_steps"])
        result["reserve_bytes"] = result["reserve_parts"]["total"]
    if "headroom_bytes" in result and "memory_per_gpu_bytes" in result:
        result["headroom_bytes"] = result["memory_per_gpu_bytes"] - result["peak_bytes"] - result["reserve_bytes"]
        result["fits"] = result["headroom_bytes"] >= 0
    return result
