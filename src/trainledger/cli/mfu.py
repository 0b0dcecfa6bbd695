"""`trainledger mfu`: a measured throughput (tokens/s) turned into MFU and HFU."""

from __future__ import annotations

import argparse

from trainledger import units
from trainledger.cli import common
from trainledger.cli.plan import ATTENTION_WORDS, load_transformer, print_table, seq_len_assumption, seq_len_warnings
from trainledger.errors import TrainledgerError

HELP = "MFU and HFU of a measured throughput: tokens/s of --model (or --params) on N GPUs"
DESCRIPTION = """MFU and HFU from a throughput you measured (PaLM, Chowdhery et al. 2022, App. B):

  MFU = tokens/s × model FLOPs per token / (num_gpus × peak FLOP/s)
  HFU = tokens/s × hardware FLOPs per token / (num_gpus × peak FLOP/s)

Model FLOPs per token are the training FLOPs of `trainledger flops` at --seq-len (every matmul incl. the LM
head, attention scores by --attention, backward = 2 × forward); hardware FLOPs add what --recompute
re-executes (selective: the attention core's forward; full: every layer's forward, Megatron-LM Eq. 3).
With --params N instead of --model: 6·N per token (attention ignored), 8·N with --recompute full.
The peak is the GPU's dense --dtype peak (`trainledger hardware`). Give the throughput of the whole job
(--tokens-per-s) or of one GPU (--tokens-per-s-per-gpu).

examples:
  trainledger mfu --model llama-3-8b --tokens-per-s-per-gpu 3000 --gpu h100
  trainledger mfu --params 70B --tokens-per-s 1.2M --num-gpus 1024 --recompute full
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    rate = parser.add_mutually_exclusive_group(required=True)
    rate.add_argument("--tokens-per-s", type=common.positive_count, help="measured training tokens per second of the whole job (all GPUs), e.g. 24K")
    rate.add_argument("--tokens-per-s-per-gpu", type=common.positive_count, help="measured training tokens per second of one GPU, e.g. 3000")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--model", help="preset name or Hugging Face config.json path")
    what.add_argument("--params", type=common.positive_count, help="parameter count, e.g. 8B (6·N FLOPs per token)")
    parser.add_argument("--gpu", default="h100", help="accelerator (`trainledger hardware`; default h100)")
    parser.add_argument("--num-gpus", type=common.gpu_count, default=1, help="GPUs the job runs on (default 1)")
    parser.add_argument("--dtype", default="bf16", help="dtype whose dense peak FLOP/s is the reference (default bf16)")
    parser.add_argument("--seq-len", type=common.positive_int, help="tokens per sequence of the run (default: the context the model was pre-trained at)")
    parser.add_argument("--attention", choices=("full", "causal"), default="full",
                        help="attention-score FLOPs over the full T×T (default, PaLM) or half of it (Megatron)")
    parser.add_argument("--recompute", choices=common.RECOMPUTE_CHOICES, default="none", help=common.RECOMPUTE_HELP)
    common.add_calibration_flag(parser)
    common.add_json_flag(parser)


def compute(args) -> dict:
    from trainledger.account.counting import flops as F
    gpu = common.resolve_gpu(args.gpu, calibration=args.calibration)
    peak = gpu.peak(args.dtype)
    if args.tokens_per_s is not None:
        tokens_per_s, tokens_per_s_per_gpu = args.tokens_per_s, args.tokens_per_s / args.num_gpus
    else:
        tokens_per_s, tokens_per_s_per_gpu = args.tokens_per_s_per_gpu * args.num_gpus, args.tokens_per_s_per_gpu
    warnings = []
    if args.model is not None:
        spec, seq_len = load_transformer(args.model, args.seq_len)
        model_flops = F.train_flops_per_token(spec, seq_len, args.attention)
        hardware_flops = F.hardware_flops_per_token(spec, seq_len, args.attention, args.recompute)
        settings = [seq_len_assumption(spec, seq_len, args.seq_len),
                    f"attention {args.attention}: {ATTENTION_WORDS[args.attention]} (--attention)",
                    f"model FLOPs per token of '{spec.name}' from `trainledger flops`; recompute {args.recompute} "
                    "adds to the hardware FLOPs only"]
        name = spec.name
        warnings += seq_len_warnings(spec, seq_len)
    else:
        if args.seq_len is not None:
            raise TrainledgerError("--seq-len needs --model (with --params the FLOPs are 6·N per token)")
        if args.recompute not in ("none", "full"):
            raise TrainledgerError(f"--recompute {args.recompute} needs --model: it recomputes parts of a block, which "
                                   "--params does not describe (use none or full)")
        model_flops = F.kaplan_train_flops_per_token(args.params)
        hardware_flops = model_flops * (8 / 6 if args.recompute == "full" else 1)
        seq_len, name = None, f"{units.format_count(args.params)} parameters"
        settings = ["6·N model FLOPs per token (Kaplan et al. 2020), attention ignored; full recompute adds one "
                    "forward (2·N): 8·N hardware FLOPs"]
    achieved = tokens_per_s_per_gpu * model_flops
    result = {
        "model": name, "seq_len": seq_len, "attention": args.attention, "recompute": args.recompute,
        "gpu": gpu.name, "dtype": args.dtype, "num_gpus": args.num_gpus, "peak_flops_per_s": peak,
        "tokens_per_s": tokens_per_s, "tokens_per_s_per_gpu": tokens_per_s_per_gpu,
        "model_flops_per_token": model_flops, "hardware_flops_per_token": hardware_flops,
        "model_flops_per_s_per_gpu": achieved, "hardware_flops_per_s_per_gpu": tokens_per_s_per_gpu * hardware_flops,
        "mfu": achieved / peak, "hfu": tokens_per_s_per_gpu * hardware_flops / peak,
        "predicted_mfu": None,
    }
    if args.model is not None:
        result.update(predicted(args, spec, seq_len, gpu, peak))
    result["assumptions"] = settings + [
        f"{gpu.name} dense {args.dtype} peak {units.format_rate(peak)} per GPU (no 2:4 sparsity) × {args.num_gpus:,} GPU{'s' if args.num_gpus > 1 else ''}",
        "MFU = tokens/s × model FLOPs per token / (GPUs × peak) (PaLM App. B); HFU uses the hardware FLOPs",
    ]
    if result["hfu"] > 1:
        warnings.append(f"HFU {result['hfu']:.2f} is above 1, more than the GPUs can do: is --tokens-per-s the whole "
                        "job's rate (or per GPU: --tokens-per-s-per-gpu), and are --num-gpus and --dtype right?")
    warnings += common.outlandish(num_gpus=args.num_gpus, mfu=result["mfu"] if result["mfu"] <= 1 else None)
    if warnings:
        result["warnings"] = warnings
    return result


def predicted(args, spec, seq_len: int, gpu, peak: float) -> dict:
    """predicted_mfu: the MFU `trainledger layout` predicts for the fastest layout of this model on these GPUs.

    One sequence per GPU per step, the run's --recompute (any when none), amp-fp16 for --dtype fp16 and amp-bf16
    otherwise; the MFU is re-expressed against the --dtype peak. None (with the reason) when nothing fits.
    """
    from trainledger.account.planning.layout import search
    from trainledger.errors import TrainledgerError
    precision = "amp-fp16" if args.dtype in ("fp16", "float16", "half") else "amp-bf16"
    try:
        from trainledger.specs.run import Hardware, Run
        run = Run().with_(global_batch_size=args.num_gpus, seq_len=seq_len, precision=precision, attention=args.attention)
        found = search(spec, Hardware(gpu, args.num_gpus), run, top=1,
                       recomputes=None if args.recompute == "none" else (args.recompute,))
    except TrainledgerError as error:
        return {"predicted_mfu": None, "predicted_note": str(error)}
    best = found["layouts"][0]
    from trainledger.specs.recipes import get_recipe
    scale = gpu.peak(get_recipe(precision).compute_dtype) / peak
    return {"predicted_mfu": best["mfu"] * scale, "predicted_layout": best,
            "predicted_note": f"`trainledger layout` on {args.num_gpus} × {gpu.name}, one sequence per GPU, {precision}: "
                              f"tp {best['tp']}, pp {best['pp']}, cp {best['cp']}, dp {best['dp']}, ZeRO {best['zero']}, "
                              f"micro-batch {best['batch_size']}, recompute {best['recompute']}"}


def render(result: dict, args) -> None:
    rows = [
        ("model", result["model"]),
        ("GPUs", f"{result['num_gpus']:,} × {result['gpu']} ({units.format_rate(result['peak_flops_per_s'])} {result['dtype']} peak)"),
        ("tokens/s (all GPUs)", units.format_count(result["tokens_per_s"])),
        ("tokens/s per GPU", units.format_count(result["tokens_per_s_per_gpu"])),
        ("model FLOPs per token", units.format_flops(result["model_flops_per_token"])),
        ("hardware FLOPs per token", units.format_flops(result["hardware_flops_per_token"])),
        ("model FLOP/s per GPU", units.format_rate(result["model_flops_per_s_per_gpu"])),
        ("MFU", f"{100 * result['mfu']:.1f}%"),
        (f"HFU (recompute {result['recompute']})", f"{100 * result['hfu']:.1f}%"),
    ]
    if result.get("predicted_mfu") is not None:
        rows.append(("predicted MFU (`trainledger layout`)", f"{100 * result['predicted_mfu']:.1f}%"))
    assumptions = result["assumptions"] + ([f"predicted: {result['predicted_note']}"] if result.get("predicted_note") else [])
    print_table("Model FLOPs utilization of a measured throughput", rows, assumptions)
