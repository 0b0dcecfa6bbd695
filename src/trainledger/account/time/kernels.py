"""The kernels of one transformer layer, the head and the embedding, forward and backward, on one GPU. Pure.

Built from the same structure as account.counting.flops (the weight matrices of `weight_matmuls`) and account.memory.activations
(the tensors each op reads and writes), for one micro-batch of `batch_size × seq_len` tokens sharded by
tensor (tp, with sequence parallelism sp) and context parallelism (cp). Two implementations:

- "trainledger": our torch Transformer (models/) in eager PyTorch, op by op with the backward autograd runs for
  each (account/time/eager.py: AMP casts, bias gradients, gradient sums, RMSNorm's six ops...).
- "torchtitan": torchtitan's Llama, our Transformer's eager ops but its complex RoPE, and torch.compile applied per
  block (account/time/torchtitan.py).
- "megatron": Megatron-LM's GPT (the implementation behind Korthikanti et al. 2022): apex fused LayerNorm, one
  fused QKV GEMM, baddbmm QKᵀ + fused scale-mask-softmax + dropout + bmm without flash attention, fused
  bias-GeLU, fused bias-dropout-add (dropout on, p = 0.1, 1-byte masks), weight gradients accumulated into
  fp32 main_grad inside the GEMM (gradient_accumulation_fusion).
Bytes are per element: `a` matmul-input (16 bit under AMP/mixed), `r` residual stream, norm and loss.
Elementwise FLOPs are not counted (DESIGN.md); their time is their bytes over memory bandwidth.
"""

from __future__ import annotations

from dataclasses import replace

from trainledger.account.time import eager, mla

from trainledger.account.time import torchtitan
from trainledger.account.counting.experts import expert_token_share
from trainledger.account.time.compiled import edges as compiled_edges, layer as compiled_layer
from trainledger.account.time.eager import (EAGER_FRAMEWORKS, ew, gemm, head_widths, host, linear_kernels as _linear,
                                            norm_output_bytes)
from trainledger.account.time.moe_loop import per_expert_ops
from trainledger.account.time.optimizer_kernels import (CLIP_PASSES, FOREACH_PASSES, STEP_COUNT,  # noqa: F401 (re-exported)
                                                   foreach_optimizer_kernels, megatron_optimizer_kernels,
                                                   optimizer_kernels)
from trainledger.account.time.roofline import Kernel
from trainledger.account.time.shard import Shard
from trainledger.errors import TrainledgerError
from trainledger.specs.run import FRAMEWORKS, Kernels

FP32 = 4
KERNELS = Kernels()      # the run's default kernels: flash, causal attention, our torch Transformer, eager


# Transformer Engine's GroupedLinear (Megatron's TEGroupedMLP) runs one cuBLAS GEMM per local expert,
# GEMM i on compute stream i % 4 (transformer_engine/common/gemm/cublaslt_gemm.cu nvte_multi_stream_cublas_gemm;
# transformer_engine/common/util/multi_stream.h: num_compute_streams = 4): at most 4 expert GEMMs share the GPU.
TE_GROUPED_GEMM_STREAMS = 4


