"""`trainledger fit`: the largest model whose states fit on N GPUs, and optionally the largest micro-batch of a model."""

from __future__ import annotations

import argparse

from trainledger import units
from trainledger.cli import common
from trainledger.cli.plan import model_of, nonnegative_bytes, print_table, seq_len_assumption, seq_len_warnings

HELP = "largest model that fits: memory per GPU / bytes per parameter under a precision recipe, optimizer and ZeRO stage"
DESCRIPTION = """Largest model that fits: max_params = usable memory per GPU / bytes per parameter per GPU.

Model states only (params, grads, master params, optimizer states; see specs/recipes.py). --zero 3
(default) shards every state over all --num-gpus GPUs, which is what CS336 Lecture 2 computes:
8 H100 × 80e9 B / 16 B per parameter (naive fp32 AdamW) = 4.0e10 parameters. --zero 0 replicates
the states on every GPU (plain data parallelism). Activations are not included; give --model (with
--seq-len) to also find the largest micro-batch for that model on one GPU.

The fine-tuning ladder: --model with both --seq-len and --batch-size also prices the rungs a fine-tuner climbs
(account/planning/ladder.py, in torchtune's order): full bf16 (AdamW) → + activation checkpointing → + chunked
loss (8 chunks) → + optimizer in backward → + activation offload → + 8-bit AdamW → LoRA (torchtune's defaults:
q,v,o and the MLP, rank 8, alpha 16; --lora-rank/--lora-alpha/--lora-targets change them) → QLoRA; with
--num-gpus > 1 the rungs above run data-parallel and FSDP (ZeRO-3), + CPU offload, sharded LoRA and QLoRA follow.
Each rung: peak memory per GPU, the reserve (the CUDA reserve unless --reserve is given), fits or not, tokens/s;
the fastest rung that fits is named. The ladder asks about the GPUs you have: --num-gpus defaults to 1 there.
JSON `ladder`: each rung with `run`, a document `step --config` and `memory --config` accept.

Defaults, and why: --precision fp32, the lecture's naive AdamW (4 + 4 + 4 + 4 = 16 B/param). For the
states alone that is also what amp-bf16 (the default of `memory` and `plan`) and mixed-bf16 cost with
AdamW, so the answer is the same; bf16 halves it. --zero 3 over all GPUs, as in `memory`.

examples:
  trainledger fit
  trainledger fit --precision mixed-bf16 --optimizer adam --zero 1 --num-gpus 64
  trainledger fit --gpu a100-40gb --num-gpus 1 --zero 0 --model gpt2 --seq-len 1024
  trainledger fit --model llama-3.1-8b --gpu rtx-4090 --seq-len 2048 --batch-size 2
"""


RUN_FLAGS = True        # cli/main.py merges --config and the run's flags (cli/run_flags.py) before compute()
HARDWARE_DEFAULTS = {"num_gpus": 8}     # after --config: the defaults of --gpu and --num-gpus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from trainledger.cli.run_flags import add_config_flags, add_run_flags, bind
    parser.add_argument("--gpu", default=None, help="accelerator whose memory is used (default h100: 80 GB)")
    parser.add_argument("--num-gpus", type=common.gpu_count, default=None, help="GPUs the states are sharded over (default 8)")
    parser.add_argument("--memory-per-gpu", type=common.positive_bytes, help="override the GPU's memory, e.g. 80GB or 80GiB")
    add_run_flags(parser, "fit", helps={
        "--precision": "precision recipe (default fp32: the lecture's naive AdamW; amp-bf16 and mixed-bf16 also keep "
                       "16 B/param)",
        "--zero": "ZeRO stage over --num-gpus ranks (default 3: everything sharded)",
        "--batch-size": "with --model: check this micro-batch (sequences per GPU) fits",
        "--seq-len": "context length for --model (default: the context it was pre-trained at)"})
    bind(parser.add_argument("--reserve", type=nonnegative_bytes, default=None,
                             help="bytes per GPU kept free, e.g. 4GiB (default 0)"), "--reserve", "fit")
    parser.add_argument("--model", help="also report the largest micro-batch of this model on one GPU (states sharded as above)")
    add_config_flags(parser)
    common.add_json_flag(parser)


