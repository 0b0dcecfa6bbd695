"""`trainledger bench`: measured matmul FLOP/s and MFU on this machine (CPU or CUDA)."""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from trainledger import units
from trainledger.cli import common
from trainledger.errors import TrainledgerError

HELP = "measured matmul FLOP/s and MFU on this machine (--dtype, --size, --device); --calibrate profiles it"
DESCRIPTION = """Times a (size × size) @ (size × size) matmul — 2·size³ FLOPs — after warm-up, the median of
--repeats synchronized runs, and divides by the device's peak:
  CUDA: the dense datasheet peak of the GPU the device reports (unknown GPU: no peak, no MFU — never a guess);
  CPU:  derived from /proc/cpuinfo: FLOPs/cycle/core (AVX-512 FMA 64, AVX2 FMA 32, AMX-BF16 1024, ...)
        × torch's matmul threads × max clock (cpufreq, else the model name's GHz, else cpu MHz).

--calibrate instead measures this machine for the time model (measure/calibrate.py): matmul FLOP/s over a
grid of shapes, memory bandwidth by op size, causal SDPA rates and the CPU cost of an op (on CUDA the kernels
are timed on the GPU, apart from the CPU's launches), saved as JSON in $XDG_CACHE_HOME/trainledger/
(~/.cache/trainledger/) for `--gpu cpu` / `--gpu cuda` in step, layout, plan and for `profile`, which calibrate
on first use by themselves. --calibrate re-measures and replaces the cache; --out FILE writes the profile there
instead, for `--calibration FILE` on another machine (plan on a laptop with what the GPU box measured).
A calibration measured while other processes kept the cores busy understates the machine: it is not saved
unless --force. Calibrate on a quiet machine, or with one thread (--threads 1) when only a core is free.
Without --threads, bench takes the cores other processes leave idle (as `train` does; OMP_NUM_THREADS is kept)
and prints its choice.

examples:
  trainledger bench --dtype fp32 --size 1024
  trainledger bench --calibrate                 # this CPU (a few seconds); --device cuda for the GPU
  trainledger bench --calibrate --device cuda --out calibration-cuda-h100.json   # then: step --calibration FILE
  trainledger bench --dtype bf16 --size 8192 --device cuda --json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32", help="matmul dtype (default fp32)")
    parser.add_argument("--size", type=common.positive_int, default=1024, help="matrix side N: an N×N @ N×N matmul (default 1024)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where to run (default cpu)")
    parser.add_argument("--repeats", type=common.positive_int, default=5, help="timed runs; the median is reported (default 5)")
    parser.add_argument("--warmup", type=common.nonnegative_int, default=2, help="untimed runs first (default 2)")
    parser.add_argument("--threads", type=common.positive_int, default=None,
                        help="torch intra-op threads on CPU, at most 4 per core (default: the cores other processes "
                             "leave idle, as `train` picks them, or OMP_NUM_THREADS when set; printed); a "
                             "calibration is kept per thread count")
    parser.add_argument("--calibrate", action="store_true",
                        help="measure this machine for the time model and save the profile (see above)")
    parser.add_argument("--out", metavar="FILE", default=None,
                        help="with --calibrate: write the profile to FILE (for `--calibration FILE`) instead of the cache")
    parser.add_argument("--force", action="store_true",
                        help="with --calibrate: save the profile even if the machine was busy while measuring")
    common.add_json_flag(parser)


def compute(args) -> dict:
    from trainledger.measure.cpu_load import OthersCpu, check_threads, set_threads
    others = OthersCpu()          # other processes' CPU use while torch loads: which cores are idle (as train)
    if args.threads is not None:
        check_threads(args.threads)
    if not args.calibrate:
        _check_size_fits(args.size, args.dtype, args.device)
    threads_line = set_threads(args.threads, args.device, others)   # a calibration is kept per thread count
    result = calibrate(args) if args.calibrate else _bench(args)
    import torch
    result["threads"] = torch.get_num_threads() if args.device == "cpu" else None
    result["threads_choice"] = threads_line
    return result


def _bench(args) -> dict:
    from trainledger.measure.timing import bench_matmul
    show = not getattr(args, "json", False) and args.size >= 2048
    if not show:
        return bench_matmul(args.size, args.dtype, args.device, warmup=args.warmup, repeats=args.repeats)
    from rich.progress import Progress
    with Progress(transient=True) as progress:
        task = progress.add_task(f"{args.size}×{args.size} {args.dtype} matmul", total=args.warmup + args.repeats)
        return bench_matmul(args.size, args.dtype, args.device, warmup=args.warmup, repeats=args.repeats,
                            progress=lambda done, total: progress.update(task, completed=done))


DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def _check_size_fits(size: int, dtype: str, device: str) -> None:
    """One line naming --size when its three size×size matrices (A, B and A @ B) exceed the memory the device can
    give (measure/resources.py), before anything is allocated: `--size 1e9` asks for 12 EB."""
    from trainledger import units
    from trainledger.measure.resources import available_cpu_bytes, available_cuda_bytes
    need = 3 * size * size * DTYPE_BYTES[dtype]
    try:
        have, source = available_cpu_bytes() if device == "cpu" else available_cuda_bytes()
    except TrainledgerError:       # no CUDA device: bench_matmul says so in its own words
        return
    if need > have:
        largest = int((have / (3 * DTYPE_BYTES[dtype])) ** 0.5)
        raise TrainledgerError(f"--size {size}: three {size}×{size} {dtype} matrices need {units.format_bytes(need)}, more "
                               f"than the {units.format_bytes(have)} available on {device} ({source}); the largest "
                               f"that fits is about {largest}", "--size")


def calibrate(args) -> dict:
    """Measures and saves this machine's calibration profile; the profile with `path` and a summary. A profile
    measured on a busy machine is refused (exit 2) unless --force."""
    from trainledger.errors import TrainledgerError
    from trainledger.measure.calibrate import busy_warning, calibrate as measure, gpu_from_profile, profile_path, save_profile
    if args.out is not None and (not args.out.strip() or Path(args.out).is_dir()):
        raise TrainledgerError(f"--out needs a file name, got {args.out!r}")
    if args.out is not None:            # before measuring: never a link, a device or a file that is no profile
        from trainledger.files import check_output, json_format_problem
        from trainledger.specs.calibration import FORMAT
        check_output(args.out, "--out", "a calibration profile", json_format_problem(FORMAT))
    profile = measure(args.device)                  # checks the device first
    warning = busy_warning(profile)
    if warning and not args.force:
        raise TrainledgerError(f"not saved: {warning}; run it on a quiet machine, or with one thread "
                               "(`trainledger bench --calibrate --threads 1`), or keep it anyway with --force")
    out = (Path(args.out), "--out") if args.out is not None else (profile_path(args.device), None)
    path = save_profile(profile, *out)
    gpu = gpu_from_profile(profile)
    rates = {dtype: [row[3] for row in rows] for dtype, rows in profile["gemm"].items()}
    summary = {"path": str(path), "calibration_seconds": profile["calibration_seconds"],
               "matmul_flops_per_s": {d: {"min": min(r), "median": statistics.median(r), "max": max(r)} for d, r in rates.items()},
               "peak_flops_per_s": gpu.peak_flops_per_s, "memory_bytes_per_s": {str(int(b)): r for b, r in profile["memory"]},
               "op_overhead_seconds": profile["op_overhead_seconds"],
               "decode_op_overhead_seconds": profile.get("decode_op_overhead_seconds")}
    result = {"calibration": summary, "profile": profile}
    if warning:
        result["warnings"] = [f"{warning} (saved: --force)"]
    return result


def render(result: dict, args) -> None:
    if result.get("threads_choice"):          # the thread count bench picked (as train does), and why
        common.console().print(result["threads_choice"], soft_wrap=True)
    if "calibration" in result:
        return render_calibration(result)
    rows = [
        ("matmul", f"{result['size']}×{result['size']} @ {result['size']}×{result['size']} {result['dtype']} on {result['device']}"),
        ("FLOPs (2·N³)", units.format_flops(result["flops"])),
        ("median time", units.format_seconds(result["seconds"])),
        ("achieved", units.format_rate(result["flops_per_s"])),
        ("peak", units.format_rate(result["peak_flops_per_s"]) if result["peak_flops_per_s"] else "unknown"),
        ("MFU", f"{100 * result['mfu']:.1f}%" if result["mfu"] is not None else "— (no peak)"),
    ]
    common.console().print(common.table("matmul benchmark", ["", "value"], [list(r) for r in rows],
                                        caption=f"peak: {result['peak_source']}"))


def render_calibration(result: dict) -> None:
    c, profile = result["calibration"], result["profile"]
    rows = [("device", f"{profile['device']}: {profile['device_name']}"
                       + (f", {units.count_of(profile['threads'], 'thread')}" if profile.get("threads") else "")),
            ("torch", profile["torch_version"])]
    for dtype, r in c["matmul_flops_per_s"].items():
        rows.append((f"matmul {dtype} ({len(profile['gemm'][dtype])} shapes)",
                     f"{units.format_rate(r['min'])} … {units.format_rate(r['median'])} (median) … {units.format_rate(r['max'])}"))
        rows.append((f"peak {dtype} (fractions are of it)", units.format_rate(c["peak_flops_per_s"][dtype])))
    for size, rate in c["memory_bytes_per_s"].items():
        rows.append((f"memory, {units.format_bytes(float(size))} per op", f"{rate / 1e9:.1f} GB/s"))
    for name, rows_of in profile.get("elementwise", {}).items():
        rows.append((f"{name} (by size)", ", ".join(f"{rate / 1e9:.1f}" for _, rate in rows_of) + " GB/s"))
    attention = profile["attention"]
    for head_dim, points in [(attention.get("head_dim"), attention["points"])] + [
            (o["head_dim"], o["points"]) for o in attention.get("other_head_dims", [])]:
        for seq, fwd, bwd in points:
            rows.append((f"SDPA causal, head dim {head_dim}, seq {seq}",
                         f"forward {units.format_rate(fwd)}, backward {units.format_rate(bwd)}"))
    rows.append(("CPU per launching op (autograd)", units.format_seconds(c["op_overhead_seconds"])))
    for key, label in (("host_op_seconds", "CPU per view op (no launch)"),
                       ("kernel_overhead_seconds", "GPU per tiny kernel (back to back)")):
        if profile.get(key):
            rows.append((label, units.format_seconds(profile[key])))
    if profile.get("decode_op_overhead_seconds") is not None:
        rows.append(("CPU per op of eager decoding", units.format_seconds(profile["decode_op_overhead_seconds"])))
    rows.append(("took", units.format_seconds(c["calibration_seconds"])
                 + (f" (other processes used {profile['others_cpus']:.1f} of {profile['cpu_count']} CPUs)"
                    if profile.get("others_cpus") is not None else
                    f" (load average {profile['load_average']:.1f} on {profile['cpu_count']} CPUs)"
                    if profile.get("load_average") is not None else "")))
    common.console().print(common.table("calibration of this machine", ["", "measured"], [list(r) for r in rows],
                                        caption=f"saved to {c['path']}\npeak: {profile['peak_source']}"))
