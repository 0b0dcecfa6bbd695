"""`trainledger plan`: how long training takes, and how many GPUs meet a deadline.

Also holds the small helpers the planning commands share (a duration type, model loading, a
two-column table), so each command module stays a page long. No formulas here: they live in account/.
"""

from __future__ import annotations

import argparse

from trainledger import units
from trainledger.cli import common
from trainledger.errors import TrainledgerError

HELP = "time to train: FLOPs, days and GPU-hours for a model (or parameter count) on N GPUs"
DESCRIPTION = """Time to train: seconds = train FLOPs / (num_gpus × peak FLOP/s × MFU).

With --params N the FLOPs are 6·N per token (Kaplan et al. 2020; CS336 Lecture 2). With --model the
FLOPs per token are the model's training FLOPs at --seq-len (every matmul incl. the LM head and the
attention scores, backward = 2 × forward; see `trainledger flops`).
No flags: the lecture's question, 70B parameters on 15T tokens on 1024 H100 at MFU 0.5 (~143.9 days).

examples:
  trainledger plan
  trainledger plan --model llama-2-7b --tokens 2T --gpu a100 --num-gpus 512 --mfu 0.4
  trainledger plan --params 70B --tokens 15T --deadline 30d
"""


def duration(default_unit: str):
    """An argparse type for a positive duration in seconds: '14d', '2w', '36h'; a bare number is in `default_unit`."""
    def convert(text):
        try:
            value = units.parse_seconds(text, default_unit=default_unit)
        except TrainledgerError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be a positive duration like 14d or 2w, got {text!r}")
        return value
    convert.__name__ = "duration"
    return convert


def nonnegative_bytes(text: str) -> float:
    """An argparse type for a size that may be 0: '0', '2GiB', '500MB'."""
    try:
        value = units.parse_bytes(text)
    except TrainledgerError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative size like 2GiB, got {text!r}")
    return value


def load_transformer(name: str, seq_len: int | None, flag: str = "--model"):
    """(spec, seq_len) for --model and --seq-len: seq_len defaults to the model's context length.

    A --seq-len longer than a learned position table is an error (the model cannot run it).
    """
    from trainledger.specs import get_model
    spec = get_model(name, flag)
    max_len = getattr(spec, "max_seq_len", None)
    if seq_len is None:
        seq_len = max_len or 1
    if max_len and getattr(spec, "position", None) == "learned" and seq_len > max_len:
        raise TrainledgerError(f"--seq-len {seq_len} exceeds the {max_len} learned positions of '{spec.name}'")
    return spec, seq_len


