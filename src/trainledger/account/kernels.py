"""The kernels of one transformer layer, the head and the embedding, forward and backward, on one GPU. Pure.

Built from the same structure as account.flops (the weight matrices of `weight_matmuls`) and account.activations
(the tensors each op reads and writes), for one micro-batch of `batch_size × seq_len` tokens sharded by
tensor (tp, with sequence parallelism sp) and context parallelism (cp). Two implementations:

- "trainledger": our torch Transformer (models/) in eager PyTorch: one kernel per torch op — the norm (LayerNorm
  one fused op; RMSNorm as Hugging Face Llama computes it, six), under AMP autocast a cast of each Linear's input
  and weight to 16 bit, the q/k/v/o and MLP GEMMs (biases fused into addmm), RoPE (five ops each on q and k),
  SDPA, the activation (GELU; SwiGLU's silu and product), residual adds; the backward of each, plus the fp32
  accumulation of 16-bit weight gradients under AMP.
- "megatron": Megatron-LM's GPT (the implementation behind Korthikanti et al. 2022): apex fused LayerNorm, one
  fused QKV GEMM, baddbmm QKᵀ + fused scale-mask-softmax + dropout + bmm without flash attention, fused
  bias-GeLU, fused bias-dropout-add (dropout on, p = 0.1, 1-byte masks), weight gradients accumulated into
  fp32 main_grad inside the GEMM (gradient_accumulation_fusion).
Bytes are per element: `a` matmul-input (16 bit under AMP/mixed), `r` residual stream, norm and loss.
Elementwise FLOPs are not counted (DESIGN.md); their time is their bytes over memory bandwidth.
"""

from __future__ import annotations

from trainledger.account.activations import recipe_bytes
from trainledger.account.roofline import Kernel
from trainledger.errors import TrainledgerError
from trainledger.specs.recipes import get_recipe

FRAMEWORKS = ("trainledger", "megatron")
FP32 = 4


def gemm(name: str, m: float, n: float, k: float, a: int, dtype: str, *, batch: int = 1, role: str = "forward",
         part: str = "compute", core: bool = False, out_bytes: int | None = None, extra_bytes: float = 0.0) -> Kernel:
    """A (batched) GEMM C[m,n] = A[m,k]·B[k,n]: 2·m·n·k FLOPs per batch, reads A and B, writes C (a bytes each)."""
    out = a if out_bytes is None else out_bytes
    moved = batch * ((m * k + k * n) * a + m * n * out) + extra_bytes
    shape = tuple(max(1, round(x)) for x in (m, n, k))    # a mean expert load may be fractional: tiles need sizes
    return Kernel(name, part, "gemm", 2.0 * batch * m * n * k, moved, (*shape, batch), dtype, 1, role, core)


def ew(name: str, moved_bytes: float, count: int = 1, part: str = "memory_bound", core: bool = False,
       role: str = "forward") -> Kernel:
    """`count` elementwise kernels that read and write `moved_bytes` in all."""
    return Kernel(name, part, "elementwise", 0.0, moved_bytes, (), "bf16", count, role, core)


def _linear(name: str, n: float, fan_in: float, fan_out: float, a: int, dtype: str, amp: bool, w_bytes: int,
            backward: bool, fused_accumulation: bool = False, batch: int = 1) -> list[Kernel]:
    """A Linear over n tokens: forward GEMM, or backward dgrad + wgrad GEMMs (+ the gradient bookkeeping).
    `batch` > 1: that many Linears of the same shape (experts), each over n tokens, as one batched GEMM."""
    if not backward:
        out = [gemm(name, n, fan_out, fan_in, a, dtype, batch=batch)]
        if amp:   # autocast casts the input and (once per forward) the fp32 weight to 16 bit
            out.append(ew(f"{name}_cast", batch * (n * fan_in * (FP32 + a) + fan_in * fan_out * (FP32 + a)), count=2))
        return out
    grads = [gemm(f"{name}_dgrad", n, fan_in, fan_out, a, dtype, batch=batch, role="dgrad"),
             gemm(f"{name}_wgrad", fan_out, fan_in, n, a, dtype, batch=batch, role="wgrad",
                  out_bytes=FP32 * 2 if fused_accumulation else None)]
    if amp:       # the 16-bit weight gradient is cast to fp32 and accumulated into .grad
        grads.append(ew(f"{name}_grad_accumulate", batch * fan_in * fan_out * (a + 3 * FP32), count=2, role="wgrad"))
    return grads