def _moe_mlp(spec, shard: Shard, *, ep: int = 1, etp: int | None = None, fused: bool = False, loop: bool = False,
             streams: int | None = None):
    """Forward and backward kernels of one mixture-of-experts MLP over the n tokens of micro-batch `shard` on one GPU
    (n_experts/ep experts on it, each expert's d_ff split over tp: tensor-parallel experts, with expert parallelism
    over ep GPUs). `fused`: weight gradients accumulated into fp32 main_grad inside the GEMMs (Megatron).
    Under balanced routing the n·k token copies this GPU sends out equal the ones it receives: each of its E/ep
    experts runs n·k·ep/E tokens (ep × the tokens of ep = 1: bigger, more efficient grouped GEMMs); the
    all-to-all that moves them is account.time.expert_parallel's.

    Router GEMM d_model → n_experts (replicated), softmax and top-k in fp32; tokens permuted to their experts
    (a gather of n·k rows forward, a scatter-add backward); the n_experts expert MLPs as batched GEMMs over
    n·k/n_experts tokens each (balanced routing: the mean load; a skewed router is slower); the gated
    activation; the weighted combine of k outputs per token; the shared expert (and its sigmoid gate) over all
    n tokens (Qwen2-MoE). GEMM FLOPs = account.counting.flops's router + k experts + shared expert per token.
    `streams`: Megatron's TEGroupedMLP runs the experts' GEMMs `streams` at a time (TE_GROUPED_GEMM_STREAMS), not
    as one batched GEMM: each group fills the GPU's waves on its own.
    `etp` (default tp): MoE Parallel Folding (account.counting.experts): the experts' d_ff is split over etp, and
    they run `share` × the n·k routed copies (expert_token_share: etp/tp under sequence parallelism), so
    with etp 1 < tp each expert GEMM is tp/etp × narrower in tokens and wider in d_ff, the same FLOPs.
    `loop`: our torch MoE runs the experts one by one (select the tokens, index_select, the expert's Linears,
    scale, index_put): its ops per expert as counted (account/time/moe_loop.py) are topped up with zero-byte
    kernels and views (dispatch only; their bytes are in the permute/combine kernels), and the forward's experts
    are marked as a loop that synchronizes once per expert (Kernel.loop); Megatron's grouped GEMM runs them at once.
    """
    E, k = spec.n_experts, spec.experts_per_token
    n, tp, d, dt = shard.tokens, shard.tp, spec.d_model, shard.dtypes
    a, amp = dt.a, dt.amp
    share = expert_token_share(tp, shard.sp, etp)
    f = spec.d_ff / (tp if etp is None else etp)
    local = E // ep                                   # experts on this GPU
    copies = n * k * share                            # routed token copies this GPU's experts run
    per_expert = copies / local

    def experts(name: str, fan_in: float, fan_out: float, backward: bool) -> list[Kernel]:
        """The `local` experts' Linears: one batched GEMM (streams None), or groups of `streams` concurrent GEMMs
        (each group wave-quantized as one batched GEMM of `streams`; TE_GROUPED_GEMM_STREAMS)."""
        def one(batch):
            return _linear(name, per_expert, fan_in, fan_out, dt, backward, fused_accumulation=fused, batch=batch)
        if not streams or local <= streams:
            return one(local)
        full, rest = divmod(local, streams)
        return [k for _ in range(full) for k in one(streams)] + (one(rest) if rest else [])

    fwd = _linear("router", n, d, E, dt, backward=False)
    bwd = _linear("router", n, d, E, dt, backward=True, fused_accumulation=fused)
    fwd.append(ew("router_softmax_topk", n * E * (a + 2 * FP32) + n * k * 2 * FP32, count=3))
    bwd.append(ew("router_softmax_backward", n * E * 3 * FP32, count=2))
    loop_f, loop_b = len(fwd), len(bwd)               # where the experts' part starts
    fwd.append(ew("moe_permute", 2 * copies * d * a + copies * 8, count=2))
    bwd.append(ew("moe_unpermute_backward", 3 * copies * d * a, count=2))
    ups = ("expert_gate", "expert_up") if spec.gated_mlp else ("expert_up",)
    for name in ups:
        for backward, out in ((False, fwd), (True, bwd)):
            out += experts(name, d, f, backward)
    hidden = copies * f * a
    fwd += _activation(spec, hidden, "expert_")[0]
    bwd += _activation(spec, hidden, "expert_")[1]
    for backward, out in ((False, fwd), (True, bwd)):
        out += experts("expert_down", f, d, backward)
    fwd.append(ew("moe_combine", copies * d * a + copies * FP32 + n * share * d * a, count=2))
    bwd.append(ew("moe_combine_backward", 2 * copies * d * a + n * share * d * a, count=2))
    if loop:    # our MoE's ops per expert as counted (account/time/moe_loop.py), forward in a synchronizing loop
        f_ops, f_views, b_ops, b_views = per_expert_ops(spec, amp)
        for out, start, ops, views, name in ((fwd, loop_f, f_ops, f_views, "moe_expert_loop"),
                                             (bwd, loop_b, b_ops, b_views, "moe_expert_loop_backward")):
            launched = sum(k.count for k in out[start:] if k.kind != "host")
            viewed = sum(k.count for k in out[start:] if k.kind == "host")
            if local * ops > launched:
                out.append(ew(name, 0.0, count=local * ops - launched))
            out += host(name + "_views", max(0, local * views - viewed))
        fwd[loop_f:] = [replace(k, loop=local) for k in fwd[loop_f:]]
    if spec.shared_expert_d_ff:
        fs = spec.shared_expert_d_ff / tp
        names = ("shared_gate", "shared_up") if spec.gated_mlp else ("shared_up",)
        for name in names:
            fwd += _linear(name, n, d, fs, dt, backward=False)
            bwd += _linear(name, n, d, fs, dt, backward=True, fused_accumulation=fused)
        fwd += _activation(spec, n * fs * a, "shared_")[0]
        bwd += _activation(spec, n * fs * a, "shared_")[1]
        fwd += _linear("shared_down", n, fs, d, dt, backward=False)
        bwd += _linear("shared_down", n, fs, d, dt, backward=True, fused_accumulation=fused)
        if spec.shared_expert_gate:
            fwd += _linear("shared_expert_gate", n, d, 1, dt, backward=False)
            bwd += _linear("shared_expert_gate", n, d, 1, dt, backward=True, fused_accumulation=fused)
            fwd.append(ew("shared_expert_sigmoid_mul", 3 * n * d * a, count=2))
            bwd.append(ew("shared_expert_sigmoid_mul_backward", 4 * n * d * a, count=3))
        fwd.append(ew("shared_expert_add", 3 * n * d * a))
    return fwd, bwd


