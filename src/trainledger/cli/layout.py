"""`trainledger layout`: the fastest parallel layouts of --model on --num-gpus GPUs that fit in memory."""

from __future__ import annotations

import argparse
import sys

from trainledger import units
from trainledger.cli import common
from trainledger.cli.interval import interval_of, with_interval
from trainledger.cli.plan import load_transformer, seq_len_assumption, seq_len_warnings
from trainledger.cli.launch import KINDS, launch_texts
from trainledger.cli.reserve import add_reserve_flag, near_limit_warning, reserve_of

HELP = "fastest TP/SP/PP/interleave/CP/DP/ZeRO/micro-batch/recompute layouts of --model that fit on --num-gpus GPUs"
DESCRIPTION = """Searches tensor (+ sequence) parallelism, pipeline stages and interleaving, context parallelism,
data parallelism with ZeRO 0-3, the micro-batch and recomputation (account/planning/layout.py) for the layouts with the
shortest predicted step (account/time/step.py, as `trainledger step` prints) among those whose memory per GPU
(account/memory/per_gpu.py, as `trainledger memory` prints) fits the GPU. For each layout only the lightest
recomputation that fits is timed (recomputation costs time and only saves memory).

examples:
  trainledger layout --model gpt2 --gpu h100 --num-gpus 8 --global-batch-size 64
  trainledger layout --model llama-3-8b --gpu h100 --num-gpus 16 --launch slurm > job.sbatch
  trainledger layout --model gpt3-175b --gpu a100 --num-gpus 64 --global-batch-size 64 --seq-len 2048 \\
      --precision mixed-fp16 --optimizer adam --framework megatron --no-flash
"""


ALL_LAYOUTS = 1 << 30     # search(top=...) that keeps every timed layout


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from trainledger.cli.step import add_model_flags
    parser.add_argument("--model", required=True, help="preset name or Hugging Face config.json path")
    parser.add_argument("--gpu", default="h100", help="accelerator (`trainledger hardware`; default h100)")
    parser.add_argument("--num-gpus", type=common.positive_int, default=8, help="GPUs of the job (default 8)")
    parser.add_argument("--global-batch-size", type=common.positive_int, default=None,
                        help="sequences per optimizer step (default: one per GPU)")
    parser.add_argument("--seq-len", type=common.positive_int, help="tokens per sequence (default: the context the model was pre-trained at)")
    common.add_precision_flag(parser, "amp-bf16", "PyTorch autocast, fp32 weights and states")
    common.add_optimizer_flag(parser)
    parser.add_argument("--flash", action=argparse.BooleanOptionalAction, default=True,
                        help="flash attention (default on)")
    common.add_loss_upcast_flag(parser)
    parser.add_argument("--top", type=common.positive_int, default=5, help="how many layouts to list (default 5)")
    parser.add_argument("--memory-per-gpu", type=common.positive_bytes, help="override the GPU's memory, e.g. 80GB")
    add_reserve_flag(parser)
    add_model_flags(parser)
    common.add_compile_flag(parser)
    common.add_calibration_flag(parser)
    common.add_hardware_flags(parser)
    parser.add_argument("--launch", choices=KINDS, type=str.lower,
                        help="print, instead of the table, what runs the fastest listed layout that `trainledger "
                             "train` implements: torchrun = the line to start on each node, slurm = an sbatch script "
                             "(cli/launch.py; both in --json as launch)")
    common.add_json_flag(parser)