def _moe_mlp(spec, n: float, d: int, tp: int, a: int, dtype: str, amp: bool, w: int, fused: bool,
             loop: bool = False):
    """Forward and backward kernels of one mixture-of-experts MLP over n tokens on one GPU (all experts on it, each
    expert's d_ff split over tp: tensor-parallel experts, no expert parallelism).

    Router GEMM d_model → n_experts (replicated), softmax and top-k in fp32; tokens permuted to their experts
    (a gather of n·k rows forward, a scatter-add backward); the n_experts expert MLPs as batched GEMMs over
    n·k/n_experts tokens each (balanced routing: the mean load; a skewed router is slower); the gated
    activation; the weighted combine of k outputs per token; the shared expert (and its sigmoid gate) over all
    n tokens (Qwen2-MoE). GEMM FLOPs = account.flops's router + k experts + shared expert per token.
    `loop`: our torch MoE runs the experts one by one (select the tokens, index_select, the expert's Linears,
    scale, index_put): the per-expert launches are added as zero-byte kernels (they cost dispatch overhead on
    a calibrated CPU; their bytes are in the permute/combine kernels); Megatron's grouped GEMM runs them at once.
    """
    E, k = spec.n_experts, spec.experts_per_token
    f = spec.d_ff / tp
    per_expert = n * k / E
    fwd = _linear("router", n, d, E, a, dtype, amp, w, backward=False)
    bwd = _linear("router", n, d, E, a, dtype, amp, w, backward=True, fused_accumulation=fused)
    fwd.append(ew("router_softmax_topk", n * E * (a + 2 * FP32) + n * k * 2 * FP32, count=3))
    bwd.append(ew("router_softmax_backward", n * E * 3 * FP32, count=2))
    fwd.append(ew("moe_permute", 2 * n * k * d * a + n * k * 8, count=2))
    bwd.append(ew("moe_unpermute_backward", 3 * n * k * d * a, count=2))
    ups = ("expert_gate", "expert_up") if spec.gated_mlp else ("expert_up",)
    for name in ups:
        fwd += _linear(name, per_expert, d, f, a, dtype, amp, w, backward=False, batch=E)
        bwd += _linear(name, per_expert, d, f, a, dtype, amp, w, backward=True, fused_accumulation=fused, batch=E)
    hidden = n * k * f * a
    fwd += _activation(spec, hidden, "expert_")[0]
    bwd += _activation(spec, hidden, "expert_")[1]
    fwd += _linear("expert_down", per_expert, f, d, a, dtype, amp, w, backward=False, batch=E)
    bwd += _linear("expert_down", per_expert, f, d, a, dtype, amp, w, backward=True, fused_accumulation=fused, batch=E)
    fwd.append(ew("moe_combine", n * k * d * a + n * k * FP32 + n * d * a, count=2))
    bwd.append(ew("moe_combine_backward", 2 * n * k * d * a + n * d * a, count=2))
    if loop:
        mats = 3 if spec.gated_mlp else 2
        fwd.append(ew("moe_expert_loop", 0.0, count=E * (4 + mats) - mats))
        bwd.append(ew("moe_expert_loop_backward", 0.0, count=E * (4 + 2 * mats) - 2 * mats))
    if spec.shared_expert_d_ff:
        fs = spec.shared_expert_d_ff / tp
        names = ("shared_gate", "shared_up") if spec.gated_mlp else ("shared_up",)
        for name in names:
            fwd += _linear(name, n, d, fs, a, dtype, amp, w, backward=False)
            bwd += _linear(name, n, d, fs, a, dtype, amp, w, backward=True, fused_accumulation=fused)
        fwd += _activation(spec, n * fs * a, "shared_")[0]
        bwd += _activation(spec, n * fs * a, "shared_")[1]
        fwd += _linear("shared_down", n, fs, d, a, dtype, amp, w, backward=False)
        bwd += _linear("shared_down", n, fs, d, a, dtype, amp, w, backward=True, fused_accumulation=fused)
        if spec.shared_expert_gate:
            fwd += _linear("shared_expert_gate", n, d, 1, a, dtype, amp, w, backward=False)
            bwd += _linear("shared_expert_gate", n, d, 1, a, dtype, amp, w, backward=True, fused_accumulation=fused)
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