def compute(args) -> dict:
    from trainledger.account.planning.plan import max_micro_batch, max_params
    from trainledger.errors import TrainledgerError
    from trainledger.specs.hardware import get_gpu

    from trainledger.cli.run_flags import asked, document_of, given
    from trainledger.cli.sanity import custom_memory_label
    given_gpu = args.gpu is not None
    derived = getattr(args, "_file_derived", None) or []     # what a saved run file decided itself is not asked
    wants_ladder = (args.model is not None and given(args, "batch.batch_size") and "batch.batch_size" not in derived
                    and (args.seq_len is not None or given(args, "batch.seq_len")) and "batch.seq_len" not in derived)
    if wants_ladder and "num_gpus" not in getattr(args, "_hardware_given", set()) and not (
            (getattr(args, "_file", None) or {}).get("hardware", {}).get("num_gpus")):
        args.num_gpus = 1            # the ladder asks about the GPU you have (--help)
    run = asked(args)
    gpu = get_gpu(args.gpu if args.gpu is not None else "h100")
    reserve = run.levers.reserve
    if isinstance(reserve, str):         # a run file's 'auto' or 'expandable': fit keeps back a size it is given
        raise TrainledgerError(f"fit keeps back a size per GPU (--reserve 4GiB, default 0), got {reserve!r} from "
                               "--config", "--reserve")
    from trainledger.specs.fp8 import check_gpu_supports
    check_gpu_supports(args.precision, gpu)
    memory = args.memory_per_gpu if args.memory_per_gpu is not None else gpu.memory_bytes
    label = custom_memory_label(gpu.name, args.memory_per_gpu, given_gpu)
    result = {"gpu": gpu.name if args.memory_per_gpu is None else ("custom" if not given_gpu else gpu.name),
              "gpu_label": label,
              **max_params(memory, args.num_gpus, args.precision, args.optimizer, args.zero, reserve)}
    result["assumptions"] = [
        f"model states only: precision {result['precision']} with {result['optimizer']} (--precision, --optimizer; "
        f"fp32 is the lecture's naive default), {result['bytes_per_param']:g} B/param unsharded",
        f"ZeRO stage {args.zero} over {args.num_gpus} GPU{'s' if args.num_gpus > 1 else ''} → {result['bytes_per_param_per_gpu']:.4g} B/param per GPU",
        "activations, CUDA context and fragmentation not included (use --reserve, or --model for a micro-batch)",
    ]
    if args.model is not None:
        spec, seq_len = model_of(args)
        from trainledger.specs.run import Hardware
        hardware = Hardware(gpu, memory_per_gpu_bytes=memory)
        # the states sharded as the ZeRO paper counts them (the question above), over --num-gpus data-parallel ranks
        run = run.with_(seq_len=seq_len, dp=args.num_gpus, impl="paper", batch_size=1)
        found = max_micro_batch(spec, hardware, run)
        result.update({"model": spec.name, "seq_len": seq_len, "max_batch_size": found["max_batch_size"],
                       "total_bytes_at_max_batch": found["memory_at_max"]["total_bytes"] if found["max_batch_size"] else None})
        if given(args, "batch.batch_size"):
            from trainledger.account.memory.per_gpu import memory_per_gpu
            m = memory_per_gpu(spec, hardware, run.with_(batch_size=args.batch_size))
            result.update({"batch_size": args.batch_size, "total_bytes": m["total_bytes"], "fits": m["fits"]})
        run = run.with_(batch_size=args.batch_size)
        result["assumptions"].insert(0, seq_len_assumption(spec, seq_len, args.seq_len))
        result["assumptions"].append(f"micro-batch search: {spec.name} at seq_len {seq_len:,}, activations from "
                                     f"account.memory.activations, recompute {args.recompute}, data parallel over {args.num_gpus}")
        if seq_len_warnings(spec, seq_len):
            result["warnings"] = seq_len_warnings(spec, seq_len)
    elif given(args, "batch.batch_size") or args.seq_len is not None:
        raise TrainledgerError("--batch-size and --seq-len need --model")
    result["run"] = document_of(args, run.with_(dp=args.num_gpus, impl="paper"))
    if wants_ladder:
        result.update(_ladder(args, spec, hardware, run))
    return result


