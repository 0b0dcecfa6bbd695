"""`trainledger layout`: the fastest parallel layouts of --model on --num-gpus GPUs that fit in memory."""

from __future__ import annotations

import argparse
import sys

from trainledger import units
from trainledger.cli import common
from trainledger.cli.interval import interval_line, interval_of, range_text
from trainledger.cli.plan import model_of, seq_len_assumption, seq_len_warnings
from trainledger.cli import launch_args
from trainledger.cli.launch import KINDS, launch_texts
from trainledger.cli.reserve import near_limit_warning
from trainledger.errors import TrainledgerError

HELP = "fastest TP/SP/PP/interleave/CP/DP/ZeRO/micro-batch/recompute layouts of --model that fit on --num-gpus GPUs"
DESCRIPTION = """Searches tensor (+ sequence) parallelism, pipeline stages and interleaving, context parallelism,
data parallelism with ZeRO 0-3, the micro-batch and recomputation (account/planning/layout.py) for the layouts with the
shortest predicted step (account/time/step.py, as `trainledger step` prints) among those whose memory per GPU
(account/memory/per_gpu.py, as `trainledger memory` prints) fits the GPU. For each layout only the lightest
recomputation that fits is timed (recomputation costs time and only saves memory).

examples:
  trainledger layout --model gpt2 --gpu h100 --num-gpus 8 --global-batch-size 64
  trainledger layout --model llama-3-8b --gpu h100 --num-gpus 16 --launch slurm > job.sbatch
  trainledger layout --model llama-3-70b --gpu h100 --num-gpus 64 --launch slurm --rank 2 --tokens 100B --time 2d
  trainledger layout --model gpt3-175b --gpu a100 --num-gpus 64 --global-batch-size 64 --seq-len 2048 \\
      --precision mixed-fp16 --optimizer adam --framework megatron --no-flash
"""


ALL_LAYOUTS = 1 << 30     # search(top=...) that keeps every timed layout


RUN_FLAGS = True        # cli/main.py merges --config and the run's flags (cli/run_flags.py) before compute()
HARDWARE_DEFAULTS = {"gpu": "h100", "num_gpus": 8}     # after --config: the defaults of --gpu and --num-gpus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from trainledger.cli.run_flags import add_config_flags, add_run_flags
    parser.add_argument("--model", help="preset name or Hugging Face config.json path")
    parser.add_argument("--gpu", default=None, help="accelerator (`trainledger hardware`; default h100)")
    parser.add_argument("--num-gpus", type=common.gpu_count, default=None, help="GPUs of the job (default 8)")
    add_run_flags(parser, "layout", helps={"--global-batch-size": "sequences per optimizer step (default: one per GPU)"})
    parser.add_argument("--top", type=common.positive_int, default=5, help="how many layouts to list (default 5)")
    parser.add_argument("--memory-per-gpu", type=common.positive_bytes, help="override the GPU's memory, e.g. 80GB")
    add_config_flags(parser)
    common.add_calibration_flag(parser)
    common.add_hardware_flags(parser)
    parser.add_argument("--launch", choices=KINDS, type=str.lower,
                        help="print, instead of the table, what runs a layout with `trainledger train`: the fastest "
                             "it implements, or --rank N / a --config candidate; torchrun = the line to start on each "
                             "node, slurm = an sbatch script; with the training settings (cli/launch.py; both in "
                             "--json as launch)")
    launch_args.add_arguments(parser)
    common.add_json_flag(parser)