def layer_kernels(spec, *, batch_size: int, seq_len: int, precision: str = "amp-bf16", tp: int = 1, sp: bool = False,
                  cp: int = 1, flash: bool = True, causal: bool = True, framework: str = "trainledger",
                  dropout: bool | None = None, layer: int = 0) -> dict[str, list[Kernel]]:
    """{"forward": [...], "backward": [...]} kernels of transformer layer `layer` (0-based; a representative of one
    of spec.layer_groups(): MoE or dense MLP, sliding-window or global attention) for one micro-batch on one GPU."""
    if framework not in FRAMEWORKS:
        raise TrainledgerError(f"framework must be one of {', '.join(FRAMEWORKS)}, got {framework!r}")
    recipe = get_recipe(precision)
    a, r, w = recipe_bytes(recipe.name)
    amp = w > 0
    dtype = recipe.compute_dtype
    dropout = (framework == "megatron") if dropout is None else dropout
    n = batch_size * seq_len / cp                  # tokens of this rank (TP-replicated work)
    n_sp = n / tp if sp else n                     # tokens of the norms / residual stream on this rank
    d, dh = spec.d_model, spec.head_dim
    f = spec.dense_d_ff if (spec.is_moe and spec.dense_d_ff) else spec.d_ff      # a dense layer's MLP width
    h, kv = spec.n_heads / tp, spec.kv_heads / tp
    q_dim, kv_dim = h * dh, kv * dh
    mlp_mats = 3 if spec.gated_mlp else 2
    window = spec.sliding_window if spec.is_sliding(layer) else None
    core = _attention_core(spec, batch_size, seq_len, cp, tp, a, dtype, flash, causal, framework, dropout, window)
    moe = (_moe_mlp(spec, n, d, tp, a, dtype, amp, w, fused=framework == "megatron", loop=framework == "trainledger")
           if spec.is_moe_layer(layer) else None)
    if framework == "megatron":
        return _megatron(spec, n, n_sp, d, f / tp, q_dim, kv_dim, a, dtype, dropout, core, mlp_mats, moe)
    fwd, bwd = [], []
    norm_fwd, norm_bwd = _norm(spec, n_sp, d, r)
    # attention block
    fwd += norm_fwd
    for name, out_dim in (("q_proj", q_dim), ("k_proj", kv_dim), ("v_proj", kv_dim)):
        fwd += _linear(name, n, d, out_dim, a, dtype, amp, w, backward=False)
        bwd += _linear(name, n, d, out_dim, a, dtype, amp, w, backward=True)
    if spec.position == "rope":    # x·cos + rotate_half(x)·sin on q and k: 5 ops each, read + write each time
        rope_bytes = n * (q_dim + kv_dim) * a * 2
        fwd.append(ew("rope", 5 * rope_bytes, count=10))
        bwd.append(ew("rope_backward", 4 * rope_bytes, count=8))
    fwd += core["forward"]
    bwd += core["backward"]
    fwd += _linear("o_proj", n, q_dim, d, a, dtype, amp, w, backward=False)
    bwd += _linear("o_proj", n, q_dim, d, a, dtype, amp, w, backward=True)
    out_r = r                                           # the residual add: read both, write the sum
    fwd.append(ew("residual_attn", n_sp * d * (2 * out_r + a)))
    bwd.append(ew("qkv_input_grad_sum", n * d * FP32 * 3 * 2, count=2))     # three Linear input grads summed
    bwd += norm_bwd
    bwd.append(ew("residual_grad_add", n_sp * d * 3 * r))
    # MLP block
    fwd += norm_fwd
    if moe:
        fwd += moe[0]
        bwd += moe[1]
    else:
        ups = ("mlp_gate", "mlp_up") if spec.gated_mlp else ("mlp_up",)
        for name in ups:
            fwd += _linear(name, n, d, f / tp, a, dtype, amp, w, backward=False)
            bwd += _linear(name, n, d, f / tp, a, dtype, amp, w, backward=True)
        act = _activation(spec, n * f / tp * a)
        fwd += act[0]
        bwd += act[1]
        fwd += _linear("mlp_down", n, f / tp, d, a, dtype, amp, w, backward=False)
        bwd += _linear("mlp_down", n, f / tp, d, a, dtype, amp, w, backward=True)
    if spec.gated_mlp:
        bwd.append(ew("mlp_input_grad_sum", n * d * FP32 * 3))
    fwd.append(ew("residual_mlp", n_sp * d * (2 * out_r + a)))
    bwd += norm_bwd
    bwd.append(ew("residual_grad_add", n_sp * d * 3 * r))
    return {"forward": fwd, "backward": bwd}


