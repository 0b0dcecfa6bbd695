"""`trainledger matmul`: FLOPs, bytes and roofline time of one matmul on each GPU and dtype.

    trainledger matmul                          # the lecture's x[16384, 32768] @ w[32768, 8192]
    trainledger matmul --m 4096 --k 4096 --n 4096 --gpu h100 --gpu a100 --dtype bf16 --dtype fp32
"""

from __future__ import annotations

from trainledger.cli import common
from trainledger.errors import TrainledgerError
from trainledger.units import format_flops, format_bytes, format_seconds

HELP = "FLOPs (2·m·k·n) and ideal roofline time of an (m×k)·(k×n) matmul on each GPU and dtype"
DESCRIPTION = """FLOPs (2·m·k·n) and ideal roofline time of an (m×k)·(k×n) matmul on each GPU and dtype.

ideal time (seconds; shown in ms) = max(FLOPs / dense peak FLOP/s, bytes moved / memory bandwidth), with
bytes moved = (m·k + k·n + m·n) × bytes per element (read A and B, write C once). (c) marks compute-bound,
(m) memory-bound. Real kernels are slower; `trainledger bench` measures this machine.
No flags: the lecture's B=16384, D=32768, K=8192 on every GPU in fp32, bf16 and fp8.

examples:
  trainledger matmul
  trainledger matmul --m 4096 --k 4096 --n 4096 --gpu h100 --dtype bf16 --json
  trainledger matmul --gpu h100,a100 --dtype fp32,tf32,bf16
"""

DEFAULT_DTYPES = ("fp32", "bf16", "fp8")


def add_arguments(parser) -> None:
    parser.add_argument("--m", type=common.positive_int, default=16384, help="rows of A and C (default 16384, the lecture's B)")
    parser.add_argument("--k", type=common.positive_int, default=32768, help="columns of A, rows of B (default 32768, the lecture's D)")
    parser.add_argument("--n", type=common.positive_int, default=8192, help="columns of B and C (default 8192, the lecture's K)")
    parser.add_argument("--dtype", action="append", metavar="DTYPE",
                        help=f"dtype(s), repeatable or comma-separated (default: {', '.join(DEFAULT_DTYPES)}; see `trainledger dtypes`)")
    parser.add_argument("--gpu", action="append", metavar="GPU",
                        help="GPU(s), repeatable or comma-separated (default: all; see `trainledger hardware`)")
    common.add_json_flag(parser)


def _names(values: list[str] | None, flag: str) -> list[str] | None:
    """The names given to a repeatable, comma-separated flag; None when the flag was not given."""
    if values is None:
        return None
    names = [name.strip() for value in values for name in value.split(",") if name.strip()]
    if not names:
        raise TrainledgerError(f"{flag} needs at least one name, got {','.join(values)!r}")
    return names


def compute(args) -> dict:
    from trainledger.account.counting.matmul import matmul_flops, matmul_table
    from trainledger.specs.dtypes import get_dtype
    from trainledger.specs.hardware import get_gpu

    gpus = [get_gpu(name, "--gpu") for name in _names(args.gpu, "--gpu") or []] or None
    dtypes = [get_dtype(name, "--dtype") for name in _names(args.dtype, "--dtype") or DEFAULT_DTYPES]
    records = matmul_table(args.m, args.k, args.n, gpus, dtypes)
    if not records:
        raise TrainledgerError(f"none of the GPUs has a peak for dtype {', '.join(d.name for d in dtypes)} (--dtype); "
                               "see `trainledger hardware` for each GPU's dtypes")
    return {"m": args.m, "k": args.k, "n": args.n, "flops": matmul_flops(args.m, args.k, args.n),
            "dtypes": [d.name for d in dtypes], "results": records}


def render(result: dict, args) -> None:
    from rich import box

    dtypes = result["dtypes"]
    by_gpu: dict[str, dict[str, dict]] = {}
    for r in result["results"]:
        by_gpu.setdefault(r["gpu"], {})[r["dtype"]] = r
    rows = [[gpu, *(f"{format_seconds(cells[d]['ideal_time_s'])} ({cells[d]['bound'][0]})" if d in cells else "–"
                    for d in dtypes)] for gpu, cells in by_gpu.items()]
    m, k, n = result["m"], result["k"], result["n"]
    out = common.console()
    out.print(f"A[{m}×{k}] · B[{k}×{n}]: {format_flops(result['flops'])} FLOPs (2·m·k·n)")
    for d, r in {r["dtype"]: r for r in result["results"]}.items():
        out.print(f"  {d}: {format_bytes(r['bytes'])} moved (read A, B; write C), "
                  f"{r['arithmetic_intensity_flops_per_byte']:.0f} FLOPs/byte")
    table = common.table("Ideal time", ["gpu", *dtypes], rows)
    table.box, table.pad_edge, table.collapse_padding = box.SIMPLE_HEAD, False, True
    out.print(table)
    out.print("ideal time = max(FLOPs / dense peak, bytes / bandwidth) (roofline, Williams et al. 2009)\n"
              "(c) compute-bound, (m) memory-bound. Real kernels run slower: `trainledger bench` measures.")