def print_table(title: str, rows: list[tuple[str, str]], assumptions: list[str]) -> None:
    """A two-column table of quantities with the assumptions as its caption."""
    out = common.console()
    out.print(common.table(title, ["quantity", "value"], rows))
    for line in assumptions:
        out.print(f"- {line}", style="dim", soft_wrap=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--model", help="preset name or Hugging Face config.json path (train FLOPs per token at --seq-len)")
    what.add_argument("--params", type=common.positive_count, help="parameter count, e.g. 70B (6·N FLOPs per token; default 70B)")
    parser.add_argument("--tokens", type=common.positive_count, default=15e12, help="training tokens, e.g. 15T (default 15T)")
    parser.add_argument("--gpu", default="h100", help="accelerator (`trainledger hardware`; default h100)")
    parser.add_argument("--num-gpus", type=common.positive_int, default=1024, help="number of GPUs (default 1024)")
    parser.add_argument("--mfu", type=common.fraction, default=0.5, help="model FLOPs utilization in (0, 1] (default 0.5)")
    parser.add_argument("--dtype", default="bf16", help="dtype whose dense peak FLOP/s is used (default bf16)")
    parser.add_argument("--seq-len", type=common.positive_int, help="context length for --model (default: the model's)")
    parser.add_argument("--attention", choices=("full", "causal"), default="full",
                        help="attention-score FLOPs over the full T×T (default) or half of it")
    parser.add_argument("--deadline", type=duration("d"), help="also report GPUs needed to finish within this time, e.g. 30d, 2w (bare number = days)")
    common.add_json_flag(parser)


def compute(args) -> dict:
    from trainledger.account import flops as F
    from trainledger.account.plan import gpus_needed, training_time
    from trainledger.specs.hardware import get_gpu

    gpu = get_gpu(args.gpu)
    peak = gpu.peak(args.dtype)
    if args.model is not None:
        from trainledger.account.params import param_counts
        spec, seq_len = load_transformer(args.model, args.seq_len)
        n_params = param_counts(spec)["n_params"]
        flops_per_token = F.train_flops_per_token(spec, seq_len, args.attention)
        convention = (f"train FLOPs per token of '{spec.name}' at seq_len {seq_len}: 3 × forward, every matmul "
                      f"incl. LM head, {args.attention} attention scores (`trainledger flops`)")
    else:
        if args.seq_len is not None:
            raise TrainledgerError("--seq-len needs --model (with --params the FLOPs are 6·N per token)")
        n_params, seq_len = (args.params if args.params is not None else 70e9), None
        flops_per_token = F.kaplan_train_flops_per_token(n_params)
        convention = "6·N FLOPs per token (Kaplan et al. 2020; CS336 Lecture 2), attention-score FLOPs excluded"
    if args.tokens < 1:
        raise TrainledgerError(f"--tokens must be at least 1 token, got {args.tokens:g}")
    if n_params < 1:
        raise TrainledgerError(f"--params must be at least 1 parameter, got {n_params:g}")
    total = flops_per_token * args.tokens
    result = {
        "n_params": n_params, "n_tokens": args.tokens, "flops_per_token": flops_per_token, "train_flops": total,
        "gpu": gpu.name, "dtype": args.dtype, "num_gpus": args.num_gpus, "peak_flops_per_s": peak, "mfu": args.mfu,
        "seq_len": seq_len,
        **training_time(total, args.num_gpus, peak, args.mfu),
    }
    if args.model is None and args.attention != "full":
        result_note = f"--attention {args.attention} not used: with --params the FLOPs are 6·N per token (no attention term)"
    else:
        result_note = None
    if args.deadline is not None:
        result["deadline_seconds"] = args.deadline
        result["gpus_needed"] = gpus_needed(total, args.deadline, peak, args.mfu)
    result["assumptions"] = [
        convention,
        f"{gpu.name} dense {args.dtype} peak {units.format_rate(peak)} (no 2:4 sparsity), sustained at MFU {args.mfu}",
        "seconds = train_flops / (num_gpus × peak × mfu); no restarts, evaluation or data-loading stalls",
    ]
    if result_note:
        result["assumptions"].append(result_note)
    return result


def render(result: dict, args) -> None:
    rows = [
        ("parameters", units.format_count(result["n_params"])),
        ("tokens", units.format_count(result["n_tokens"])),
        ("FLOPs per token", units.format_flops(result["flops_per_token"])),
        ("training FLOPs", units.format_flops(result["train_flops"])),
        ("GPUs", f"{result['num_gpus']} × {result['gpu']}"),
        ("peak per GPU", units.format_rate(result["peak_flops_per_s"])),
        ("MFU", f"{result['mfu']:g}"),
        ("FLOPs per day", units.format_flops(result["flops_per_day"])),
        ("time", f"{result['train_days']:.2f} days" if result["train_days"] >= 1 else units.format_seconds(result["train_seconds"])),
        ("GPU-hours", units.format_count(result["gpu_hours"])),
    ]
    if "gpus_needed" in result:
        rows.append((f"GPUs for {units.format_seconds(result['deadline_seconds'])}", f"{result['gpus_needed']:,}"))
    print_table("Time to train", rows, result["assumptions"])

