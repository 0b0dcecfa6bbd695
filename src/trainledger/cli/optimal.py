"""`trainledger optimal`: compute-optimal parameters and tokens for a FLOP budget or a GPU allocation."""

from __future__ import annotations

import argparse

from trainledger import units
from trainledger.cli import common
from trainledger.cli.interval import interval_line, range_text
from trainledger.cli.plan import duration, mfu_or_auto, print_table
from trainledger.errors import TrainledgerError

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
    parser.add_argument("--num-gpus", type=common.gpu_count, default=32, help="number of GPUs (default 32)")
    parser.add_argument("--days", type=duration("d"), default=14 * 86400.0, help="wall-clock time, e.g. 14, 14d or 2w (default 14 days)")
    parser.add_argument("--mfu", type=mfu_or_auto, default=0.5,
                        help="model FLOPs utilization in (0, 1], or 'auto': the MFU of the fastest layout (`trainledger "
                             "layout`) of a GPT-style model of the optimal size, iterated to a fixed point (default 0.5)")
    parser.add_argument("--seq-len", type=common.positive_int, default=2048,
                        help="tokens per sequence of the model --mfu auto lays out (default 2048, GPT-3's context)")
    common.add_precision_flag(parser, "amp-bf16", "the recipe --mfu auto lays out")
    common.add_optimizer_flag(parser)
    parser.add_argument("--dtype", default="bf16", help="dtype whose dense peak FLOP/s is used (default bf16)")
    parser.add_argument("--law", choices=("chinchilla-20", "approach3"), default="chinchilla-20", help="scaling law (default chinchilla-20)")
    parser.add_argument("--tokens-per-param", type=tokens_per_param, default=20.0,
                        help="tokens per parameter for chinchilla-20, in (0, 1e6] (default 20)")
    common.add_calibration_flag(parser)
    common.add_json_flag(parser)


def compute(args) -> dict:
    from trainledger.account.planning.plan import budget_flops, compute_optimal

    if args.budget_flops is not None:
        if args.mfu == "auto":
            raise TrainledgerError("--mfu auto needs GPUs × days: --budget-flops already fixes the budget")
        budget, source = args.budget_flops, "given --budget-flops"
        extra = {}
    else:
        gpu = common.resolve_gpu(args.gpu, calibration=args.calibration)
        peak = gpu.peak(args.dtype)
        layout_lines = []
        if args.mfu == "auto":
            args.mfu, layout_lines = auto_mfu(args, gpu, peak)
        budget = budget_flops(args.num_gpus, args.days, peak, args.mfu)
        source = (f"{args.num_gpus} × {gpu.name} × {args.days / 86400:g} days × {units.format_rate(peak)} "
                  f"({args.dtype} dense) × MFU {args.mfu:.3g}")
        extra = {"gpu": gpu.name, "num_gpus": args.num_gpus, "seconds": args.days, "peak_flops_per_s": peak, "mfu": args.mfu}
        if layout_lines:
            extra["layout"] = layout_lines[1]
            extra.update(auto_interval(layout_lines[1], args, gpu.name, budget))
    try:
        result = {**compute_optimal(budget, args.law, args.tokens_per_param), **extra}
    except TrainledgerError as error:   # a GPU budget below one parameter: name the flags it came from
        if args.budget_flops is not None or "--budget-flops" not in str(error):
            raise
        raise TrainledgerError(str(error).replace(f"--budget-flops {budget:g}",
                                                  f"--num-gpus × --days × --mfu = {budget:.3g} FLOPs")) from None
    law = (f"chinchilla-20: D = {args.tokens_per_param:g}·N, N = sqrt(C / {6 * args.tokens_per_param:g})"
           if args.law == "chinchilla-20" else "approach3: closed-form minimum of E + A/N^α + B/D^β under C = 6ND")
    if args.budget_flops is None and layout_lines:
        source += f"; {layout_lines[0]}"
    result["assumptions"] = [f"budget: {source}", "C = 6·N·D (training FLOPs, attention term ignored)", law,
                             "predicted_loss: Chinchilla Approach 3 fit (E=1.69, A=406.4, B=410.7, α=0.34, β=0.28), nats/token"]
    if args.law == "approach3" and args.tokens_per_param != 20.0:
        result["assumptions"].append(f"--tokens-per-param {args.tokens_per_param:g} not used: approach3 finds the ratio itself")
    if args.budget_flops is not None:
        result["assumptions"].append("--gpu, --num-gpus, --days, --mfu and --dtype not used: --budget-flops sets the budget")
    return result


