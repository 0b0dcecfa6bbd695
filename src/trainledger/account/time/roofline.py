"""Seconds of one kernel on one device: GEMMs on a shape-dependent roofline, flash attention, memory-bound ops. Pure.

A kernel runs no faster than its FLOPs at the achieved matmul rate nor than its bytes at the achieved memory
bandwidth (roofline: Williams, Waterman & Patterson 2009):

    seconds = max(flops / (peak · efficiency), bytes / (bandwidth · memory_bandwidth_fraction)) + op_overhead

- GEMM efficiency = a measured fraction (GPUSpec.gemm_efficiency, e.g. the maximum achievable matmul FLOP/s of
  the A100 at its best shape) × the wave-quantization utilisation of this shape. A GPU runs C = A·B in output
  tiles, one tile per SM at a time (NVIDIA, "Matrix Multiplication Background User's Guide", Sec. 3: tile and
  wave quantization); a shape whose tiles do not fill the last wave leaves SMs idle:
      utilisation = batch·m·n·split / (waves · SMs · tile_m · tile_n),  waves = ceil(tiles · split / SMs)
  over cuBLAS's largest tensor-core tiles 256×128, 128×256 and 128×128 (same guide, Sec. 2.3), and split-K
  factors 2, 4, 8 for outputs with fewer tiles than SMs and a long reduction (k/split ≥ 512; the partial
  sums cost fp32 memory traffic); the best is taken (ties: less split), as cuBLAS's
  heuristics pick a kernel per shape. Assumption: these tiles run at the same rate per SM. The measured
  point's own utilisation is divided out, so the best-case measurement is the ceiling. Devices without an SM
  count (a calibrated CPU) interpolate their measured table instead (inverse-distance weights in log2(m, n, k)).
- Flash attention: its FLOPs as executed (the causal kernel skips half the T×T square; the backward runs 2.5×
  the forward's matmul FLOPs, recomputing QKᵀ: FlashAttention-2 paper, Sec. 4.1) at the measured kernel rate
  for the sequence length (GPUSpec.attention_efficiency, interpolated in log2(T)).
- Memory-bound kernels (norms, activations, softmax, casts, residual adds, the loss): bytes read + written over
  the achieved memory bandwidth.
Not modelled: L2-cache reuse between kernels, clock throttling. SMs taken by a concurrent NCCL kernel: `sms`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

TILES = ((256, 128), (128, 256), (128, 128))
SPLIT_K = (1, 2, 4, 8)
MIN_SPLIT_K_CHUNK = 512
FLASH_BACKWARD_FLOPS_RATIO = 2.5   # FlashAttention-2 paper Sec. 4.1: backward = 2.5 × forward matmul FLOPs


@dataclass(frozen=True)
class Kernel:
    """One kernel (or a group of identical ones) of a training step on one GPU.

    part: the breakdown it belongs to ("compute" for weight GEMMs, "attention" for the attention core,
    "memory_bound" for everything elementwise); kind: "gemm", "flash_attention", "elementwise" or "host" (an op
    that launches no kernel: views, transposes, autograd bookkeeping; it costs CPU time only);
    flops executed and bytes read + written by all `count` launches together; shape: (m, n, k, batch) for a
    GEMM, (seq_len, backward, causal) for flash attention; dtype: the peak key of its matmuls; role: "forward",
    "dgrad" or "wgrad" (what a communication may hide behind); core: part of the attention core (what selective
    recomputation re-runs).
    """

    name: str
    part: str
    kind: str
    flops: float = 0.0
    bytes: float = 0.0
    shape: tuple = ()
    dtype: str = "bf16"
    count: int = 1
    role: str = "forward"
    core: bool = False
    working_set_bytes: float = 0.0   # bytes streamed before the data is touched again (0: one launch's bytes)
    unaligned: bool = False          # a GEMM whose leading dimensions are not multiples of 16 bytes (cuBLAS fallback)
    access: str = "stream"           # how an elementwise kernel walks memory: stream, broadcast, strided, column_reduction
    loop: int = 0                    # eager Python loop: the launches spread over `loop` iterations, each begun by a
                                     # host synchronization (account/time/timeline.py Synced; our MoE's experts)


@lru_cache(maxsize=1 << 16)
def wave_utilization(m: int, n: int, k: int, sm_count: int, batch: int = 1) -> tuple[float, int]:
    """(utilisation in (0, 1], split-K factor) of the best tile and split for an m×n output on `sm_count` SMs."""
    best = (0.0, 1)
    for tm, tn in TILES:
        tiles = batch * math.ceil(m / tm) * math.ceil(n / tn)
        for split in SPLIT_K:
            if split > 1 and (k / split < MIN_SPLIT_K_CHUNK or tiles >= sm_count):
                break             # split-K only for outputs too small to fill one wave (cuBLAS's use of it)
            waves = math.ceil(tiles * split / sm_count)
            util = batch * m * n * split / (waves * sm_count * tm * tn)
            util = min(util, 1.0)
            if util > best[0] + 1e-12 or (util > best[0] - 1e-12 and split < best[1]):   # ties: less split-K
                best = (util, split)
    return best


def _idw(points, coords, value_of) -> float:
    """Inverse-distance-weighted mean (power 2) of value_of(point) over `points`, distances in log2 space."""
    total = weight_sum = 0.0
    for point in points:
        distance2 = sum((math.log2(a) - math.log2(b)) ** 2 for a, b in zip(coords, point))
        if distance2 < 1e-12:
            return value_of(point)
        w = 1.0 / distance2
        total += w * value_of(point)
        weight_sum += w
    return total / weight_sum


def gemm_efficiency(gpu, m: int, n: int, k: int, dtype: str, batch: int = 1, sms: int | None = None) -> dict:
    """Achieved fraction of `gpu`'s dense `dtype` peak for a (batched) m×k·k×n GEMM, with how it was obtained.

    `sms`: run on only this many of the GPU's SMs (the others held by a concurrent NCCL kernel): the tiles are
    wave-quantized on `sms` and the ceiling scales by sms / sm_count (the same rate per SM).

    Returns {"efficiency", "measured" (the table's fraction at this shape, 1.0 without a table), "utilization"
    (wave quantization, 1.0 without an SM count), "split_k", "source"}.
    """
    table = gpu.gemm_table(dtype)
    waves = table is None or table.full_waves
    free = sms if (sms and gpu.sm_count) else gpu.sm_count
    util, split = wave_utilization(m, n, k, free, batch) if (gpu.sm_count and waves) else (1.0, 1)
    if table is None:
        measured, source = 1.0, "no measured matmul efficiency for this device and dtype: the datasheet peak"
    elif table.full_waves and gpu.sm_count:
        def ceiling(point):
            pm, pn, pk, fraction = point
            return fraction / wave_utilization(pm, pn, pk, gpu.sm_count)[0]
        measured, source = _idw(table.points, (m, n, k), ceiling), table.source
    else:
        measured, source = _idw(table.points, (m, n, k), lambda p: p[3]), table.source
    share = free / gpu.sm_count if (gpu.sm_count and free) else 1.0
    return {"efficiency": min(measured * util, 1.0) * share, "measured": measured, "utilization": util,
            "split_k": split, "source": source}


def attention_efficiency(gpu, seq_len: int, backward: bool, causal: bool, kernel: str | None = None,
                         head_dim: int = 128, dtype: str | None = None) -> float | None:
    """Achieved fraction of peak of `gpu`'s flash-attention kernel at `seq_len` (None when nothing is measured).

    Interpolated linearly in log2(seq_len) between measured points, clamped at the ends; a causal kernel is
    scaled by the measured causal / non-causal forward ratio (applied to the backward too: an assumption).
    The kernel's tables by head size (AttentionEfficiency.other_head_dims) are interpolated in log2(head_dim),
    clamped at the measured sizes. None also when the table was measured in another dtype than `dtype` (flash
    kernels run 16-bit inputs; fp32 SDPA runs another kernel).
    """
    table = gpu.attention_table(kernel)
    if table is None or (dtype is not None and _matmul_kind(dtype) != _matmul_kind(table.dtype)):
        return None
    column = 2 if backward else 1

    def at(t) -> float:
        value = interpolate_log2([(p[0], p[column]) for p in t.points], seq_len)
        if causal and t.causal_ratio:
            value *= interpolate_log2(list(t.causal_ratio), seq_len)
        return value

    tables = table.at_head_dims()
    if len(tables) == 1:
        return at(table)
    return interpolate_log2([(t.head_dim, at(t)) for t in tables], head_dim)


def _matmul_kind(dtype: str) -> str:
    """'16-bit' for bf16/fp16 (one tensor-core peak on every GPU here), else the dtype's peak key."""
    from trainledger.specs.dtypes import get_dtype
    key = get_dtype(dtype).peak_key
    return "16-bit" if key in ("bf16", "fp16") else key


def interpolate_log2(points: list[tuple[int, float]], x: float) -> float:
    """y at x from (x, y) points, linear in log2(x) between neighbours, clamped at the ends."""
    points = sorted(points)
    if x <= points[0][0]:
        return points[0][1]
    if x >= points[-1][0]:
        return points[-1][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= x <= x1:
            t = (math.log2(x) - math.log2(x0)) / (math.log2(x1) - math.log2(x0))
            return y0 + t * (y1 - y0)
    return points[-1][1]


def memory_seconds(gpu, n_bytes: float, op_bytes: float | None = None, curve=None) -> float:
    """Seconds to stream `n_bytes` through memory: bytes / (datasheet bandwidth × achieved fraction).

    A calibrated device measured its bandwidth by op size (`memory_bandwidth_curve`: caches serve small ops
    faster than DRAM; or `curve`, an op's own measured curve): the rate at `op_bytes` (the bytes of one op;
    default all of `n_bytes`) is interpolated in log2(size), clamped at the measured ends."""
    curve = curve or getattr(gpu, "memory_bandwidth_curve", ())
    if curve:
        rate = interpolate_log2(list(curve), max(op_bytes if op_bytes is not None else n_bytes, 1.0))
        return n_bytes / (rate * gpu.memory_bandwidth_fraction)
    return n_bytes / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_bandwidth_fraction)


def kernel_seconds(gpu, kernel: Kernel, attention_kernel: str | None = None, sms: int | None = None) -> float:
    """Seconds of `kernel` on `gpu` without the per-launch overhead (added apart: GPUSpec.op_overhead_seconds).

    `attention_kernel` names which measured flash kernel of `gpu` runs the attention (None: its default); `sms`
    limits GEMMs to that many SMs (a concurrent collective holds the rest: see gemm_efficiency)."""
    if kernel.kind in ("host", "python"):   # launches nothing (a view; Python): CPU time only (account.time.step)
        return 0.0
    if kernel.kind == "elementwise":   # an op with its own measured curve (calibrated devices) streams at that rate
        own = getattr(gpu, "elementwise_curves", {}).get(kernel.name)
        op_bytes = kernel.working_set_bytes or kernel.bytes / max(kernel.count, 1)
        fraction = gpu.access_fractions.get(kernel.access, 1.0) if kernel.access != "stream" else 1.0
        return memory_seconds(gpu, kernel.bytes, op_bytes, own) / fraction
    peak = gpu.peak(kernel.dtype)
    if kernel.kind == "flash_attention":
        seq_len, backward, causal, *rest = kernel.shape
        head_dim = rest[0] if rest else 128
        fraction = attention_efficiency(gpu, seq_len, backward, causal, attention_kernel, head_dim, kernel.dtype)
        if fraction is None:   # no kernel measurement: the GEMM efficiency of its QKᵀ-shaped batched matmul
            fraction = gemm_efficiency(gpu, seq_len, seq_len, head_dim, kernel.dtype)["efficiency"]
        return max(kernel.flops / (peak * fraction), memory_seconds(gpu, kernel.bytes))
    m, n, k, batch = kernel.shape
    if kernel.unaligned and gpu.unaligned_gemm_fraction and gpu.peak_key(kernel.dtype) in ("bf16", "fp16"):
        # cuBLAS's 1-element-load fallback for leading dims that are not 16-byte multiples (specs/performance.py)
        return max(kernel.flops / (peak * gpu.unaligned_gemm_fraction), memory_seconds(gpu, kernel.bytes))
    eff = gemm_efficiency(gpu, m, n, k, kernel.dtype, batch, sms)
    extra = (eff["split_k"] - 1) * batch * m * n * 4 * 2 * kernel.count   # split-K partial sums: fp32 out + in
    return max(kernel.flops / (peak * eff["efficiency"]), memory_seconds(gpu, kernel.bytes + extra))
