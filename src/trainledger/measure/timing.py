"""Measured time and FLOP/s: synchronized timing with warm-up and medians, matmul benchmarks, MFU.

    time_fn(fn, warmup=2, repeats=5) -> Timing(median_s, times_s)   synchronizes CUDA around every call
    peak_flops_per_s(device, dtype) -> (FLOP/s or None, source)      CUDA: datasheet; CPU: derived from cpuinfo
    bench_matmul(size, dtype, device) -> dict                        keys of `trainledger bench --json`
    StepTimer / peak_memory_bytes / achieved_flops_per_s / mfu       cheap per-step readings for a trainer
    peak_memory_kind(device)                                          what the peak is: "rss" or "cuda_allocated"

MFU = achieved FLOP/s / peak FLOP/s (PaLM, arXiv:2204.02311, App. B), with achieved = FLOPs / seconds and
the FLOPs of the step taken from account/ (model FLOPs, no recomputation).
"""

from __future__ import annotations

import os
import re
import statistics
import time
from dataclasses import dataclass, field

import torch

from trainledger.errors import TrainledgerError

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def synchronize(device) -> None:
    """Wait for queued CUDA work on `device` (a no-op on CPU): timings must not stop before the kernels do."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Timing:
    """Wall-clock seconds of repeated calls after warm-up: `median_s` and every `times_s`."""

    median_s: float
    times_s: list[float] = field(default_factory=list)


def time_fn(fn, *, warmup: int = 2, repeats: int = 5, device="cpu", progress=None) -> Timing:
    """Timing of fn() over `repeats` calls after `warmup` untimed ones; the median resists outliers.

    On CUDA each call is bracketed by torch.cuda.synchronize (kernels are asynchronous). The lecture's
    `time_matmul` has no warm-up; the first call pays for allocation and kernel selection.
    `progress(i, total)` is called after each call, for a progress bar.
    """
    total = warmup + repeats
    for i in range(warmup):
        fn()
        if progress:
            progress(i + 1, total)
    times = []
    for i in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
        if progress:
            progress(warmup + i + 1, total)
    return Timing(median_s=statistics.median(times), times_s=times)


# --- peak FLOP/s -----------------------------------------------------------------------------------

def _cpu_flags() -> tuple[set[str], str]:
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return set(), ""
    flags = re.search(r"^flags\s*:\s*(.*)$", text, re.M)
    model = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
    return set(flags.group(1).split()) if flags else set(), model.group(1).strip() if model else ""


def _cpu_clock_hz(model: str) -> tuple[float | None, str]:
    try:
        khz = int(open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read())
        return khz * 1e3, "cpuinfo_max_freq"
    except (OSError, ValueError):
        pass
    named = re.search(r"@\s*([\d.]+)\s*GHz", model)
    if named:
        return float(named.group(1)) * 1e9, "model name"
    try:
        mhz = re.search(r"^cpu MHz\s*:\s*([\d.]+)", open("/proc/cpuinfo").read(), re.M)
        if mhz:
            return float(mhz.group(1)) * 1e6, "cpu MHz"
    except OSError:
        pass
    return None, ""


def cpu_clock_is_max() -> bool:
    """Whether this CPU's clock figure is its maximum (cpufreq's cpuinfo_max_freq) rather than a nominal one.

    The model name's "@ 2.60GHz" is Intel's base clock and /proc/cpuinfo's "cpu MHz" is the current or, in a
    VM, the nominal clock; boost runs above both. Measured on this project's CI machines (AMD EPYC family 26,
    "cpu MHz" 2596, no cpufreq): one thread ran a 1024² bf16 matmul at 442 GFLOP/s, 1.33× the 332 GFLOP/s
    that 128 FLOPs/cycle at 2.6 GHz allows, i.e. at ≥ 3.45 GHz.
    """
    return _cpu_clock_hz(_cpu_flags()[1])[1] == "cpuinfo_max_freq"


def peak_is_ceiling(device="cpu") -> bool:
    """Whether peak_flops_per_s(device) bounds what the device can do, so MFU ≤ 1 must hold.

    A GPU's datasheet peak is (at its boost clock); a CPU's derived peak is only when its clock is the
    maximum (cpu_clock_is_max).
    """
    return torch.device(device).type == "cuda" or cpu_clock_is_max()


def cpu_flops_per_cycle(flags: set[str], dtype: str) -> tuple[int, str]:
    """(FLOPs per cycle per core, instruction set) for `dtype` given /proc/cpuinfo flags.

    Two FMA units per core (Intel Skylake-SP and later, AMD Zen 2+), an FMA = 2 FLOPs per lane:
    AVX-512 16 fp32 lanes -> 64; AVX2+FMA 8 lanes -> 32; AVX 8-wide add + mul -> 16; SSE -> 8.
    bf16: AMX (amx_bf16) 1024 (Intel Sapphire Rapids: 16×32 × 2 per cycle); AVX512_BF16 dot products 128;
    fp16: amx_fp16 1024; avx512_fp16 128. Otherwise 16-bit matmuls run at the fp32 rate (upcast).
    """
    if dtype == "bf16" and "amx_bf16" in flags:
        return 1024, "AMX-BF16"
    if dtype == "fp16" and "amx_fp16" in flags:
        return 1024, "AMX-FP16"
    if dtype == "bf16" and "avx512_bf16" in flags:
        return 128, "AVX512-BF16"
    if dtype == "fp16" and "avx512_fp16" in flags:
        return 128, "AVX512-FP16"
    if "avx512f" in flags:
        return 64, "AVX-512 FMA"
    if "avx2" in flags and "fma" in flags:
        return 32, "AVX2 FMA"
    if "avx" in flags:
        return 16, "AVX"
    return 8, "SSE"


def cpu_peak_flops_per_s(dtype: str = "fp32", threads: int | None = None) -> tuple[float | None, str]:
    """(derived peak FLOP/s, how it was derived) of this CPU: FLOPs/cycle/core × cores used × max clock.

    Cores used = torch.get_num_threads() (the matmul's threads), at most the logical CPUs. Derived, not
    measured: turbo, AVX-512 down-clocking and SMT make the real ceiling lower or higher.
    """
    flags, model = _cpu_flags()
    clock, clock_source = _cpu_clock_hz(model)
    if clock is None:
        return None, "unknown: no CPU clock in /proc/cpuinfo or cpufreq"
    per_cycle, isa = cpu_flops_per_cycle(flags, dtype)
    cores = min(threads or torch.get_num_threads(), os.cpu_count() or 1)
    peak = per_cycle * cores * clock
    caveat = "" if clock_source == "cpuinfo_max_freq" else "; not a ceiling: boost clocks run higher"
    return peak, (f"derived: {per_cycle} FLOPs/cycle/core ({isa}) × {cores} cores × {clock / 1e9:.2f} GHz "
                  f"({clock_source}) = {peak / 1e9:.1f} GFLOP/s{caveat}")


def peak_flops_per_s(device="cpu", dtype: str = "fp32") -> tuple[float | None, str]:
    """(peak FLOP/s or None, source) of `device` for `dtype`: CUDA from the datasheet table, CPU derived.

    An unknown GPU gives None (no MFU) rather than a guess. fp32 matmuls on CUDA use the fp32 peak
    (TF32 is off by default in PyTorch for matmuls).
    """
    device = torch.device(device)
    if device.type == "cuda":
        from trainledger.specs.hardware import gpu_for_device_name
        name = torch.cuda.get_device_name(device)
        gpu = gpu_for_device_name(name)
        if gpu is None:
            return None, f"unknown GPU {name!r}: no datasheet peak, so no MFU"
        if dtype not in gpu.peak_flops_per_s:
            return None, f"{gpu.name} has no {dtype} peak"
        return gpu.peak_flops_per_s[dtype], f"datasheet: {gpu.name} dense {dtype} ({gpu.source})"
    return cpu_peak_flops_per_s(dtype)


def bench_matmul(size: int, dtype: str = "fp32", device="cpu", *, warmup: int = 2, repeats: int = 5,
                 progress=None) -> dict:
    """Measured FLOP/s of a (size × size) @ (size × size) matmul: flops, seconds (median), flops_per_s, mfu.

    FLOPs = 2·size³ (one multiply and one add per term). mfu = flops_per_s / peak_flops_per_s (None when
    the peak is unknown).
    """
    if dtype not in DTYPES:
        raise TrainledgerError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise TrainledgerError("--device cuda: no CUDA device is available here (use --device cpu)")
    a = torch.randn(size, size, device=device, dtype=DTYPES[dtype])
    b = torch.randn(size, size, device=device, dtype=DTYPES[dtype])
    timing = time_fn(lambda: a @ b, warmup=warmup, repeats=repeats, device=device, progress=progress)
    flops = 2 * size ** 3
    peak, source = peak_flops_per_s(device, dtype)
    flops_per_s = flops / timing.median_s
    return {"size": size, "dtype": dtype, "device": str(device), "flops": flops, "seconds": timing.median_s,
            "times_s": timing.times_s, "flops_per_s": flops_per_s, "peak_flops_per_s": peak,
            "peak_source": source, "mfu": flops_per_s / peak if peak else None,
            "threads": torch.get_num_threads() if torch.device(device).type == "cpu" else None}


# --- cheap per-step readings for a training loop -------------------------------------------------------

def achieved_flops_per_s(flops: float, seconds: float) -> float:
    """FLOP/s achieved: FLOPs of the work (from account/, model FLOPs) / seconds it took."""
    if not seconds > 0:
        raise TrainledgerError(f"seconds must be positive, got {seconds!r}")
    return flops / seconds


def mfu(flops: float, seconds: float, peak: float | None) -> float | None:
    """Model FLOPs utilization (PaLM App. B): achieved FLOP/s / peak FLOP/s; None when the peak is unknown."""
    return achieved_flops_per_s(flops, seconds) / peak if peak else None


def peak_memory_bytes(device="cpu", reset: bool = False) -> int:
    """Peak bytes since the last reset: CUDA torch.cuda.max_memory_allocated; CPU the process's peak RSS.

    The CPU figure is the whole process (Python, libraries, data), never reset, from getrusage (KiB on Linux).
    """
    device = torch.device(device)
    if device.type == "cuda":
        value = torch.cuda.max_memory_allocated(device)
        if reset:
            torch.cuda.reset_peak_memory_stats(device)
        return int(value)
    import resource
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def peak_memory_kind(device="cpu") -> str:
    """What peak_memory_bytes measures on `device`: "rss" (a CPU: the whole process's resident memory, Python,
    libraries and data included) or "cuda_allocated" (the tensors torch's caching allocator handed out)."""
    return "cuda_allocated" if torch.device(device).type == "cuda" else "rss"


PEAK_MEMORY_WORDS = {"rss": "peak RSS", "cuda_allocated": "peak allocated"}   # how a line names each kind


class StepTimer:
    """Context manager timing one step with CUDA synchronization: `with StepTimer(device) as t: ...; t.seconds`."""

    def __init__(self, device="cpu"):
        self.device = device
        self.seconds = 0.0

    def __enter__(self):
        synchronize(self.device)
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        synchronize(self.device)
        self.seconds = time.perf_counter() - self._start
        return False