def _norm(spec, n: float, d: int, r: int) -> tuple[list[Kernel], list[Kernel]]:
    """Forward and backward kernels of one norm over n tokens (LayerNorm: one fused op; RMSNorm: Hugging Face's six)."""
    x = n * d
    if spec.norm == "layernorm":
        return [ew("layernorm", 2 * x * r)], [ew("layernorm_backward", 3 * x * r + 2 * x * r, count=2)]
    # x.float(), pow, mean, rsqrt(+eps), x·rsqrt, .to(dtype), weight·normed
    fwd = x * (r + FP32) * (r != FP32) + 2 * x * FP32 + x * FP32 + 3 * x * FP32 + x * (FP32 + r) + 2 * x * r
    return [ew("rmsnorm", fwd, count=6)], [ew("rmsnorm_backward", 1.5 * fwd, count=8)]


def _attention_core(spec, b: int, s: int, cp: int, tp: int, a: int, dtype: str, flash: bool, causal: bool,
                    framework: str, dropout: bool, window: int | None = None) -> dict[str, list[Kernel]]:
    """The attention core (QKᵀ, softmax, A·V) of one micro-batch: a flash kernel, or the math path's T×T tensors.

    With context parallelism each rank holds s/cp queries against all s keys (K, V all-gathered: Llama 3
    Sec. 3.3.2). Executed FLOPs: 2 matmuls of 2·b·h·(s/cp)·s·dh forward; causal flash kernels skip half.
    A sliding window W < s: a fused kernel with a window (FlashAttention-2's window_size, Megatron) skips the
    blocks outside it, executing the fraction W/s − W²/(2s²) of the square; our torch model passes the window
    as an additive mask (as it does ALiBi's biases), which SDPA runs over the whole square (no causal skipping).
    Soft-capped logits (Gemma 2): our torch model takes the math path (three elementwise passes over the T×T
    scores, softmax in fp32) even with --flash; Megatron-style fused kernels cap inside the kernel
    (FlashAttention-2 ≥ 2.6), free.
    """
    h, kv, dh = spec.n_heads / tp, spec.kv_heads / tp, spec.head_dim
    q = s / cp
    full_flops = 2 * 2 * b * h * q * s * dh
    windowed = window is not None and window < s
    softcap = spec.attn_softcap is not None and framework == "trainledger"
    flash = flash and not softcap
    if flash:
        if framework == "trainledger" and (windowed or spec.position == "alibi"):
            executed = full_flops                  # an additive mask (window, ALiBi): SDPA runs the whole square
        elif windowed:
            executed = full_flops * (window / s - window**2 / (2 * s**2))
        else:
            executed = full_flops / 2 if causal else full_flops
        io = b * (q * h * dh * 2 + s * kv * dh * 2) * a + b * h * q * FP32     # q, o, k, v, logsumexp
        fwd = Kernel("flash_attention", "attention", "flash_attention", executed, io, (s, False, causal), dtype, 1,
                     "forward", True)
        bwd = Kernel("flash_attention_backward", "attention", "flash_attention",
                     2.5 * executed, 2.5 * io, (s, True, causal), dtype, 1, "dgrad", True)
        return {"forward": [fwd], "backward": [bwd]}
    heads = int(b * h)
    scores = heads * q * s                                  # elements of the T×T scores on this rank
    qk = gemm("scores_qk", q, s, dh, a, dtype, batch=heads, part="attention", core=True)
    av = gemm("probs_v", q, dh, s, a, dtype, batch=heads, part="attention", core=True)
    if framework == "megatron":   # one fused scale-mask-softmax kernel: read and write the scores
        fwd = [qk, ew("scale_mask_softmax", 2 * scores * a, part="attention", core=True)]
    else:                         # SDPA's math path: add the causal mask, then softmax
        fwd = [qk, ew("mask_softmax", 4 * scores * a, count=2, part="attention", core=True)]
    if softcap:   # scores / c, tanh, · c (Gemma 2), then the softmax in fp32 and a cast back
        fwd.append(ew("attention_softcap", 3 * 2 * scores * a + scores * (a + 2 * FP32 + FP32 + a), count=5,
                      part="attention", core=True))
    if dropout:
        fwd.append(ew("attention_dropout", scores * (2 * a + 1), part="attention", core=True))
    fwd += [av, ew("context_copy", 2 * b * q * h * dh * a, part="attention", core=True)]
    bwd = [gemm("probs_v_dgrad", q, s, dh, a, dtype, batch=heads, part="attention", role="dgrad", core=True),
           gemm("probs_v_wgrad", s, dh, q, a, dtype, batch=heads, part="attention", role="dgrad", core=True),
           ew("softmax_backward", scores * 3 * a, part="attention", core=True, role="dgrad"),
           gemm("scores_dgrad_q", q, dh, s, a, dtype, batch=heads, part="attention", role="dgrad", core=True),
           gemm("scores_dgrad_k", s, dh, q, a, dtype, batch=heads, part="attention", role="dgrad", core=True),
           ew("context_copy_backward", 2 * b * q * h * dh * a, part="attention", core=True, role="dgrad")]
    if softcap:   # the fp32 softmax's backward and tanh's (1 − t²) chain over the square
        bwd.append(ew("attention_softcap_backward", scores * (3 * FP32 + 3 * 3 * a), count=4, part="attention",
                      core=True, role="dgrad"))
    if dropout:
        bwd.append(ew("attention_dropout_backward", scores * (2 * a + 1), part="attention", core=True, role="dgrad"))
    return {"forward": fwd, "backward": bwd}


