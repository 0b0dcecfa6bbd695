"""The kernels of one layer of our Transformer under torch.compile (TorchInductor, default mode). Pure.

What Inductor does to a training step, from PyTorch's documentation and source (torch/_inductor), applied to the
structure of account/time/eager.py, nothing fitted:
- GEMMs and SDPA stay library kernels (cuBLAS, cuDNN/flash: "extern" kernels), the same FLOPs at the same rates;
  except that shape padding (torch/_inductor/fx_passes/pad_mm.py, on by default: config.shape_padding) pads a
  16-bit GEMM dimension to a multiple of 8 when that is faster, so GPT-2's 50,257-token LM head leaves cuBLAS's
  unaligned fallback.
- Every chain of pointwise ops and reductions between two library kernels becomes one generated kernel that
  reads the chain's inputs once and writes its outputs once (Inductor's scheduler fuses producers into
  consumers; AOTAutograd traces forward and backward together and its min-cut partitioner recomputes cheap
  pointwise ops in the backward rather than saving them). Per layer, forward: the residual add + norm + cast to
  16 bit, RoPE on q and k, the residual add + norm + cast before the MLP, the activation; backward: the cast of
  the incoming gradient, the activation's backward, each norm's backward fused with the 16-bit input gradients'
  cast and sum and the residual gradient (+ its weight-gradient reduction), RoPE's backward. The fp32 loss reads
  the 16-bit logits twice (max, sum of exponentials) and its backward recomputes the softmax: 4 + 4 bytes per
  logit instead of 18 + 26.
- Casts of fp32 weights to 16 bit and of their 16-bit gradients back stay one kernel per tensor (parameters are
  graph inputs and outputs: nothing to fuse with); bias gradients stay reductions.
- Launches come from Inductor's generated Python wrapper: no dispatcher or autograd per op, and views and
  transposes cost nothing (GPUSpec.launch_seconds per kernel, against op_overhead_seconds per eager op). The
  default mode does not use CUDA graphs ("reduce-overhead" does), so every kernel is still launched from the CPU.
- The optimizer is not compiled (`train --compile` compiles the model): it runs as in eager mode.
Not modelled: Inductor's own kernel efficiencies (generated kernels are taken to stream at the device's
bandwidth), padding copies, recompilation, guards (microseconds per call), max-autotune's GEMM templates.
"""

from __future__ import annotations

from dataclasses import replace

from trainledger.account.time.eager import FP32, ew, head_widths, linear, sequence_parallel_copies
from trainledger.account.time.roofline import Kernel
from trainledger.account.time.shard import Dtypes, Shard


def _unpadded(kernels: list[Kernel]) -> list[Kernel]:
    """The library kernels of a list with Inductor's shape padding applied (aligned GEMMs), casts aside."""
    return [replace(k, unaligned=False) for k in kernels if k.kind not in ("elementwise", "host")]


def _gemms(name, n, fan_in, fan_out, dt: Dtypes, bias) -> tuple[list[Kernel], list[Kernel]]:
    """A Linear's GEMMs (padded: aligned), weight casts and weight-gradient casts and bias reduction (its input
    casts fuse into the kernel that produces the input)."""
    fwd, bwd = linear(name, n, fan_in, fan_out, dt, bias=bias)
    keep = ("_weight_cast", "_weight_grad_cast", "_bias_grad")
    pick = lambda ks: [replace(k, unaligned=False) for k in ks if k.kind == "gemm" or k.name.endswith(keep)]  # noqa: E731
    return pick(fwd), pick(bwd)


