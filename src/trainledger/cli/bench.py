"""`trainledger bench`: measured matmul FLOP/s and MFU on this machine (CPU or CUDA)."""

from __future__ import annotations

import argparse

from trainledger import units
from trainledger.cli import common

HELP = "measured matmul FLOP/s and MFU on this machine (--dtype, --size, --device)"
DESCRIPTION = """Times a (size × size) @ (size × size) matmul — 2·size³ FLOPs — after warm-up, the median of
--repeats synchronized runs, and divides by the device's peak:
  CUDA: the dense datasheet peak of the GPU the device reports (unknown GPU: no peak, no MFU — never a guess);
  CPU:  derived from /proc/cpuinfo: FLOPs/cycle/core (AVX-512 FMA 64, AVX2 FMA 32, AMX-BF16 1024, ...)
        × torch's matmul threads × max clock (cpufreq, else the model name's GHz, else cpu MHz).

examples:
  trainledger bench --dtype fp32 --size 1024
  trainledger bench --dtype bf16 --size 8192 --device cuda --json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32", help="matmul dtype (default fp32)")
    parser.add_argument("--size", type=common.positive_int, default=1024, help="matrix side N: an N×N @ N×N matmul (default 1024)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where to run (default cpu)")
    parser.add_argument("--repeats", type=common.positive_int, default=5, help="timed runs; the median is reported (default 5)")
    parser.add_argument("--warmup", type=common.nonnegative_int, default=2, help="untimed runs first (default 2)")
    common.add_json_flag(parser)


def compute(args) -> dict:
    from trainledger.measure.timing import bench_matmul
    show = not getattr(args, "json", False) and args.size >= 2048
    if not show:
        return bench_matmul(args.size, args.dtype, args.device, warmup=args.warmup, repeats=args.repeats)
    from rich.progress import Progress
    with Progress(transient=True) as progress:
        task = progress.add_task(f"{args.size}×{args.size} {args.dtype} matmul", total=args.warmup + args.repeats)
        return bench_matmul(args.size, args.dtype, args.device, warmup=args.warmup, repeats=args.repeats,
                            progress=lambda done, total: progress.update(task, completed=done))


def render(result: dict, args) -> None:
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