def _megatron(spec, n, n_sp, d, f, q_dim, kv_dim, a, dtype, dropout, core, mlp_mats, moe=None):
    """Megatron-LM's GPT layer (fused kernels; weight gradients accumulated into fp32 main_grad in the GEMM)."""
    fwd, bwd = [], []
    mask = 1 if dropout else 0
    ln = ([ew("layernorm", 2 * n_sp * d * a)], [ew("layernorm_backward", 5 * n_sp * d * a, count=2)])
    bda = ew("bias_dropout_add", n_sp * d * (3 * a + mask))
    bda_bwd = ew("bias_dropout_add_backward", n_sp * d * (2 * a + mask) + n_sp * d * a)   # + bias grad read
    qkv_out = q_dim + 2 * kv_dim
    for block in ("attention", "mlp"):
        fwd += ln[0]
        if block == "attention":
            fwd += _linear("qkv", n, d, qkv_out, a, dtype, False, 0, backward=False)
            fwd += core["forward"]
            fwd += _linear("proj", n, q_dim, d, a, dtype, False, 0, backward=False)
            bwd += _linear("proj", n, q_dim, d, a, dtype, False, 0, backward=True, fused_accumulation=True)
            bwd += core["backward"]
            bwd += _linear("qkv", n, d, qkv_out, a, dtype, False, 0, backward=True, fused_accumulation=True)
        elif moe:
            fwd += moe[0]
            bwd += moe[1]
        else:
            up = f * (mlp_mats - 1)
            fwd += _linear("fc1", n, d, up, a, dtype, False, 0, backward=False)
            fwd.append(ew("bias_gelu", n * up * 2 * a))
            fwd += _linear("fc2", n, f, d, a, dtype, False, 0, backward=False)
            bwd += _linear("fc2", n, f, d, a, dtype, False, 0, backward=True, fused_accumulation=True)
            bwd.append(ew("bias_gelu_backward", n * up * 3 * a))
            bwd += _linear("fc1", n, d, up, a, dtype, False, 0, backward=True, fused_accumulation=True)
        fwd.append(bda)
        bwd.append(bda_bwd)
        bwd += ln[1]
        bwd.append(ew("residual_grad_add", 3 * n_sp * d * a))
    return {"forward": fwd, "backward": bwd}