def _activation(spec, hidden_bytes: float, prefix: str = "") -> tuple[list[Kernel], list[Kernel]]:
    """The MLP activation over `hidden_bytes` (one [tokens, d_ff] tensor): silu/gelu(gate)·up, or GELU."""
    if spec.gated_mlp:   # act(gate) then act·up; backward: the product's two grads, the activation's
        return ([ew(f"{prefix}act_mul", 5 * hidden_bytes, count=2)],
                [ew(f"{prefix}act_mul_backward", 8 * hidden_bytes, count=3)])
    return [ew(f"{prefix}gelu", 2 * hidden_bytes)], [ew(f"{prefix}gelu_backward", 3 * hidden_bytes)]


def layer_kernels(spec, shard: Shard, kernels: Kernels = KERNELS, *, layer: int = 0, ep: int = 1,
                  etp: int | None = None) -> dict[str, list[Kernel]]:
    """{"forward": [...], "backward": [...]} kernels of transformer layer `layer` (0-based; a representative of one
    of spec.layer_groups(): MoE or dense MLP, sliding-window or global attention) for one micro-batch `shard` on
    one GPU, as the run's `kernels` (specs.run.Kernels: flash, causal, framework, dropout, compile) run it.
    `ep`: expert parallelism (the GPU runs n_experts/ep experts over ep × their tokens: `_moe_mlp`); `etp`: expert
    tensor parallelism (default tp; `_moe_mlp`). `kernels.compile`: our Transformer under torch.compile
    (account/time/compiled.py)."""
    framework = kernels.framework
    if framework not in FRAMEWORKS:
        raise TrainledgerError(f"framework must be one of {', '.join(FRAMEWORKS)}, got {framework!r}")
    window = spec.sliding_window if spec.is_sliding(layer) else None
    core = _attention_core(spec, shard, kernels, window)
    moe = (_moe_mlp(spec, shard, ep=ep, etp=etp, fused=framework == "megatron", loop=framework == "trainledger",
                    streams=TE_GROUPED_GEMM_STREAMS if framework == "megatron" else None)
           if spec.is_moe_layer(layer) else None)
    if framework == "megatron":
        latent = mla.megatron_mla(spec, shard, core) if spec.is_mla else None
        return _megatron(spec, shard, core, dropout_masks(kernels), moe, latent)
    rope = torchtitan.rope if framework == torchtitan.FRAMEWORK else None
    if kernels.compile:   # (multi-head latent attention compiled is timed as ordinary attention: not modelled)
        return compiled_layer(spec, shard, core, moe=moe, rope_kernels=rope)
    latent = mla.eager_mla(spec, shard, core, rope or eager.rope) if spec.is_mla else None
    return eager.layer(spec, shard, core, moe=moe, rope_kernels=rope, attention=latent)


def dropout_masks(kernels: Kernels) -> bool:
    """Whether the layer runs dropout masks: as the run says, else as its framework runs (Megatron-LM's GPT: on)."""
    return (kernels.framework == "megatron") if kernels.dropout is None else kernels.dropout