def gpt_like(n_params: float, seq_len: int):
    """A GPT-3-style TransformerSpec of about n_params parameters: d_model = (128·N/12)^(1/3) rounded to 128,
    n_layers = d_model/128 (GPT-3 175B's aspect ratio), heads of 128, d_ff = 4·d_model, GPT-2 vocabulary."""
    from trainledger.account.memory.per_gpu import d_model_estimate
    from trainledger.specs.model import TransformerSpec
    d = max(128, int(round(d_model_estimate(n_params) / 128)) * 128)
    return TransformerSpec(name=f"gpt-like-{n_params:.3g}", vocab_size=50257, d_model=d, n_layers=max(1, d // 128),
                           n_heads=d // 128, d_ff=4 * d, max_seq_len=seq_len, pretrain_seq_len=seq_len,
                           position="learned", norm="layernorm", norm_bias=True, mlp="gelu", qkv_bias=True,
                           attn_out_bias=True, mlp_bias=True, tied_embeddings=True,
                           source="trainledger optimal --mfu auto: GPT-3-style shape for a parameter count")


def auto_mfu(args, gpu, peak: float) -> tuple[float, list[str]]:
    """(MFU, [assumption, layout]) for `optimal --mfu auto`: lay out the optimal-size model, recompute the budget, repeat."""
    from trainledger.account.planning.layout import search
    from trainledger.account.planning.plan import budget_flops, compute_optimal
    from trainledger.specs.run import Hardware, Run
    mfu, best, spec = 0.5, None, None
    for _ in range(6):
        n = compute_optimal(budget_flops(args.num_gpus, args.days, peak, mfu), args.law, args.tokens_per_param)["n_params"]
        spec = gpt_like(n, args.seq_len)
        run = Run().with_(global_batch_size=args.num_gpus, seq_len=args.seq_len, precision=args.precision,
                          optimizer=args.optimizer)
        best = search(spec, Hardware(gpu, args.num_gpus), run, top=1)["layouts"][0]
        done = abs(best["mfu"] - mfu) < 1e-3
        mfu = best["mfu"]
        if done:
            break
    line = (f"MFU {mfu:.3f} (--mfu auto): fastest layout of a GPT-style {spec.d_model}-wide, {spec.n_layers}-layer model "
            f"of the optimal size at seq {args.seq_len:,}, one sequence per GPU, {args.precision}: tp {best['tp']}, "
            f"pp {best['pp']}, cp {best['cp']}, dp {best['dp']}, ZeRO {best['zero']}, micro-batch {best['batch_size']}, "
            f"recompute {best['recompute']}")
    return mfu, [line, best]


def auto_interval(layout: dict, args, gpu_name: str, budget: float) -> dict:
    """The error bar of --mfu auto (cli/interval.py): the step of the chosen layout as the published runs most like
    it were off, and what it spans. A step s/(1 + e) runs at MFU·(1 + e), so the budget of the same GPUs × days
    spans budget·step/step_high … budget·step/step_low, and the compute-optimal size follows from each end
    (mfu_low/high, budget_flops_low/high, n_params_low/high, n_tokens_low/high)."""
    from trainledger.account.planning.plan import compute_optimal
    from trainledger.cli.interval import interval_of
    step = layout["step_seconds"]
    out = interval_of(step, args.num_gpus * args.seq_len, "trainledger", gpu_name, args.num_gpus)
    for end, step_end in (("low", out["step_seconds_high"]), ("high", out["step_seconds_low"])):
        budget_end = budget * step / step_end
        optimal = compute_optimal(budget_end, args.law, args.tokens_per_param)
        out.update({f"mfu_{end}": layout["mfu"] * step / step_end, f"budget_flops_{end}": budget_end,
                    f"n_params_{end}": optimal["n_params"], f"n_tokens_{end}": optimal["n_tokens"]})
    return out


def render(result: dict, args) -> None:
    rows = [
        ("budget", units.format_flops(result["budget_flops"]) + " FLOPs"),
        ("parameters", units.format_count(result["n_params"])),
        ("tokens", units.format_count(result["n_tokens"])),
        ("tokens per parameter", f"{result['tokens_per_param']:.1f}"),
        ("predicted loss", f"{result['predicted_loss']:.3f}"),
    ]
    if "interval_words" in result:   # --mfu auto: the error bar of its step (cli/interval.py)
        rows[0:3] = [
            ("budget", f"{units.format_flops(result['budget_flops'])} FLOPs (expect "
                       f"{range_text(result, 'budget_flops', units.format_flops)})"),
            ("parameters", f"{units.format_count(result['n_params'])} ({units.format_count(result['n_params_low'])} … "
                           f"{units.format_count(result['n_params_high'])})"),
            ("tokens", f"{units.format_count(result['n_tokens'])} ({units.format_count(result['n_tokens_low'])} … "
                       f"{units.format_count(result['n_tokens_high'])})")]
        rows.insert(3, ("MFU (--mfu auto)", f"{result['mfu']:.3f} ({result['mfu_low']:.3f} … {result['mfu_high']:.3f})"))
    print_table(f"Compute-optimal size ({result['law']})", rows, result["assumptions"])
    if "interval_words" in result:
        common.console().print(interval_line(
            "budget", f"{units.format_flops(result['budget_flops'])} FLOPs (MFU {result['mfu']:.3f}; "
                      f"{units.format_count(result['n_params'])} parameters; {units.format_count(result['n_tokens'])} tokens)",
            f"{range_text(result, 'budget_flops', units.format_flops)} FLOPs (MFU {result['mfu_low']:.3f} … "
            f"{result['mfu_high']:.3f}; {range_text(result, 'n_params', units.format_count)} parameters, "
            f"{range_text(result, 'n_tokens', units.format_count)} tokens)", result), soft_wrap=True)