def layer(spec, shard: Shard, core: dict, *, moe=None, rope_kernels=None) -> dict[str, list[Kernel]]:
    """{"forward", "backward"} kernels of one compiled layer for one micro-batch `shard` on one GPU (module
    docstring; `core` and `moe` as account/time/eager.py's layer). With sequence parallelism the functional
    collectives' copies stay (account/time/eager.py sequence_parallel_copies); `rope_kernels(n, width, rotary,
    a)`: a RoPE Inductor does not fuse (torchtitan's complex one, account/time/torchtitan.py), its kernels as in
    eager mode; None: ours, fused."""
    n, n_sp, tp, dt = shard.tokens, shard.stream_tokens, shard.tp, shard.dtypes
    a, r = dt.a, dt.r
    sp_gather, sp_scatter = sequence_parallel_copies(n, spec.d_model, a) if n_sp < n else (([], []), ([], []))
    d, dh = spec.d_model, spec.head_dim
    q_dim, kv_dim = head_widths(spec, tp)
    f = (spec.dense_d_ff if (spec.is_moe and spec.dense_d_ff) else spec.d_ff) / tp
    x = n_sp * d
    stats = n_sp * FP32 * 2
    norm_wgrad = x * 2 * r                      # the norm weight's gradient: a reduction over the tokens
    fwd, bwd = [], []

    def add(pair):
        fwd.extend(pair[0])
        bwd[:0] = pair[1]                       # backward runs in reverse

    # (previous residual add +) norm + cast: reads x and the branch, writes the new x and the 16-bit input.
    # Backward: reads the input gradients of the Linears it feeds, x and the residual gradient, writes x's gradient
    # and its 16-bit copy for the branch below (the residual's backward cast, fused in)
    add(([ew("fused_residual_norm", 2 * x * (r + a) + stats)],
         [ew("fused_norm_backward", x * (3 * a + 3 * r + a) + stats, role="dgrad"),
          ew("fused_norm_weight_grad", norm_wgrad, role="wgrad")]))
    add(sp_gather)
    for name, out_dim in (("q_proj", q_dim), ("k_proj", kv_dim), ("v_proj", kv_dim)):
        add(_gemms(name, n, d, out_dim, dt, spec.qkv_bias))
    if spec.position == "rope" and rope_kernels is not None:
        for width in (q_dim, kv_dim):
            add(rope_kernels(n, width, width / dh * spec.rotary_dim, a))
    elif spec.position == "rope" or spec.qk_norm:
        moved = 2 * a * n * (q_dim + kv_dim)
        add(([ew("fused_rope", moved, count=2)], [ew("fused_rope_backward", moved, count=2, role="dgrad")]))
    add((core["forward"], core["backward"]))
    add(_gemms("o_proj", n, q_dim, d, dt, spec.attn_out_bias))
    add(sp_scatter)
    add(([ew("fused_residual_norm", 2 * x * (r + a) + stats)],
         [ew("fused_norm_backward", x * ((2 if spec.gated_mlp else 1) * a + 3 * r + a) + stats, role="dgrad"),
          ew("fused_norm_weight_grad", norm_wgrad, role="wgrad")]))
    add(sp_gather)
    if moe:
        add(moe)
    else:
        for name in (("mlp_gate", "mlp_up") if spec.gated_mlp else ("mlp_up",)):
            add(_gemms(name, n, d, f, dt, spec.mlp_bias))
        hidden = n * f
        add(([ew("fused_activation", (3 if spec.gated_mlp else 2) * a * hidden)],
             [ew("fused_activation_backward", (5 if spec.gated_mlp else 3) * a * hidden, role="dgrad")]))
        add(_gemms("mlp_down", n, f, d, dt, spec.mlp_bias))
    add(sp_scatter)
    return {"forward": fwd, "backward": bwd}


def edges(spec, eager_edges: dict, shard: Shard) -> dict:
    """The compiled embedding and head of micro-batch `shard` from its eager kernels `eager_edges`
    (account.time.kernels.edge_kernels): the eager library kernels (GEMMs padded), one fused kernel for the
    embedding (+ positions), the final norm and cast, and the loss each way (module docstring)."""
    n, n_sp, dt = shard.tokens, shard.stream_tokens, shard.dtypes
    a, r = dt.a, dt.r
    d, v = spec.d_model, spec.vocab_size / shard.tp
    logits = n * v
    out = {}
    for name, kernels in eager_edges.items():
        lib = _unpadded([k for k in kernels if k.kind not in ("host",)])
        casts = [k for k in kernels if k.name.endswith(("_weight_cast", "_weight_grad_cast"))]
        out[name] = casts + lib
    out["embedding_forward"] = [ew("fused_embedding", n_sp * d * (2 * r) + n_sp * 8)]
    out["embedding_backward"] = [k for k in eager_edges["embedding_backward"] if k.kind == "elementwise"]
    x = n_sp * d
    out["head_forward"] = ([ew("fused_residual_norm", 2 * x * (r + a))] + out["head_forward"]
                           + [ew("fused_cross_entropy", logits * 2 * a + n * 16)])
    out["head_backward"] = ([ew("fused_cross_entropy_backward", logits * 2 * a)] + out["head_backward"]
                            + [ew("fused_norm_backward", x * (a + 3 * r + a)), ew("fused_norm_weight_grad", x * 2 * r)])
    return out