def _ladder(args, spec, hardware, run) -> dict:
    """fit's `ladder` (account/planning/ladder.py): the rungs at the asked batch and sequence, each with its run file
    document; the reserve is the CUDA reserve ('auto') unless --reserve was given."""
    from trainledger.account.planning.ladder import ladder
    from trainledger.cli.run_flags import document_of, given
    from trainledger.specs.run import Hardware, Run
    base = Run().with_(batch_size=run.batch.batch_size, seq_len=run.batch.seq_len,
                       reserve=run.levers.reserve if given(args, "levers.reserve") else "auto")
    lora = {name: getattr(run.finetune, name) for name in ("lora_rank", "lora_alpha", "lora_targets")
            if given(args, f"finetune.{name}")}
    found = ladder(spec, Hardware(hardware.gpu, args.num_gpus, hardware.memory_per_gpu_bytes), base, lora)
    for rung in found["ladder"]:
        rung["run"] = document_of(args, rung["run"], args.num_gpus, derived=[])   # `step --config` takes it
    return {"ladder": found["ladder"], "fastest_fitting": found["fastest_fitting"],
            "first_fitting": found["first_fitting"], "ladder_num_gpus": found["num_gpus"]}


def render(result: dict, args) -> None:
    rows = [
        ("GPUs", f"{result['num_gpus']} × {result.get('gpu_label', result['gpu'])}"),
        ("memory per GPU", f"{units.format_bytes(result['memory_per_gpu_bytes'])} ({result['memory_per_gpu_bytes']:.4g} B)"),
        ("recipe", f"{result['precision']} + {result['optimizer']}, ZeRO {result['zero']}"),
        ("bytes per parameter", f"{result['bytes_per_param']:g}"),
        ("bytes per parameter per GPU", f"{result['bytes_per_param_per_gpu']:.4g}"),
        ("largest model", f"{units.format_count(result['max_params'])} ({result['max_params']:.3g})"),
    ]
    if "max_batch_size" in result:
        found = f"{result['max_batch_size']:,}"
        if result["max_batch_size"] == 0:
            found += " (even 1 sequence does not fit: more GPUs, --zero, --recompute or a shorter --seq-len)"
        rows.append((f"largest micro-batch of {result['model']} (T={result['seq_len']})", found))
    if "fits" in result:
        rows.append((f"batch {result['batch_size']} fits", f"{'yes' if result['fits'] else 'no'} ({units.format_bytes(result['total_bytes'])})"))
    print_table("Largest model that fits", rows, result["assumptions"])
    if "ladder" in result:
        render_ladder(result)


def render_ladder(result: dict) -> None:
    """The ladder as a table: rung, peak + reserve per GPU, fits, tokens/s; the fastest rung that fits named."""
    from rich.console import Console
    from rich.table import Table
    table = Table(title=f"What it takes to fit: {result['model']} on {result['ladder_num_gpus']} × "
                        f"{result.get('gpu_label', result['gpu'])} ({units.format_bytes(result['memory_per_gpu_bytes'])}),"
                        f" batch {result['batch_size']} × {result['seq_len']:,} tokens")
    for column in ("rung", "peak per GPU", "+ reserve", "fits", "tokens/s"):
        table.add_column(column, justify="left" if column == "rung" else "right")
    for rung in result["ladder"]:
        if rung["error"]:
            table.add_row(rung["label"], "—", "—", "refused", "—")
            continue
        mark = "yes" if rung["fits"] else "no"
        if rung["key"] == result["fastest_fitting"]:
            mark += " ← fastest that fits"
        table.add_row(rung["label"], units.format_bytes(rung["peak_bytes"]), units.format_bytes(rung["required_bytes"]),
                      mark, f"{rung['tokens_per_s']:,.0f}")
    console = Console()
    console.print(table)
    best = next((r for r in result["ladder"] if r["key"] == result["fastest_fitting"]), None)
    console.print(f"fastest rung that fits: {best['label']}" if best else
                  "no rung fits: more GPUs (--num-gpus), a shorter --seq-len or a smaller --batch-size")
    for rung in result["ladder"]:
        if rung["error"]:
            console.print(f"refused: {rung['label']}: {rung['error']}")