def _attention_blocks(s: int, cp: int, causal: bool, split: bool) -> list[tuple[float, float, bool]]:
    """(share of the executed FLOPs, length whose measured rate applies, causal mask?) of a rank's flash kernels.

    One kernel over the s × s square (causal or not) unless `split` (a causal kernel that skips the masked blocks)
    and cp > 1. Then, with K and V all-gathered (Llama 3,
    arXiv:2407.21783 Sec. 3.3.2) and the sequence cut into 2·cp chunks of c = s/(2·cp) tokens, rank r holding
    chunks r and 2cp − 1 − r, each chunk i attends to the i·c keys before it without a mask and to its own c keys
    causally. Over one rank that is (2cp − 1)/(2cp) of its executed FLOPs in full, unmasked blocks, at the
    measured non-causal rate, and 1/(2cp) in two c × c causal triangles, at the causal rate of length c (the
    causal ratio a square kernel measures, which a rectangle of whole blocks does not pay). The unmasked blocks'
    rate is the one measured at their work-weighted mean key length, Σ i·c·(i·c²) / Σ i·c² = (4cp − 1)·c/3.
    """
    if not split or cp <= 1:
        return [(1.0, s, causal)]
    chunk = s / (2 * cp)
    return [(1 - 1 / (2 * cp), (4 * cp - 1) * chunk / 3, False), (1 / (2 * cp), chunk, True)]