def edge_kernels(spec, *, batch_size: int, seq_len: int, precision: str = "amp-bf16", tp: int = 1, sp: bool = False,
                 cp: int = 1, framework: str = "trainledger") -> dict[str, list[Kernel]]:
    """Kernels outside the layers: {"embedding_forward", "embedding_backward", "head_forward", "head_backward"}.

    Embedding: a gather (+ learned positions); its backward writes the dense fp32 table gradient. Head: the
    final norm, the LM head GEMM (vocabulary-parallel over tp), the cross-entropy over fp32 logits (ours:
    F.cross_entropy on logits.float(); Megatron: vocab-parallel cross entropy, about six fp32 passes).
    """
    recipe = get_recipe(precision)
    a, r, w = recipe_bytes(recipe.name)
    amp = w > 0
    dtype = recipe.compute_dtype
    n = batch_size * seq_len / cp
    n_sp = n / tp if sp else n
    d, v = spec.d_model, spec.vocab_size / tp
    emb_fwd = [ew("embedding", n_sp * d * (r + a) + n_sp * 8, count=2 if spec.position == "learned" else 1)]
    emb_bwd = [ew("embedding_backward", v * d * FP32 * 2 + n_sp * d * (r + FP32), count=2)]
    norm_fwd, norm_bwd = _norm(spec, n_sp, d, r) if framework == "trainledger" else (
        [ew("final_layernorm", 2 * n_sp * d * a)], [ew("final_layernorm_backward", 5 * n_sp * d * a)])
    head_fwd = norm_fwd + _linear("lm_head", n, d, v, a, dtype, amp, w, backward=False)
    head_bwd = _linear("lm_head", n, d, v, a, dtype, amp, w, backward=True, fused_accumulation=framework == "megatron")
    logits = n * v
    if spec.final_softcap is not None:   # Gemma 2: logits / c, tanh, · c over the [tokens, vocab/tp] logits
        head_fwd.append(ew("final_softcap", 3 * 2 * logits * a, count=3))
        head_bwd.append(ew("final_softcap_backward", 3 * 3 * logits * a, count=3))
    if framework == "megatron":
        head_fwd.append(ew("vocab_parallel_cross_entropy", logits * (a + FP32 + 5 * FP32), count=6))
        head_bwd.insert(0, ew("cross_entropy_backward", logits * (3 * FP32 + a), count=3))
    else:
        head_fwd.append(ew("cross_entropy", logits * ((a + FP32) * (a != FP32) + 2 * FP32), count=3))
        head_bwd.insert(0, ew("cross_entropy_backward", logits * (FP32 + 3 * FP32 + (FP32 + a) * (a != FP32)), count=3))
    head_bwd += norm_bwd
    return {"embedding_forward": emb_fwd, "embedding_backward": emb_bwd, "head_forward": head_fwd,
            "head_backward": head_bwd}


