"""FLOPs, bytes and ideal time of one matrix multiplication C[m, n] = A[m, k] @ B[k, n] (pure, no torch).

FLOPs: each of the m·n outputs is a dot product of length k — k multiplies and k adds — so 2·m·k·n
(CS336 Lecture 2, "FLOPs of a matmul"; Kaplan et al. 2020, arXiv:2001.08361, Sec. 2.1, counts a
multiply-add as 2 FLOPs). Bytes moved at the least: read A and B once and write C once, in one dtype.
Ideal time is the roofline bound (Williams, Waterman & Patterson 2009, "Roofline: an insightful visual
performance model for multicore architectures", CACM 52(4)): a kernel can go no faster than its FLOPs at
peak FLOP/s nor than its bytes at peak memory bandwidth, so
    ideal_time_s = max(flops / peak_flops_per_s, bytes / memory_bandwidth_bytes_per_s).
It is compute-bound when its arithmetic intensity (FLOPs per byte) exceeds the machine balance
peak_flops_per_s / bandwidth. Real kernels are slower; `trainledger bench` measures how much.
"""

from __future__ import annotations

from trainledger.specs.dtypes import DType, get_dtype
from trainledger.specs.hardware import GPUS, GPUSpec, get_gpu


def matmul_flops(m: int, k: int, n: int) -> int:
    """FLOPs (a count) of an (m×k)·(k×n) matmul: 2·m·k·n (one multiply and one add per term)."""
    return 2 * m * k * n


def matmul_bytes(m: int, k: int, n: int, dtype: str | DType = "fp32") -> float:
    """Bytes read and written by an (m×k)·(k×n) matmul in `dtype`: (m·k + k·n + m·n)·bytes_per_element.

    The least traffic to and from memory: each input read once, the output written once (no re-reads).
    """
    d = dtype if isinstance(dtype, DType) else get_dtype(dtype)
    return (m * k + k * n + m * n) * d.bytes


def arithmetic_intensity(m: int, k: int, n: int, dtype: str | DType = "fp32") -> float:
    """FLOPs per byte of an (m×k)·(k×n) matmul: 2mkn / ((mk + kn + mn)·bytes_per_element)."""
    return matmul_flops(m, k, n) / matmul_bytes(m, k, n, dtype)


def ideal_time_s(m: int, k: int, n: int, gpu: str | GPUSpec, dtype: str | DType = "bf16") -> float:
    """Seconds the matmul takes at best on `gpu` in `dtype`: max(FLOPs / peak, bytes / bandwidth) (roofline)."""
    return matmul_on_gpu(m, k, n, gpu, dtype)["ideal_time_s"]


def matmul_on_gpu(m: int, k: int, n: int, gpu: str | GPUSpec, dtype: str | DType = "bf16") -> dict:
    """One roofline record for the matmul on `gpu` in `dtype` (units in the key names).

    Keys: gpu, dtype, flops, bytes, arithmetic_intensity_flops_per_byte, peak_flops_per_s,
    memory_bandwidth_bytes_per_s, machine_balance_flops_per_byte, compute_time_s, memory_time_s,
    ideal_time_s, bound ("compute" | "memory"), achievable_flops_per_s (= flops / ideal_time_s).
    An error names the dtypes `gpu` has a peak for when it has none for `dtype`.
    """
    g = gpu if isinstance(gpu, GPUSpec) else get_gpu(gpu)
    d = dtype if isinstance(dtype, DType) else get_dtype(dtype)
    flops, n_bytes = matmul_flops(m, k, n), matmul_bytes(m, k, n, d)
    peak = g.peak(d.peak_key)
    bandwidth = g.memory_bandwidth_bytes_per_s
    compute_time_s, memory_time_s = flops / peak, n_bytes / bandwidth
    ideal = max(compute_time_s, memory_time_s)
    return {
        "gpu": g.name, "dtype": d.name, "flops": flops, "bytes": n_bytes,
        "arithmetic_intensity_flops_per_byte": flops / n_bytes, "peak_flops_per_s": peak,
        "memory_bandwidth_bytes_per_s": bandwidth, "machine_balance_flops_per_byte": peak / bandwidth,
        "compute_time_s": compute_time_s, "memory_time_s": memory_time_s, "ideal_time_s": ideal,
        "bound": "compute" if compute_time_s >= memory_time_s else "memory",
        "achievable_flops_per_s": flops / ideal,
    }


def matmul_table(m: int, k: int, n: int, gpus: list[str | GPUSpec] | None = None,
                 dtypes: list[str | DType] | None = None) -> list[dict]:
    """Roofline records (see `matmul_on_gpu`) for every GPU × dtype pair that has a peak; all GPUs when None.

    With `dtypes` None every dtype a GPU has a peak for is listed (fp8 as E4M3); pairs a GPU lacks are skipped.
    """
    chosen_gpus = [g if isinstance(g, GPUSpec) else get_gpu(g) for g in (gpus or GPUS)]
    records = []
    for g in chosen_gpus:
        if dtypes is None:
            # int4 and fp4 (NVFP4, Blackwell Ultra) are peaks of packed formats no `dtypes` entry stores: not listed
            chosen = [get_dtype(key) for key in g.peak_flops_per_s if key not in ("int4", "fp4")]
        else:
            chosen = [d if isinstance(d, DType) else get_dtype(d) for d in dtypes]
        records += [matmul_on_gpu(m, k, n, g, d) for d in chosen if d.peak_key in g.peak_flops_per_s]
    return records