def _attention_core(spec, shard: Shard, kernels: Kernels, window: int | None = None) -> dict[str, list[Kernel]]:
    """The attention core (QKᵀ, softmax, A·V) of micro-batch `shard` as the run's `kernels` run it (flash, causal,
    framework, dropout): a flash kernel, or the math path's T×T tensors.

    With context parallelism each rank holds s/cp queries against all s keys (K, V all-gathered: Llama 3
    Sec. 3.3.2). Executed FLOPs: 2·b·h·(s/cp)·s·dh (QKᵀ) + 2·b·h·(s/cp)·s·dv (A·V) forward, dv the value head
    size (multi-head latent attention: qk 192, v 128); causal flash kernels skip half. A flash kernel's rate is the
    measured one at head size (dh + dv)/2 (GPUSpec.attention_efficiency, interpolated in log2 of the head size and
    clamped at the sizes measured: MLA's 160 takes the head-dim-128 rates; account/time/mla.py).
    A sliding window W < s: a fused kernel with a window (FlashAttention-2's window_size, Megatron) skips the
    blocks outside it, executing the fraction W/s − W²/(2s²) of the square; our torch model passes the window
    as an additive mask (as it does ALiBi's biases), which SDPA runs over the whole square (no causal skipping).
    Soft-capped logits (Gemma 2): our torch model takes the math path (three elementwise passes over the T×T
    scores, softmax in fp32) even with --flash; Megatron-style fused kernels cap inside the kernel
    (FlashAttention-2 ≥ 2.6), free.
    """
    b, s, cp, tp = shard.batch_size, shard.seq_len, shard.cp, shard.tp
    dt, framework, causal = shard.dtypes, kernels.framework, kernels.causal
    a, dtype, masks = dt.a, dt.dtype, dropout_masks(kernels)
    h, kv, dh, dv = spec.n_heads / tp, spec.kv_heads / tp, spec.head_dim, spec.value_dim
    q = s / cp
    full_flops = 2 * b * h * q * s * (dh + dv)      # QKᵀ over the qk head dim, A·V over the value head dim
    rate_dim = (dh + dv) // 2                       # the head size whose measured rate applies (MLA: 160)
    windowed = window is not None and window < s
    eager_torch = framework in EAGER_FRAMEWORKS
    softcap = spec.attn_softcap is not None and eager_torch
    flash = kernels.flash and not softcap
    if flash:
        skips_masked = False                       # a causal kernel that skips the masked blocks (_attention_blocks)
        if eager_torch and (windowed or spec.position == "alibi"):
            executed = full_flops                  # an additive mask (window, ALiBi): SDPA runs the whole square
        elif windowed:
            executed = full_flops * (window / s - window**2 / (2 * s**2))
        else:
            executed, skips_masked = (full_flops / 2, True) if causal else (full_flops, False)
        io = b * (q * h * (dh + dv) + s * kv * (dh + dv)) * a + b * h * q * FP32     # q, o, k, v, logsumexp
        fwd, bwd = [], []
        for share, length, masked in _attention_blocks(s, cp, causal, skips_masked):
            fwd.append(Kernel("flash_attention", "attention", "flash_attention", share * executed, share * io,
                              (length, False, masked, rate_dim), dtype, 1, "forward", True))
            bwd.append(Kernel("flash_attention_backward", "attention", "flash_attention", 2.5 * share * executed,
                              2.5 * share * io, (length, True, masked, rate_dim), dtype, 1, "dgrad", True))
        if eager_torch:
            # FlashAttention-2's backward (Dao 2023, Alg. 2) first computes D = rowsum(dO ∘ O) and accumulates dQ
            # in fp32, then casts it: two more kernels (cuDNN's and PyTorch's flash paths alike, in the traces).
            o_bytes = b * q * h * dv
            prep = ew("attention_backward_prep", o_bytes * 2 * a + b * h * q * FP32 + o_bytes * (FP32 + a), count=3,
                      part="attention", core=True, role="dgrad")              # + the workspace memset
            fwd = [ew("attention_workspace_memset", 0.0, part="attention", core=True)] + fwd
            bwd = [prep] + bwd
            if kv < h:   # SDPA's GQA on cuDNN: k and v expanded to every query head, their gradients summed back
                moved = b * s * (dh + dv) * (kv + h) * a
                fwd = [ew("gqa_expand", moved, count=2, part="attention", core=True)] + fwd
                bwd.append(ew("gqa_reduce", moved, count=2, part="attention", core=True, role="dgrad"))
        return {"forward": fwd, "backward": bwd}
    heads = int(b * h)
    scores = heads * q * s                                  # elements of the T×T scores on this rank
    qk = _core_gemm("scores_qk", q, s, dh, a, dtype, heads)
    av = _core_gemm("probs_v", q, dv, s, a, dtype, heads)
    if framework == "megatron":   # one fused scale-mask-softmax kernel: read and write the scores
        fwd = [qk, ew("scale_mask_softmax", 2 * scores * a, part="attention", core=True)]
    else:                         # SDPA's math path: add the causal mask, then softmax
        fwd = [qk, ew("mask_softmax", 4 * scores * a, count=2, part="attention", core=True)]
    if softcap:   # scores / c, tanh, · c (Gemma 2), then the softmax in fp32 and a cast back
        fwd.append(ew("attention_softcap", 3 * 2 * scores * a + scores * (a + 2 * FP32 + FP32 + a), count=5,
                      part="attention", core=True))
    if masks:
        fwd.append(ew("attention_dropout", scores * (2 * a + 1), part="attention", core=True))
    fwd += [av, ew("context_copy", 2 * b * q * h * dv * a, part="attention", core=True)]
    bwd = [_core_gemm("probs_v_dgrad", q, s, dv, a, dtype, heads, "dgrad"),
           _core_gemm("probs_v_wgrad", s, dv, q, a, dtype, heads, "dgrad"),
           ew("softmax_backward", scores * 3 * a, part="attention", core=True, role="dgrad"),
           _core_gemm("scores_dgrad_q", q, dh, s, a, dtype, heads, "dgrad"),
           _core_gemm("scores_dgrad_k", s, dh, q, a, dtype, heads, "dgrad"),
           ew("context_copy_backward", 2 * b * q * h * dv * a, part="attention", core=True, role="dgrad")]
    if softcap:   # the fp32 softmax's backward and tanh's (1 − t²) chain over the square
        bwd.append(ew("attention_softcap_backward", scores * (3 * FP32 + 3 * 3 * a), count=4, part="attention",
                      core=True, role="dgrad"))
    if masks:
        bwd.append(ew("attention_dropout_backward", scores * (2 * a + 1), part="attention", core=True, role="dgrad"))
    return {"forward": fwd, "backward": bwd}


def _core_gemm(name: str, m: float, n: float, k: float, a: int, dtype: str, heads: int,
               role: str = "forward") -> Kernel:
    """A batched GEMM of the attention core's math path, one per head (account.time.eager.gemm)."""
    return replace(gemm(name, m, n, k, a, dtype, batch=heads, role=role), part="attention", core=True)


