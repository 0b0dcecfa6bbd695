"""The kernels of one layer of our torch Transformer (models/) in eager PyTorch, forward and backward. Pure.

Op by op as models/ runs it, each op's forward kernels and the kernels autograd runs for its backward (PyTorch's
derivatives.yaml formulas), in execution order (the backward in reverse). Checked kernel by kernel against the
recorded H100 traces of GPT-2 and a Llama 3.2 1B-shaped model (tests/data/h100_2026_11_26; tests/account/
test_eager.py). Bytes are read + written per kernel; `a` is the matmul-input dtype's size, `r` the residual
stream's (fp32 under AMP: the embeddings and norms run in fp32), `amp`: torch.autocast is on (fp32 weights).

- Linear under autocast: a cast of its input (only when the input is fp32: after a norm, not after SDPA or the
  activation), of its weight and of its bias, then one GEMM (the bias fused: addmm). Backward: the input- and
  weight-gradient GEMMs, the bias gradient (a sum over tokens), the weight and bias gradients cast back to fp32
  (ToCopyBackward), and the input gradient cast back to fp32 when the input was cast. A tensor used by several
  ops (the norm output by q, k and v) gets its gradients summed by the autograd engine: one add per extra use.
- LayerNorm: one kernel forward, two backward (input gradient; weight and bias gradients). RMSNorm as Hugging
  Face Llama writes it: pow, mean, add, rsqrt, mul, mul forward (+ casts when the stream is 16-bit); backward
  each op's derivative: the weight's product (2 products and a sum over tokens), x·rsqrt's (2 products and a
  sum over the row), rsqrt's, mean's (an expand), pow's (a copy, 2 products) and the sum of x's two gradients.
- The residual add x + branch (fp32 + 16-bit under AMP); backward casts the gradient to the branch's dtype.
- RoPE (x·cos + rotate_half(x)·sin: mul, neg, cat, mul, add) and its backward (mul, mul, neg, cat, add).
- SDPA's flash kernel (account.time.kernels._attention_core) plus, for grouped-query attention, the expansion of k and
  v to every query head forward and the sum of their gradients backward (cuDNN's path in the traces).
Not modelled: cuBLASLt's workspace memsets (about one per GEMM, ~1 µs each on the GPU, a launch each on the CPU).
"""

from __future__ import annotations

from dataclasses import replace

from trainledger.account.time.roofline import Kernel
from trainledger.account.time.shard import Dtypes, Shard

FP32 = 4
# the frameworks whose kernels are eager PyTorch ops launched one by one (ours and torchtitan's Llama); "megatron"
# is Megatron-LM's fused kernels
EAGER_FRAMEWORKS = ("trainledger", "torchtitan")


def ew(name: str, moved_bytes: float, count: int = 1, part: str = "memory_bound", core: bool = False,
       role: str = "forward", access: str = "stream") -> Kernel:
    """`count` elementwise kernels that read and write `moved_bytes` in all (`access`: how they walk memory,
    specs/performance.py H100_ACCESS_FRACTIONS)."""
    return Kernel(name, part, "elementwise", 0.0, moved_bytes, (), "bf16", count, role, core, access=access)


def host(name: str, count: float, role: str = "forward") -> list[Kernel]:
    """`count` ops that launch nothing (views, transposes, no-op casts, autograd nodes handing a gradient on):
    CPU dispatch only (account.time.eager_step.host_op_seconds)."""
    return [Kernel(name, "overhead", "host", 0.0, 0.0, (), "bf16", count, role)] if count else []


def gemm(name: str, m: float, n: float, k: float, a: int, dtype: str, *, batch: int = 1,
         role: str = "forward") -> Kernel:
    """A (batched) GEMM C[m,n] = A[m,k]·B[k,n]: 2·m·n·k FLOPs per batch, reads A and B, writes C (a bytes each).
    A kernel of another part (the attention core) or an unaligned one: dataclasses.replace the result."""
    return _gemm(name, (m, n, k), a, a, dtype, batch, role)


def main_grad_gemm(name: str, m: float, n: float, k: float, a: int, dtype: str, *, batch: int = 1) -> Kernel:
    """A weight-gradient GEMM that accumulates into an fp32 main_grad buffer inside the GEMM (Megatron-LM's
    gradient_accumulation_fusion): reads and writes its fp32 output, 2 × 4 bytes per element."""
    return _gemm(name, (m, n, k), a, FP32 * 2, dtype, batch, "wgrad")


