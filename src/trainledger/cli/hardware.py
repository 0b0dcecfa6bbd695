"""`trainledger hardware`: the accelerators, with dense peak FLOP/s per dtype, memory and bandwidth."""

from __future__ import annotations

from trainledger.cli import common
from trainledger.units import format_bytes

HELP = "list the accelerators: dense peak FLOP/s per dtype, memory (CUDA-reported and datasheet), bandwidth, aliases"
PEAK_COLUMNS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")


def add_arguments(parser) -> None:
    common.add_json_flag(parser)


def compute(args) -> list:
    from trainledger.specs.hardware import GPUS

    return [g.to_dict() for g in GPUS]


def render(result: list, args) -> None:
    from rich import box

    peaks, memory = [], []
    for r in result:
        peaks.append([r["name"], *(f"{r['peak_flops_per_s'][k] / 1e12:g}" if k in r["peak_flops_per_s"] else "–"
                                   for k in PEAK_COLUMNS)])
        memory.append([r["name"], format_bytes(r["memory_bytes"]), f"{r['datasheet_memory_bytes'] / 1e9:.4g} GB",
                       f"{r['memory_bandwidth_bytes_per_s'] / 1e9:g} GB/s", ", ".join(r["aliases"])])
    first = common.table("Dense peak TFLOP/s (int8: TOPS) per dtype", ["name", *PEAK_COLUMNS], peaks,
                         "Dense peaks; datasheets print 2:4-sparse figures at 2x, never used here.")
    second = common.table("Memory and bandwidth (GB = 1e9 bytes, GiB = 2^30 bytes)",
                          ["name", "memory (device)", "datasheet", "bandwidth", "aliases"], memory,
                          "memory (device): the capacity the device reports (CUDA: torch total_memory), what fit, memory, "
                          "infer and layout fill; sources: `trainledger hardware --json` (memory_source, source).")
    for table in (first, second):
        table.box, table.pad_edge, table.collapse_padding = box.SIMPLE_HEAD, False, True
        common.console().print(table)
