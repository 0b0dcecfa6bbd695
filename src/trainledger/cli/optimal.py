"""`trainledger optimal`: compute-optimal parameters and tokens for a FLOP budget or a GPU allocation."""

from __future__ import annotations

import argparse

from trainledger import units
from trainledger.cli import common
from trainledger.cli.plan import duration, print_table

HELP = "compute-optimal model size and tokens for a FLOP budget or GPUs × days × MFU (Chinchilla)"
DESCRIPTION = """Compute-optimal size (Hoffmann et al. 2022, "Chinchilla", arXiv:2203.15556), with C = 6·N·D.

--law chinchilla-20 (default): D = 20·N (change with --tokens-per-param), N = sqrt(C / 120).
--law approach3: minimise the fitted L(N, D) = 1.69 + 406.4/N^0.34 + 410.7/D^0.28 under C = 6ND.
The budget is --budget-flops, or --num-gpus × --days × peak × --mfu. No flags: the lecture's
question, 32 H100 for 2 weeks at MFU 0.5.

examples:
  trainledger optimal
  trainledger optimal --budget-flops 5.76e23 --law approach3
  trainledger optimal --gpu a100 --num-gpus 256 --days 30 --mfu 0.4
"""


def tokens_per_param(text: str) -> float:
    """A tokens-per-parameter ratio in (0, 1e6]: beyond that N = sqrt(C / (6·ratio)) underflows to nothing useful."""
    value = common.positive_float(text)
    if value > 1e6:
        raise argparse.ArgumentTypeError(f"must be in (0, 1e6], got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--budget-flops", type=common.positive_count, help="training budget in FLOPs, e.g. 1e22 (overrides the GPU flags)")
    parser.add_argument("--gpu", default="h100", help="accelerator (default h100)")
    parser.add_argument("--num-gpus", type=common.positive_int, default=32, help="number of GPUs (default 32)")
    parser.add_argument("--days", type=duration("d"), default=14 * 86400.0, help="wall-clock time, e.g. 14, 14d or 2w (default 14 days)")
    parser.add_argument("--mfu", type=common.fraction, default=0.5, help="model FLOPs utilization in (0, 1] (default 0.5)")
    parser.add_argument("--dtype", default="bf16", help="dtype whose dense peak FLOP/s is used (default bf16)")
    parser.add_argument("--law", choices=("chinchilla-20", "approach3"), default="chinchilla-20", help="scaling law (default chinchilla-20)")
    parser.add_argument("--tokens-per-param", type=tokens_per_param, default=20.0,
                        help="tokens per parameter for chinchilla-20, in (0, 1e6] (default 20)")
    common.add_json_flag(parser)


def compute(args) -> dict:
    from trainledger.account.plan import budget_flops, compute_optimal
    from trainledger.specs.hardware import get_gpu

    if args.budget_flops is not None:
        budget, source = args.budget_flops, "given --budget-flops"
        extra = {}
    else:
        gpu = get_gpu(args.gpu)
        peak = gpu.peak(args.dtype)
        budget = budget_flops(args.num_gpus, args.days, peak, args.mfu)
        source = (f"{args.num_gpus} × {gpu.name} × {args.days / 86400:g} days × {units.format_rate(peak)} "
                  f"({args.dtype} dense) × MFU {args.mfu}")
        extra = {"gpu": gpu.name, "num_gpus": args.num_gpus, "seconds": args.days, "peak_flops_per_s": peak, "mfu": args.mfu}
    result = {**compute_optimal(budget, args.law, args.tokens_per_param), **extra}
    law = (f"chinchilla-20: D = {args.tokens_per_param:g}·N, N = sqrt(C / {6 * args.tokens_per_param:g})"
           if args.law == "chinchilla-20" else "approach3: closed-form minimum of E + A/N^α + B/D^β under C = 6ND")
    result["assumptions"] = [f"budget: {source}", "C = 6·N·D (training FLOPs, attention term ignored)", law,
                             "predicted_loss: Chinchilla Approach 3 fit (E=1.69, A=406.4, B=410.7, α=0.34, β=0.28), nats/token"]
    if args.law == "approach3" and args.tokens_per_param != 20.0:
        result["assumptions"].append(f"--tokens-per-param {args.tokens_per_param:g} not used: approach3 finds the ratio itself")
    if args.budget_flops is not None:
        result["assumptions"].append("--gpu, --num-gpus, --days, --mfu and --dtype not used: --budget-flops sets the budget")
    return result


def render(result: dict, args) -> None:
    rows = [
        ("budget", units.format_flops(result["budget_flops"]) + " FLOPs"),
        ("parameters", units.format_count(result["n_params"])),
        ("tokens", units.format_count(result["n_tokens"])),
        ("tokens per parameter", f"{result['tokens_per_param']:.1f}"),
        ("predicted loss", f"{result['predicted_loss']:.3f}"),
    ]
    print_table(f"Compute-optimal size ({result['law']})", rows, result["assumptions"])