def compute(args) -> dict:
    from trainledger.account.planning.layout import search

    gpu = common.apply_hardware_flags(common.resolve_gpu(args.gpu, calibration=args.calibration), args)
    spec, seq_len = load_transformer(args.model, args.seq_len)
    global_batch = args.global_batch_size if args.global_batch_size is not None else args.num_gpus
    found = search(spec, gpu, num_gpus=args.num_gpus, global_batch_size=global_batch, seq_len=seq_len,
                   precision=args.precision, optimizer=args.optimizer, flash=args.flash, attention=args.attention,
                   framework=args.framework, attention_kernel=args.attention_kernel,
                   top=ALL_LAYOUTS if args.launch else args.top,      # --launch looks past the table for one train runs
                   memory_per_gpu_bytes=args.memory_per_gpu, compiled=args.compile,
                   reserve_bytes=reserve_of(args, gpu), loss_upcast=args.loss_upcast)
    capacity = args.memory_per_gpu if args.memory_per_gpu is not None else gpu.memory_bytes
    result = {"model": spec.name, "gpu": gpu.name, "num_gpus": args.num_gpus, "global_batch_size": global_batch,
              "seq_len": seq_len, "precision": args.precision, "optimizer": args.optimizer, "flash": args.flash,
              "framework": args.framework, "memory_per_gpu_bytes": capacity, **found}
    result["assumptions"] = [
        seq_len_assumption(spec, seq_len, args.seq_len),
        f"global batch {units.count_of(global_batch, 'sequence')}{' (default: one per GPU)' if args.global_batch_size is None else ''}; "
        f"{args.precision} + {args.optimizer}; flash {'on' if args.flash else 'off'}; framework {args.framework}"
        + ("; the cross-entropy on the 16-bit logits (--no-loss-upcast)" if not args.loss_upcast else "")
        + ("; torch.compile" if args.compile else "")
        + (f"; device measured by {args.calibration}" if args.calibration else ""),
        f"searched {found['considered']} layouts, {found['fitting']} fit in {units.format_bytes(capacity)} "
        f"(account/memory/per_gpu.py), {found['timed']} timed with interleaving (account/time/step.py)",
        "memory/GPU = the peak of a training step; it fits when peak + reserve <= memory. Reserve: "
        + ("--reserve" if args.reserve is not None else "by default what a CUDA process holds besides its tensors "
           "(CUDA context, cuBLAS workspaces, 10% of the peak for the caching allocator)"),
        "times are the model's predictions (`trainledger step` explains one); layouts within a few percent are "
        "equal within its accuracy",
    ]
    for layout in found["layouts"]:           # the error bar of each time (account/validation/interval.py)
        layout.update(interval_of(layout["step_seconds"], global_batch * seq_len, args.framework, gpu.name,
                                  args.num_gpus, moe=spec.is_moe))
    if found["layouts"]:
        result.update({k: v for k, v in found["layouts"][0].items() if k.startswith(("step_seconds_", "tokens_per_s_",
                                                                                    "interval_"))})
    if args.launch:     # search() raises when none fits
        result["launch"] = launch_texts(result, found["layouts"], model=args.model, gpus_per_node=gpu.gpus_per_node,
                                        compile_model=args.compile)
        result["layouts"] = found["layouts"][:args.top]
    warnings = seq_len_warnings(spec, seq_len) + common.outlandish(num_gpus=args.num_gpus)
    if found["layouts"] and found["layouts"][0]["near_limit"]:
        best = found["layouts"][0]
        warnings.append(near_limit_warning("layout #1", best["memory_bytes"], best["reserve_bytes"], capacity))
    if warnings:
        result["warnings"] = warnings
    return result


def render(result: dict, args) -> None:
    if args.launch:         # the script alone, so that `> job.sbatch` keeps it; warnings go to stderr
        for warning in result.get("warnings", []):
            print(f"warning: {warning}", file=sys.stderr)
        print(result["launch"][args.launch], end="")
        return
    out = common.console()
    out.print(f"Fastest layouts of {result['model']} on {result['num_gpus']} × {result['gpu']}", style="bold")
    for line in result["assumptions"]:
        out.print(f"- {line}", style="dim", soft_wrap=True)
    # the ep column only where expert parallelism is in play (a dense model's layouts all have ep 1)
    with_ep = any(r.get("ep", 1) > 1 for r in result["layouts"])
    with_etp = any(r.get("etp", r["tp"]) != r["tp"] for r in result["layouts"])     # MoE Parallel Folding
    rows = []
    for i, r in enumerate(result["layouts"], 1):
        rows.append([i, r["tp"], "yes" if r["sp"] else "no", r["pp"], r["interleave"], r["cp"], r["dp"],
                     *([r.get("ep", 1)] if with_ep else []), *([r.get("etp", r["tp"])] if with_etp else []), r["zero"], r["batch_size"], r["recompute"],
                     units.format_seconds(r["step_seconds"]), f"{100 * r['mfu']:.1f}%", units.format_bytes(r["memory_bytes"])])
    from rich import box
    columns = ["#", "tp", "sp", "pp", "v", "cp", "dp", *(["ep"] if with_ep else []), *(["etp"] if with_etp else []), "zero", "micro", "recompute", "step",
               "MFU", "memory/GPU"]
    table = common.table(None, columns, rows, "v: interleaved chunks per GPU; micro: micro-batch per GPU"
                         + ("; ep: expert-parallel ranks" if with_ep else "")
                         + ("; etp: expert tensor-parallel ranks (MoE Parallel Folding)" if with_etp else ""))
    table.box, table.pad_edge, table.collapse_padding = box.SIMPLE_HEAD, False, True
    out.print(table)
    if result["layouts"]:
        best = result["layouts"][0]
        out.print(f"step of #1: {with_interval(units.format_seconds(best['step_seconds']), best)}", soft_wrap=True)
        out.print(f"bottleneck of #1: {result['layouts'][0]['bottleneck']}", soft_wrap=True)