def optimizer_kernels(n_params: float, n_tensors: int, precision: str = "amp-bf16", n_states: int = 2,
                      state_bytes: float = 4, clip: bool = True, framework: str = "trainledger",
                      optimizer: str | None = None) -> list[Kernel]:
    """The optimizer step over `n_params` parameters in `n_tensors` tensors, as memory traffic.

    `optimizer` named and implemented in trainledger.optim (framework "trainledger"): its foreach passes one by
    one (`FOREACH_PASSES`). Megatron's mixed-precision optimizer: `megatron_optimizer_kernels`. Otherwise (an
    optimizer we only account for, e.g. adafactor, adam-8bit) the least traffic: read the gradient and the
    weight (the fp32 master copy when there is one), read and write each state and the weight, write the
    16-bit model copy of a mixed-precision recipe, read the gradients once more for clipping.
    """
    recipe = get_recipe(precision)
    if framework == "megatron" and recipe.master_params_bytes_per_param:
        return megatron_optimizer_kernels(n_params, n_tensors, recipe, n_states, state_bytes)
    grad, master = recipe.grads_bytes_per_param, recipe.master_params_bytes_per_param
    weight = master if master else recipe.params_bytes_per_param
    if framework == "trainledger" and optimizer in FOREACH_PASSES:
        return foreach_optimizer_kernels(n_params, n_tensors, optimizer, grad, weight, state_bytes, clip,
                                         model_copy_bytes=recipe.params_bytes_per_param if master else 0)
    per_param = grad + 2 * weight + 2 * n_states * state_bytes + (recipe.params_bytes_per_param if master else 0)
    if clip:
        per_param += grad
    return [Kernel("optimizer_step", "optimizer", "elementwise", 0.0, n_params * per_param, (), "bf16",
                   max(1, int(n_tensors)) * (10 + n_states), "forward")]


# trainledger.optim's step counters (torch.optim's 0-dim "step" tensors), one add per tensor: launches, no bytes
STEP_COUNT = ("add_", "", "")
# The torch._foreach_* passes of trainledger.optim's default configurations, in order: (op, tensors read, tensors
# written) per parameter, each tensor a gradient "g", a weight "w" or a state "s" (an optimizer state, or a
# temporary of the state's dtype: Adam's denominator). A tensor read twice by one op (addcmul(v, g, g)) is read
# once. tests/account/test_time.py checks these against the aten ops our optimizers dispatch.
FOREACH_PASSES = {
    "sgd": (("add_", "wg", "w"),),                                                  # w ← w − lr·g
    "momentum": (("mul_", "s", "s"), ("add_", "sg", "s"), ("add_", "ws", "w")),      # b ← μb + g; w ← w − lr·b
    "adagrad": (STEP_COUNT, ("addcmul_", "sg", "s"), ("sqrt", "s", "s"), ("add_", "s", "s"),
                ("addcdiv_", "wgs", "w")),
    "rmsprop": (STEP_COUNT, ("mul_", "s", "s"), ("addcmul_", "sg", "s"), ("sqrt", "s", "s"), ("add_", "s", "s"),
                ("addcdiv_", "wgs", "w")),
    "rmsprop-centered": (STEP_COUNT, ("mul_", "s", "s"), ("addcmul_", "sg", "s"), ("lerp_", "sg", "s"),
                         ("addcmul", "ss", "s"), ("sqrt_", "s", "s"), ("add_", "s", "s"), ("addcdiv_", "wgs", "w")),
    "adam": (STEP_COUNT, ("lerp_", "sg", "s"), ("mul_", "s", "s"), ("addcmul_", "sg", "s"), ("sqrt", "s", "s"),
             ("div_", "s", "s"), ("add_", "s", "s"), ("addcdiv_", "wss", "w")),
    "adamw": (STEP_COUNT, ("mul_", "w", "w"), ("lerp_", "sg", "s"), ("mul_", "s", "s"), ("addcmul_", "sg", "s"),
              ("sqrt", "s", "s"), ("div_", "s", "s"), ("add_", "s", "s"), ("addcdiv_", "wss", "w")),
}
# trainledger.optim.clip_grad_norm_: one norm per gradient, then every gradient scaled by the clip factor
CLIP_PASSES = (("norm", "g", ""), ("mul_", "g", "g"))