def _gemm(name: str, mnk: tuple, a: int, out: float, dtype: str, batch: int, role: str) -> Kernel:
    """The GEMM of `gemm` with `out` bytes per element of C (read and written when it accumulates)."""
    m, n, k = mnk
    moved = batch * ((m * k + k * n) * a + m * n * out)
    shape = tuple(max(1, round(x)) for x in (m, n, k))    # a mean expert load may be fractional: tiles need sizes
    return Kernel(name, "compute", "gemm", 2.0 * batch * m * n * k, moved, (*shape, batch), dtype, 1, role)


def unaligned(dtype_bytes: int, *dims: float) -> bool:
    """Whether a GEMM over these feature dimensions has a leading dimension that is not a multiple of 16 bytes
    (cuBLAS then leaves the Hopper tensor-core kernels: specs/performance.py). Token counts are never leading
    dimensions of the row-major GEMMs of a Linear (forward, input and weight gradients)."""
    per16 = max(1, 16 // dtype_bytes)
    return any(d != int(d) or int(d) % per16 for d in dims)      # an uneven tensor-parallel shard is ragged too


def linear_kernels(name: str, n: float, fan_in: float, fan_out: float, dt: Dtypes, backward: bool,
                   fused_accumulation: bool = False, batch: int = 1) -> list[Kernel]:
    """A Linear over n tokens: forward GEMM, or backward dgrad + wgrad GEMMs (+ the gradient bookkeeping), in the
    element sizes `dt` (autocast's casts when dt.amp). `batch` > 1: that many Linears of the same shape (experts),
    each over n tokens, as one batched GEMM. `fused_accumulation`: the weight gradient accumulated into fp32
    main_grad inside its GEMM (`main_grad_gemm`)."""
    a, dtype = dt.a, dt.dtype
    if not backward:
        out = [gemm(name, n, fan_out, fan_in, a, dtype, batch=batch)]
        if dt.amp:   # autocast casts the input and (once per forward) the fp32 weight to 16 bit
            out.append(ew(f"{name}_cast", batch * (n * fan_in * (FP32 + a) + fan_in * fan_out * (FP32 + a)), count=2))
        return out
    wgrad = (main_grad_gemm(f"{name}_wgrad", fan_out, fan_in, n, a, dtype, batch=batch) if fused_accumulation
             else gemm(f"{name}_wgrad", fan_out, fan_in, n, a, dtype, batch=batch, role="wgrad"))
    grads = [gemm(f"{name}_dgrad", n, fan_in, fan_out, a, dtype, batch=batch, role="dgrad"), wgrad]
    if dt.amp:    # the 16-bit weight gradient is cast to fp32 and accumulated into .grad
        grads.append(ew(f"{name}_grad_accumulate", batch * fan_in * fan_out * (a + 3 * FP32), count=2, role="wgrad"))
    return grads


def linear(name: str, n: float, fan_in: float, fan_out: float, dt: Dtypes, *, bias: bool = False,
           input_fp32: bool = False, batch: int = 1) -> tuple[list[Kernel], list[Kernel]]:
    """(forward, backward) kernels of nn.Linear over n tokens in eager PyTorch (module docstring), in the element
    sizes `dt` (autocast when dt.amp). `batch` > 1: that many Linears of one shape (experts), as one batched GEMM."""
    a, dtype, amp = dt.a, dt.dtype, dt.amp
    odd = unaligned(a, fan_in, fan_out)
    cast_in = amp and input_fp32
    fwd = []
    if cast_in:
        fwd.append(ew(f"{name}_input_cast", batch * n * fan_in * (FP32 + a)))
    if amp:
        weights = fan_in * fan_out + (fan_out if bias else 0)
        fwd.append(ew(f"{name}_weight_cast", batch * weights * (FP32 + a), count=1 + bias))
    fwd.append(replace(gemm(name, n, fan_out, fan_in, a, dtype, batch=batch), unaligned=odd))
    bwd = [replace(gemm(f"{name}_dgrad", n, fan_in, fan_out, a, dtype, batch=batch, role="dgrad"), unaligned=odd),
           replace(gemm(f"{name}_wgrad", fan_out, fan_in, n, a, dtype, batch=batch, role="wgrad"), unaligned=odd)]
    if bias:      # grad_bias = grad_out summed over the tokens (a reduction kernel)
        bwd.append(ew(f"{name}_bias_grad", batch * (n * fan_out * a + fan_out * FP32), role="wgrad",
                      access="column_reduction"))
    if amp:       # the 16-bit weight (and bias) gradients cast back to the fp32 parameters' dtype
        weights = fan_in * fan_out + (fan_out if bias else 0)
        bwd.append(ew(f"{name}_weight_grad_cast", batch * weights * (a + FP32), count=1 + bias, role="wgrad"))
    if cast_in:
        bwd.append(ew(f"{name}_input_grad_cast", batch * n * fan_in * (a + FP32), role="dgrad"))
    # autograd nodes that launch nothing: the weight's transpose, the input/output views, AccumulateGrad per param
    bwd += host(f"{name}_backward_views", 3 + 1 + bias, "dgrad")
    return fwd, bwd


def grad_sum(name: str, elements: float, dtype_bytes: int, uses: int) -> list[Kernel]:
    """The autograd engine summing the gradients of a tensor used by `uses` ops: uses − 1 adds (read 2, write 1)."""
    return [ew(name, (uses - 1) * elements * 3 * dtype_bytes, count=uses - 1, role="dgrad")] if uses > 1 else []


def norm(spec, n: float, d: float, r: int, out_bytes: int | None = None, name: str = "norm"
         ) -> tuple[list[Kernel], list[Kernel]]:
    """(forward, backward) kernels of one norm over n rows of d (LayerNorm; Hugging Face's RMSNorm; Gemma's)."""
    x = n * d
    params = 2 if spec.norm_bias else 1          # AccumulateGrad of the weight (and bias): no kernel
    if spec.norm == "layernorm":     # one fused kernel each way (+ the weight/bias reduction backward)
        out = r if out_bytes is None else out_bytes
        return ([ew(f"{name}_layernorm", x * (r + out))],
                [ew(f"{name}_layernorm_backward", x * (out + r + r), role="dgrad"),
                 ew(f"{name}_layernorm_weight_grad", x * (out + r), role="wgrad", access="column_reduction")]
                + host(f"{name}_norm_grad_handover", params, "wgrad"))
    up = x * (r + FP32) if r != FP32 else 0.0         # x.to(float32), a no-op for an fp32 stream
    down = x * (FP32 + r) if r != FP32 else 0.0       # normed.to(input dtype)
    casts = (r != FP32)
    # pow (8), mean (4), add + rsqrt over the n row statistics; x·rsqrt (8) and weight·normed (2r) broadcast
    stats = n * FP32 * 4
    forward = [ew(f"{name}_rmsnorm", up + 8 * x + 4 * x + stats + down, count=4 + 2 * casts),
               ew(f"{name}_rmsnorm_scale", 8 * x + 2 * r * x, count=2, access="broadcast")]
    # backward: weight·normed's (g·w 2r broadcast, g·normed 3r, sum over tokens r), the cast (r+4), x·rsqrt's
    # (g·rs 8 broadcast, g·x 12, row sum 4), rsqrt and add (n), mean's (expand: 4, broadcast), pow's (copy 8,
    # ·2 8, ·g 12), x's two gradients summed (12)
    backward = [ew(f"{name}_rmsnorm_backward", 3 * r * x + down + 16 * x + stats + 28 * x + 12 * x + up,
                   count=10 + 2 * casts, role="dgrad"),
                ew(f"{name}_rmsnorm_backward_scale", 2 * r * x + 8 * x + 4 * x, count=3, role="dgrad",
                   access="broadcast"),
                ew(f"{name}_rmsnorm_weight_grad", r * x, role="wgrad", access="column_reduction")]
    return (forward + host(f"{name}_noop_casts", 2 * (not casts)),
            backward + host(f"{name}_norm_grad_handover", params + 1, "wgrad"))      # + the eps add's backward


def rope(n: float, width: float, rotary: float, a: int) -> tuple[list[Kernel], list[Kernel]]:
    """x·cos + rotate_half(x)·sin over `rotary` of each `width` (q or k: n tokens × heads × head_dim). Forward: mul
    (2a), neg (a: half read, half written), cat (2a), mul (2a), add (3a) = 10a per rotated element; backward the
    same amounts (mul, mul, neg, cat of the halves' gradients, the sum of x's two gradients), then the gradient
    made contiguous again for the (b, t, h·d) view of the Linear's output (2a). q and k are permuted (b, h, t, d)
    views of the Linears' outputs: every one of these kernels walks strided memory. A partial rotary slices and
    concatenates the passed-through dims back (2a per element of the head)."""
    rot = n * rotary
    extra = 2 * a * n * width if rotary < width else 0.0
    count = 5 + (rotary < width)
    return ([ew("rope", 10 * a * rot + extra, count=count, access="strided")] + host("rope_chunk", 1),
            [ew("rope_backward", 10 * a * rot + extra + 2 * a * n * width, count=count + 1, role="dgrad",
                access="strided")] + host("rope_backward_nodes", 2, "dgrad"))


def residual(n: float, d: float, r: int, a: int) -> tuple[list[Kernel], list[Kernel]]:
    """x + branch (x in the stream's dtype r, the branch in a); backward casts the gradient to the branch's dtype."""
    bwd = [ew("residual_grad_cast", n * d * (r + a), role="dgrad")] if r != a else host("residual_add_backward", 1, "dgrad")
    return [ew("residual_add", n * d * (2 * r + a))], bwd


def sequence_parallel_copies(n: float, d: float, a: int) -> tuple[tuple[list, list], tuple[list, list]]:
    """The copies DTensor's sequence parallelism adds around one sublayer whose input is gathered from and whose
    output is reduce-scattered to Shard(1), the sequence dimension of a (batch, seq, d) stream: functional
    collectives gather and scatter along dim 0, so `all_gather_tensor(gather_dim=1)` ends with
    `torch.cat(torch.chunk(res, group_size, dim=0), dim=gather_dim)` and `reduce_scatter_tensor(scatter_dim=1)`
    starts with `torch.cat(torch.chunk(self, group_size, dim=scatter_dim))` (torch/distributed/
    _functional_collectives.py): one copy of the gathered n × d tensor each, and each again in backward, where
    the gradients go the other way ("extra aten.cat after each collective", pytorch/torchtitan#437: 0.18 of 3 ms
    of an 8k-token FFN on H100). Returns ((gather's forward, its backward), (scatter's forward, its backward))."""
    moved = 2 * n * d * a
    return (([ew("sp_gather_cat", moved)], [ew("sp_scatter_cat_backward", moved, role="dgrad")]),
            ([ew("sp_scatter_cat", moved)], [ew("sp_gather_cat_backward", moved, role="dgrad")]))


def activation(spec, hidden: float, a: int, prefix: str = "") -> tuple[list[Kernel], list[Kernel]]:
    """The MLP activation over `hidden` elements: act(gate)·up (2 kernels, 10 B per element at 2 B; backward: two
    products and act's derivative, 18 B) or GELU (read + write; backward reads x and the gradient)."""
    if spec.gated_mlp:
        return ([ew(f"{prefix}act_mul", 5 * a * hidden, count=2)],
                [ew(f"{prefix}act_mul_backward", 9 * a * hidden, count=3, role="dgrad")])
    return [ew(f"{prefix}gelu", 2 * a * hidden)], [ew(f"{prefix}gelu_backward", 3 * a * hidden, role="dgrad")]


def head_widths(spec, tp: int) -> tuple[float, float]:
    """(q, k/v) output widths of one tensor-parallel rank's attention projections: heads / tp × head_dim."""
    h, kv = spec.n_heads / tp, spec.kv_heads / tp
    return h * spec.head_dim, kv * spec.head_dim


def norm_output_bytes(dt: Dtypes) -> int:
    """Bytes per element of a norm's output: fp32 under autocast (norms run in fp32 and feed a Linear), else r."""
    return FP32 if dt.amp else dt.r


def layer(spec, shard: Shard, core: dict, *, moe=None, rope_kernels=None, attention=None) -> dict[str, list[Kernel]]:
    """{"forward", "backward"} kernels of one layer of our Transformer for one micro-batch `shard` on one GPU (tp
    shards heads and d_ff; with sequence parallelism DTensor's copies around each gather and scatter). `core`: the
    attention core's kernels (account.time.kernels._attention_core); `moe`: (forward, backward) of a MoE MLP in
    place of the dense one. `rope_kernels(n, width, rotary, a)`: another model's RoPE (torchtitan's:
    account/time/torchtitan.py); None: ours (`rope`). `attention`: (forward, backward) pairs replacing q, k, v,
    RoPE, the core and o (multi-head latent attention: account/time/mla.py eager_mla)."""
    rope_kernels = rope_kernels or rope
    n, n_sp, tp, dt = shard.tokens, shard.stream_tokens, shard.tp, shard.dtypes
    a, r = dt.a, dt.r
    sp_gather, sp_scatter = sequence_parallel_copies(n, spec.d_model, a) if n_sp < n else (([], []), ([], []))
    d = spec.d_model
    f = (spec.dense_d_ff if (spec.is_moe and spec.dense_d_ff) else spec.d_ff) / tp
    norm_out = norm_output_bytes(dt)           # autocast runs norms in fp32: their output (a Linear input) is fp32
    ops = []                                   # (forward kernels, backward kernels) in execution order

    def add(pair):
        ops.append(pair)

    # attention block. A gradient sum runs after the backward of every use of its tensor: in this forward-ordered
    # list it stands before the tensor's first use (the backward runs the list in reverse).
    parallel = spec.parallel_residual
    add(([], grad_sum("residual_grad_add", n_sp * d, r, 3 if parallel else 2)))   # x: norm(s) and the residual
    add(norm(spec, n_sp, d, r, norm_out, "attn"))
    add(sp_gather)
    if attention:         # multi-head latent attention (account/time/mla.py) in place of q, k, v, rope, core, o
        ops.extend(attention)
    else:
        _attention(spec, add, shard, core, rope_kernels)
    add(sp_scatter)
    if spec.sandwich_norm:
        add(norm(spec, n_sp, d, a, a, "attn_out"))
    if not parallel:
        add(residual(n_sp, d, r, a))
        add(([], grad_sum("residual_grad_add", n_sp * d, r, 2)))          # the new x: MLP norm and residual
    # MLP block
    add(norm(spec, n_sp, d, r, norm_out, "mlp"))
    add(sp_gather)
    ups = ("mlp_gate", "mlp_up") if spec.gated_mlp else ("mlp_up",)
    if moe:
        add(moe)
    else:
        add(([], grad_sum("mlp_input_grad_sum", n * d, norm_out, len(ups))))
        for name in ups:
            add(linear(name, n, d, f, dt, bias=spec.mlp_bias, input_fp32=norm_out == FP32))
        add(activation(spec, n * f, a))
        add(linear("mlp_down", n, f, d, dt, bias=spec.mlp_bias))
    add(sp_scatter)
    if spec.sandwich_norm:
        add(norm(spec, n_sp, d, a, a, "mlp_out"))
    add(residual(n_sp, d, r, a))
    if parallel:                               # x + attn + mlp: two adds
        add(residual(n_sp, d, r, a))
    forward = [k for fwd, _ in ops for k in fwd]
    backward = [k for _, bwd in reversed(ops) for k in bwd]
    return {"forward": forward, "backward": backward}


def _attention(spec, add, shard: Shard, core: dict, rope_kernels) -> None:
    """The attention block's ops after the input norm (q, k, v, their norms and RoPE, the core, o), added in order."""
    n, dt = shard.tokens, shard.dtypes
    a, d, dh = dt.a, spec.d_model, spec.head_dim
    q_dim, kv_dim = head_widths(spec, shard.tp)
    norm_out = norm_output_bytes(dt)
    add(([], grad_sum("qkv_input_grad_sum", n * d, norm_out, 3)))
    for name, out_dim in (("q_proj", q_dim), ("k_proj", kv_dim), ("v_proj", kv_dim)):
        add(linear(name, n, d, out_dim, dt, bias=spec.qkv_bias, input_fp32=norm_out == FP32))
    if spec.clip_qkv is not None:
        add(([ew("clip_qkv", 2 * a * n * (q_dim + 2 * kv_dim), count=3)],
             [ew("clip_qkv_backward", 3 * a * n * (q_dim + 2 * kv_dim), count=3, role="dgrad")]))
    if spec.qk_norm:
        for name, width in (("q", q_dim), ("k", kv_dim)):
            add(norm(spec, n * width / dh, dh, a, a, f"{name}_norm"))
    if spec.position == "rope":
        for width in (q_dim, kv_dim):
            add(rope_kernels(n, width, width / dh * spec.rotary_dim, a))
    # q, k, v to (b, h, t, d) and the output back: a reshape and a permute each way (views), and their backward nodes
    add((host("head_rearranges", 8) + core["forward"], core["backward"] + host("head_rearranges_backward", 8, "dgrad")))
    add(linear("o_proj", n, q_dim, d, dt, bias=spec.attn_out_bias))