def _megatron(spec, shard: Shard, core: dict, dropout: bool, moe=None, latent=None):
    """Megatron-LM's GPT layer for micro-batch `shard` (fused kernels; weight gradients accumulated into fp32
    main_grad in the GEMM), given the attention core's kernels `core` and a MoE MLP's (forward, backward) `moe`.
    `latent`: (forward, backward) of multi-head latent attention (account/time/mla.py) in place of QKV, core, proj."""
    n, n_sp, tp, d = shard.tokens, shard.stream_tokens, shard.tp, spec.d_model
    dt = shard.dtypes.without_autocast()              # Megatron's model is 16-bit: its Linears cast nothing
    a = dt.a
    f = (spec.dense_d_ff if (spec.is_moe and spec.dense_d_ff) else spec.d_ff) / tp      # a dense layer's MLP width
    q_dim, kv_dim = head_widths(spec, tp)
    mlp_mats = 3 if spec.gated_mlp else 2
    fwd, bwd = [], []
    mask = 1 if dropout else 0
    ln = ([ew("layernorm", 2 * n_sp * d * a)], [ew("layernorm_backward", 5 * n_sp * d * a, count=2)])
    bda = ew("bias_dropout_add", n_sp * d * (3 * a + mask))
    bda_bwd = ew("bias_dropout_add_backward", n_sp * d * (2 * a + mask) + n_sp * d * a)   # + bias grad read
    qkv_out = q_dim + 2 * kv_dim
    for block in ("attention", "mlp"):
        fwd += ln[0]
        if block == "attention" and latent:
            fwd += latent[0]
            bwd += latent[1]
        elif block == "attention":
            fwd += _linear("qkv", n, d, qkv_out, dt, backward=False)
            fwd += core["forward"]
            fwd += _linear("proj", n, q_dim, d, dt, backward=False)
            bwd += _linear("proj", n, q_dim, d, dt, backward=True, fused_accumulation=True)
            bwd += core["backward"]
            bwd += _linear("qkv", n, d, qkv_out, dt, backward=True, fused_accumulation=True)
        elif moe:
            fwd += moe[0]
            bwd += moe[1]
        else:
            up = f * (mlp_mats - 1)
            fwd += _linear("fc1", n, d, up, dt, backward=False)
            fwd.append(ew("bias_gelu", n * up * 2 * a))
            fwd += _linear("fc2", n, f, d, dt, backward=False)
            bwd += _linear("fc2", n, f, d, dt, backward=True, fused_accumulation=True)
            bwd.append(ew("bias_gelu_backward", n * up * 3 * a))
            bwd += _linear("fc1", n, d, up, dt, backward=True, fused_accumulation=True)
        fwd.append(bda)
        bwd.append(bda_bwd)
        bwd += ln[1]
        bwd.append(ew("residual_grad_add", 3 * n_sp * d * a))
    return {"forward": fwd, "backward": bwd}