def foreach_optimizer_kernels(n_params: float, n_tensors: int, optimizer: str, grad_bytes: float,
                              weight_bytes: float, state_bytes: float, clip: bool = True,
                              model_copy_bytes: float = 0.0) -> list[Kernel]:
    """trainledger.optim's `optimizer` step (+ clip_grad_norm_) pass by pass, as memory traffic.

    Each torch._foreach_* pass reads and writes its tensors for every parameter, one launch per tensor (a CPU
    runs foreach ops tensor by tensor; a GPU's multi-tensor kernels launch fewer, at no modelled cost). A pass
    sweeps every tensor before the next begins, so what it streams is the whole pass (`working_set_bytes`):
    nothing it touched is still cached when the next pass comes back to the same tensor, unless the whole
    pass fits. AdamW in fp32: 80 bytes per parameter (+ 12 for clipping), against the 32 a fused kernel needs.
    """
    size = {"g": grad_bytes, "w": weight_bytes, "s": state_bytes}
    launches = max(1, int(n_tensors))
    passes = (CLIP_PASSES if clip else ()) + FOREACH_PASSES[optimizer]
    out = []
    for i, (op, read, written) in enumerate(passes):
        per_param = sum(size[t] for t in read) + sum(size[t] for t in written)
        moved = n_params * per_param
        out.append(Kernel(f"optimizer_{i}_{op}", "optimizer", "elementwise", 0.0, moved, (), "bf16", launches,
                          "forward", working_set_bytes=moved))
    if model_copy_bytes:     # a master copy: the updated fp32 weights cast into the model's 16-bit ones
        moved = n_params * (weight_bytes + model_copy_bytes)
        out.append(Kernel("optimizer_copy_to_model", "optimizer", "elementwise", 0.0, moved, (), "bf16", launches,
                          "forward", working_set_bytes=moved))
    return out


def megatron_optimizer_kernels(n_params: float, n_tensors: int, recipe, n_states: int = 2,
                               state_bytes: float = 4) -> list[Kernel]:
    """Megatron-LM's mixed-precision optimizer step (Float16OptimizerWithFloat16Params, contiguous fp32 main_grad
    buffers, apex multi-tensor kernels), pass by pass, as memory traffic per parameter of this GPU's shard:

    - fp16 only: unscale the fp32 gradients by 1/loss-scale and check them for inf/NaN
      (torch._amp_foreach_non_finite_check_and_unscale_): read 4 + write 4 B; bf16 runs without a loss scaler;
    - gradient norm for clipping (multi_tensor_l2norm): read 4 B (the rescale runs only when the norm exceeds
      the clip value: not counted);
    - Adam (apex FusedAdam, multi_tensor_adam): read gradient, fp32 weight and the states, write weight and
      states: 4 + 2·4 + 2·n_states·state_bytes = 28 B for two fp32 states;
    - copy the fp32 main weights into the 16-bit model weights (_copy_main_params_to_model_params): 4 + 2 B;
    - zero the fp32 main_grad buffer for the next step: write 4 B.
    fp16: 8 + 4 + 28 + 6 + 4 = 50 B per parameter; bf16: 42 B. The main_grad → main_param.grad "copy" is an
    alias in fp32 (no traffic). Launches: a handful of multi-tensor kernels per ~chunk of tensors: counted as
    n_tensors/110 (apex's default of 110 tensors per launch list) per pass, at least 1.
    """
    master, model = recipe.master_params_bytes_per_param, recipe.params_bytes_per_param
    main_grad = FP32            # gradient_accumulation_fusion accumulates into an fp32 buffer
    launches = max(1, -(-int(n_tensors) // 110))
    passes = []
    if recipe.name == "mixed-fp16":
        passes.append(("unscale_check_inf", 2 * main_grad))
    passes += [("grad_norm", main_grad),
               ("adam", main_grad + 2 * master + 2 * n_states * state_bytes),
               ("copy_main_to_model", master + model),
               ("zero_main_grad", main_grad)]
    return [Kernel(f"optimizer_{name}", "optimizer", "elementwise", 0.0, n_params * per_param, (), "bf16", launches,
                   "forward") for name, per_param in passes]