def compute(args) -> dict:
    from trainledger.account.planning.layout import search
    from trainledger.cli.run_flags import asked, document_of, hardware_of
    from trainledger.specs.run_checks import default_precision

    if args.model is None:
        raise TrainledgerError("layout needs --model (a preset or a config.json), or --config FILE with a [model]",
                               "--model")
    asked_settings = launch_args.asked(args)             # (--lr, --steps... without --launch: one line)
    common.check_links_before_calibrating(args, args.num_gpus)      # before this machine is measured
    gpu = common.apply_hardware_flags(common.resolve_gpu(args.gpu, calibration=args.calibration), args)
    spec, seq_len = model_of(args)
    run = asked(args)
    global_batch = run.batch.global_batch_size if run.batch.global_batch_size is not None else args.num_gpus
    precision = run.numerics.precision if run.numerics.precision is not None else default_precision(gpu)
    hardware = hardware_of(args, gpu, args.num_gpus)
    found = search(spec, hardware, run.with_(seq_len=seq_len, global_batch_size=global_batch, precision=precision),
                   top=ALL_LAYOUTS if args.launch else args.top)      # --launch looks past the table for one train runs
    k = run.kernels
    capacity = hardware.memory_bytes
    result = {"model": spec.name, "gpu": gpu.name, "num_gpus": args.num_gpus, "global_batch_size": global_batch,
              "seq_len": seq_len, "precision": precision, "optimizer": run.numerics.optimizer, "flash": k.flash,
              "framework": k.framework, "memory_per_gpu_bytes": capacity, **found}
    result["assumptions"] = [
        seq_len_assumption(spec, seq_len, None if seq_len == spec.default_seq_len else seq_len),
        f"global batch {units.count_of(global_batch, 'sequence')}{' (one per GPU)' if global_batch == args.num_gpus else ''}; "
        f"{precision} + {run.numerics.optimizer}; flash {'on' if k.flash else 'off'}; framework {k.framework}"
        + ("; the cross-entropy on the 16-bit logits (--no-loss-upcast)" if not k.loss_upcast else "")
        + ("; torch.compile" if k.compile else "")
        + (f"; device measured by {args.calibration}" if args.calibration else ""),
        f"searched {found['considered']} layouts, {found['fitting']} fit in {units.format_bytes(capacity)} "
        f"(account/memory/per_gpu.py), {found['timed']} timed with interleaving (account/time/step.py)",
        "memory/GPU = the peak of a training step; it fits when peak + reserve <= memory. Reserve: "
        + (f"--reserve {units.format_bytes(run.levers.reserve) if isinstance(run.levers.reserve, float) else run.levers.reserve}"
           if run.levers.reserve != "auto" else "by default what a CUDA process "
           "holds besides its tensors (CUDA context, cuBLAS workspaces, 10% of the peak for the caching allocator)"),
        "times are the model's predictions (`trainledger step` explains one); layouts within a few percent are "
        "equal within its accuracy",
    ]
    runs = [layout["run"] for layout in found["layouts"]]     # (specs.run.Run values, before they become documents)
    for layout in found["layouts"]:           # the error bar of each time (account/validation/interval.py)
        layout.update(interval_of(layout["step_seconds"], global_batch * seq_len, k.framework, gpu.name,
                                  args.num_gpus, moe=spec.is_moe))
        layout["run"] = document_of(args, layout["run"], args.num_gpus, derived=[])   # `step --config` takes it as it is
    if found["layouts"]:
        result.update({k: v for k, v in found["layouts"][0].items() if k.startswith(("step_seconds_", "tokens_per_s_",
                                                                                    "interval_"))})
        result["run"] = found["layouts"][0]["run"]
    if args.launch:     # search() raises when none fits
        from trainledger.account.planning.launch_settings import settings
        ranked = found["layouts"]
        pinned = launch_args.pinned_rank(args, ranked, run)         # a --config candidate's layout
        result["launch"] = launch_texts(
            result, ranked, model=args.model, gpus_per_node=gpu.gpus_per_node, compile_model=k.compile,
            rank=pinned or args.launch_rank, cpus_per_task=args.launch_cpus_per_task,
            settings_of=lambda rank: settings(spec, hardware, runs[rank - 1], ranked[rank - 1], asked_settings))
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
        out.print(interval_line("step of #1:", units.format_seconds(best["step_seconds"]), range_text(best), best)
                  if "interval_words" in best else f"step of #1: {units.format_seconds(best['step_seconds'])}",
                  soft_wrap=True)
        out.print(f"bottleneck of #1: {result['layouts'][0]['bottleneck']}", soft_wrap=True)