def edge_kernels(spec, shard: Shard, kernels: Kernels = KERNELS) -> dict[str, list[Kernel]]:
    """Kernels outside the layers for micro-batch `shard`, as the run's `kernels` run them (framework, compile,
    loss_upcast): {"embedding_forward", "embedding_backward", "head_forward", "head_backward"}.

    Embedding: a gather (+ learned positions: arange, gather, add; RoPE: its cos/sin tables, a dozen tiny ops);
    its backward sorts the token ids and writes the dense fp32 table gradient (CUDA's deterministic embedding
    backward: about eight kernels), summed with the LM head's when they are tied. Head: the final norm, the LM
    head (vocabulary-parallel over tp), the loss over fp32 logits (ours: logits.float(), log-softmax reading the
    row twice and writing it, NLL; backward: zeros + scatter, log-softmax's backward, the cast back; Megatron:
    vocab-parallel cross entropy, about six fp32 passes). `loss_upcast` False: the cross-entropy reads and writes
    the 16-bit logits as they come, with no cast either way (NeMo Automodel's MaskedCrossEntropy(fp32_upcast=False);
    account.memory.activations.loss_bytes).
    """
    framework, loss_upcast = kernels.framework, kernels.loss_upcast
    n, n_sp, dt = shard.tokens, shard.stream_tokens, shard.dtypes
    a, r, amp = dt.a, dt.r, dt.amp
    d, v = spec.d_model, spec.vocab_size / shard.tp
    logits = n * v
    if framework == "megatron":
        emb_fwd = [ew("embedding", n_sp * d * (r + a) + n_sp * 8, count=2 if spec.position == "learned" else 1)]
        emb_bwd = [ew("embedding_backward", v * d * FP32 * 2 + n_sp * d * (r + FP32), count=2)]
        head_fwd = [ew("final_layernorm", 2 * n_sp * d * a)] + _linear("lm_head", n, d, v, dt, backward=False)
        head_bwd = _linear("lm_head", n, d, v, dt, backward=True, fused_accumulation=True)
        if spec.final_softcap is not None:
            head_fwd.append(ew("final_softcap", 3 * 2 * logits * a, count=3))
            head_bwd.append(ew("final_softcap_backward", 3 * 3 * logits * a, count=3))
        head_fwd.append(ew("vocab_parallel_cross_entropy", logits * (a + FP32 + 5 * FP32), count=6))
        head_bwd.insert(0, ew("cross_entropy_backward", logits * (3 * FP32 + a), count=3))
        head_bwd.append(ew("final_layernorm_backward", 5 * n_sp * d * a))
        return {"embedding_forward": emb_fwd, "embedding_backward": emb_bwd, "head_forward": head_fwd,
                "head_backward": head_bwd}
    table = FP32 if amp else r                    # the embedding table's dtype (fp32 parameters under AMP)
    emb_fwd = [ew("embedding", n_sp * d * 2 * table + n_sp * 8)]
    emb_bwd = [ew("embedding_backward", v * d * FP32 + n_sp * d * (r + FP32) + n_sp * 16, count=8, role="wgrad")]
    if spec.position == "learned":
        t = shard.seq_len / shard.cp
        emb_fwd.append(ew("position_embedding", t * d * 2 * table + n_sp * d * 3 * r, count=3))
        emb_bwd.append(ew("position_embedding_backward", n_sp * d * (r + FP32) + t * d * FP32, count=8, role="wgrad"))
    if spec.position == "rope":
        emb_fwd.append(ew("rope_tables", 24 * shard.seq_len * spec.rotary_dim * FP32, count=11))
    if spec.tied_embeddings:       # the LM head's and the embedding's fp32 weight gradients summed
        emb_bwd.append(ew("tied_weight_grad_sum", v * d * 3 * FP32, role="wgrad"))
    emb_bwd += eager.host("embedding_grad_handover", 1 + (spec.position == "learned"), "wgrad")
    norm_out = norm_output_bytes(dt)
    norm_fwd, norm_bwd = eager.norm(spec, n_sp, d, r, norm_out, "final")
    lm_fwd, lm_bwd = eager.linear("lm_head", n, d, v, dt, input_fp32=norm_out == FP32)
    head_fwd, head_bwd = norm_fwd + lm_fwd, []
    if spec.final_softcap is not None:   # Gemma 2: logits / c, tanh, · c over the [tokens, vocab/tp] logits
        head_fwd.append(ew("final_softcap", 3 * 2 * logits * a, count=3))
        head_bwd.append(ew("final_softcap_backward", 3 * 3 * logits * a, count=3, role="dgrad"))
    if a != FP32 and loss_upcast:        # logits.float() and, backward, its gradient cast back
        head_fwd.append(ew("logits_cast", logits * (a + FP32)))
        head_bwd.insert(0, ew("logits_grad_cast", logits * (FP32 + a), role="dgrad"))
    # log-softmax reads each row twice (max, sum of exp) and writes it: 3 elements per logit (12 B in fp32); NLL
    # reads one per row. Backward: NLL's zeros + scatter (1), log-softmax's backward (reads gradient and output
    # twice, writes: 4); in the logits' dtype `ce` bytes
    ce = FP32 if loss_upcast else a
    head_fwd.append(ew("cross_entropy", logits * 3 * ce + n * 16, count=2))
    head_bwd.insert(0, ew("cross_entropy_backward", logits * 5 * ce, count=3, role="dgrad"))
    head_fwd += eager.host("logits_view", 1)
    head_bwd += eager.host("logits_view_backward", 1, "dgrad") + lm_bwd + norm_bwd
    out = {"embedding_forward": emb_fwd, "embedding_backward": emb_bwd, "head_forward": head_fwd,
           "head_backward": head_bwd}
    if kernels.compile and framework == "trainledger":     # torchtitan compiles each block only: its edges run eager
        return compiled_edges(spec, out, shard)
    return out
