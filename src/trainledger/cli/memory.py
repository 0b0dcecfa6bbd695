"""`trainledger memory`: bytes per GPU of a training run by named part, and whether it fits."""

from __future__ import annotations

import argparse

from trainledger import units
from trainledger.cli import common
from trainledger.cli.plan import model_of, print_table, seq_len_assumption, seq_len_warnings

DEFAULT_ZERO = 3   # as in `fit`: FSDP's full shard over --dp ranks (nothing sharded at the default --dp 1)

HELP = "bytes per GPU of --model or --params: params, grads, master params, optimizer states, activations"
DESCRIPTION = """Bytes per GPU by named part (account/memory/per_gpu.py), under a precision recipe and sharding.

Model states: bytes per parameter of --precision × --optimizer (specs/recipes.py), placed by --pp
(heaviest pipeline stage), --tp (Megatron-sharded matrices and vocabulary) and ZeRO --zero over --dp
ranks (ZeRO Sec. 3.1), dp = --num-gpus / (tp · pp) as in `step` (--dp, the same count, also accepted). Activations: what our torch Transformer saves for backward at --batch-size ×
--seq-len (account/memory/activations.py); with --params only, activations are not modelled (0).
total_bytes is the sum of the parts; peak_bytes what the GPU holds at the busiest moment of a training step
after the first (optimizer states through forward and backward, the loss's fp32 logits-sized buffers at the
start of backward, the optimizer's temporary); `fits` = peak + --reserve <= the GPU's memory. --reserve
defaults to what a CUDA process holds besides its tensors (context, cuBLAS workspaces, the caching
allocator's cache: account/memory/per_gpu.py, with sources).

Defaults, and why: --precision amp-bf16 (PyTorch autocast with fp32 weights and states, what a GPU run
of `trainledger train --precision amp-bf16` does; AdamW 16 B/param as for fp32 and mixed-bf16, with
16-bit activations); --seq-len the context the model was pre-trained at (8192 for llama-3.1-405b, not
its 128K position range); --batch-size 1 micro-batch per GPU; --zero 3 over the data-parallel ranks, as in
`fit` (FSDP's full shard; on one GPU, the default, nothing is sharded; --zero 0 for plain DDP replicas).

recipes (bytes per parameter with AdamW: params + grads + master + 2 states):
  fp32 4+4+0+8 = 16      amp-bf16 / amp-fp16 4+4+0+8 = 16 (16-bit activations)
  mixed-bf16 / mixed-fp16 2+2+4+8 = 16 (ZeRO's 2+2+12)      bf16 2+2+0+4 = 8

examples:
  trainledger memory --model gpt2 --batch-size 8 --seq-len 1024
  trainledger memory --params 7.5e9 --precision mixed-fp16 --optimizer adam --zero 3 --num-gpus 64
  trainledger memory --model llama-2-7b --precision mixed-bf16 --tp 8 --sp --recompute selective --gpu a100
  trainledger memory --model config.json --impl hf --attn-impl eager   (transformers' own model, `measure --impl hf`)
"""


RUN_FLAGS = True        # cli/main.py merges --config and the run's flags (cli/run_flags.py) before compute()
HARDWARE_DEFAULTS = {"gpu": "h100"}     # after --config: the defaults of --gpu and --num-gpus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from trainledger.cli.run_flags import add_config_flags, add_run_flags
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--model", help="preset name or Hugging Face config.json path (activations included)")
    what.add_argument("--params", type=common.positive_count, help="parameter count, e.g. 7.5e9 (model states only)")
    add_run_flags(parser, "memory", helps={
        "--zero": "ZeRO stage over --dp ranks (default 3, as in `fit`: FSDP full shard; 0 = DDP replicas)",
        "--dp": "data-parallel ranks (default 1, or --num-gpus / (tp · pp) when --num-gpus is given; both given, they "
                "must agree)",
        "--precision": "precision recipe (default amp-bf16: PyTorch autocast, fp32 weights and states; amp-fp16 on a "
                       "GPU without bf16, e.g. T4, V100)"})
    parser.add_argument("--grad-accum", type=common.positive_int, default=None,
                        help="micro-batches per optimizer step: after the first, each runs with the gradients held "
                             "(default 1; the run's global batch = grad-accum × dp × batch-size)")
    parser.add_argument("--gpu", default=None, help="accelerator to check against (default h100)")
    parser.add_argument("--num-gpus", type=common.gpu_count, default=None,
                        help="GPUs of the job, as on every other command: dp = num_gpus / (tp · pp); by default "
                             "tp · pp · dp (--dp, if also given, must agree)")
    parser.add_argument("--memory-per-gpu", type=common.positive_bytes, help="override the GPU's memory, e.g. 80GB or 80GiB")
    from trainledger.cli.measure import add_impl_flags
    add_impl_flags(parser)
    add_config_flags(parser)
    common.add_json_flag(parser)


def compute(args) -> dict:
    from trainledger.account.memory.per_gpu import memory_per_gpu
    from trainledger.cli.run_flags import asked, document_of, given, hardware_of
    from trainledger.errors import TrainledgerError
    from trainledger.specs.run_checks import ParameterCount

    if args.model is None and args.params is None:
        raise TrainledgerError("memory needs --model (a preset or a config.json) or --params N, or --config FILE with "
                               "a [model]", "--model")
    if args.model is not None and args.params is not None:     # one from the command line, one from --config
        raise TrainledgerError("give --model or --params, not both", "--params")
    gpu = common.resolve_gpu(args.gpu)       # --gpu cpu|cuda: this machine (a run file of a trained run names it)
    run = asked(args)
    from trainledger.specs.run_checks import default_precision
    precision = run.numerics.precision if run.numerics.precision is not None else default_precision(gpu)
    from trainledger.specs.fp8 import check_gpu_supports
    check_gpu_supports(precision, gpu)          # FP8 / MXFP8 recipes need those tensor cores on --gpu
    run = run.with_(precision=precision,
                    dp=_data_parallel(args, run, model_of(args)[0] if args.model is not None else None))
    lay = run.layout
    from trainledger.specs.bounds import check_request
    check_request(lay.dp * lay.tp * lay.pp, "num_gpus", "--num-gpus" if args.num_gpus is not None else "--dp")
    if args.grad_accum is not None:
        run = run.with_(global_batch_size=args.grad_accum * (lay.dp or 1) * run.batch.batch_size)
    zero, dp = lay.zero, lay.dp
    hardware = hardware_of(args, gpu, lay.dp * lay.tp * lay.pp * lay.cp)
    warnings = []
    if args.model is not None:
        from trainledger.cli.measure import hf_impl_of
        impl = hf_impl_of(args)
        spec, seq_len = model_of(args)
        run = run.with_(seq_len=seq_len)
        if impl is not None:
            from trainledger.account.memory.hf_activations import hf_impl_note, hf_memory_per_gpu
            if not run.kernels.flash:
                raise TrainledgerError("--no-flash applies to trainledger's Transformer; with --impl hf give --attn-impl eager")
            if not run.kernels.loss_upcast:
                raise TrainledgerError("--no-loss-upcast applies to trainledger's Transformer; transformers' causal-LM "
                                       "loss upcasts the logits (--impl hf)")
            result = hf_memory_per_gpu(spec, impl, hardware, run)
        else:
            result = memory_per_gpu(spec, hardware, run)
        result["model"] = spec.name
        b = run.batch.batch_size
        first = [seq_len_assumption(spec, seq_len, None if seq_len == spec.default_seq_len else seq_len),
                 f"micro-batch {b} sequence{'s' if b > 1 else ''} per GPU (--batch-size)"]
        recompute, flash = run.levers.recompute, run.kernels.flash
        activations = (f"activations of {spec.name} at batch {b} × seq {seq_len:,}: what our torch model "
                       f"saves for backward (account/memory/activations.py), recompute {recompute}, flash {'on' if flash else 'off'}"
                       + ("; the cross-entropy on the 16-bit logits (--no-loss-upcast)" if not run.kernels.loss_upcast else ""))
        if impl is not None:
            activations = (f"activations of transformers' model of {spec.name} at batch {b} × seq {seq_len:,} "
                           f"(account/memory/hf_activations.py); {hf_impl_note(impl)}")
        warnings += seq_len_warnings(spec, seq_len)
    else:
        if args.impl == "hf":
            raise TrainledgerError("--impl hf needs --model to be a Hugging Face config.json path, not --params")
        if args.seq_len is not None:
            raise TrainledgerError("--seq-len needs --model (with --params only model states are counted)")
        result = memory_per_gpu(ParameterCount(args.params), hardware, run)
        first = []
        activations = "activations not modelled: --params gives no architecture (activations_bytes = 0); use --model"
        warnings += common.outlandish(params=args.params)
    from trainledger.specs.run_checks import resolve
    model = spec if args.model is not None else ParameterCount(args.params)
    result["run"] = document_of(args, resolve(model, hardware, run).run, hardware.num_gpus)
    from trainledger.cli.sanity import check_zero_ranks
    check_zero_ranks(result["n_params"], dp, zero)
    warnings += common.outlandish({"num_gpus": "--num-gpus" if args.num_gpus is not None else "--dp"},
                                  num_gpus=dp * lay.tp * lay.pp)
    result["gpu"], result["num_gpus"] = gpu.name, hardware.num_gpus
    if result.get("fp8"):          # what the FP8 recipe adds and saves (account/memory/fp8.py)
        f, fmt = result["fp8"], units.format_bytes
        first.append(f"FP8 ({result['precision']}): params include {fmt(f['weight_copies_bytes'])} of FP8 weight copies"
                     f" and {fmt(f['amax_history_bytes'])} of amax histories; activations save "
                     f"{fmt(f['saved_inputs_bytes_saved'])} by keeping Linear inputs in FP8")
    parts = result["bytes_per_param_parts"]
    result["assumptions"] = first + [
        f"precision {result['precision']} + {result['optimizer']} (--precision, --optimizer): {result['bytes_per_param']:.4g} "
        f"B/param unsharded (params {parts['params']:g}, grads {parts['grads']:g}, master {parts['master_params']:g}, "
        f"optimizer {parts['optimizer']:.4g})",
        f"ZeRO {zero}{' (default)' if zero == DEFAULT_ZERO else ''} over dp={dp}, tp={lay.tp}{' + sp' if lay.sp else ''}, pp={lay.pp} "
        f"on {hardware.num_gpus:,} GPU{'s' if hardware.num_gpus > 1 else ''} (--num-gpus; stage reported: "
        f"{result['pipeline_stage']})",
        activations,
        f"peak = the busiest moment of a training step after the first ({result['peak_moment'].replace('_', ' ')}; "
        f"the first step peaks at {units.format_bytes(result['first_step_peak_bytes'])}, before its optimizer states "
        "exist); total = the sum of the parts; fits = peak + reserve <= memory; communication buffers not modelled",
        reserve_line(result),
    ]
    if result["fsdp_buffers"] is not None:
        from trainledger.account.memory.fsdp import fsdp_settings_of
        from trainledger.specs.recipes import get_recipe
        fsdp = fsdp_settings_of(get_recipe(result["precision"]), lay.fsdp, pp=lay.pp, dp=dp)
        b = result["fsdp_buffers"]
        result["assumptions"].insert(len(first) + 2, f"{fsdp.describe()}: its unsharded buffers are in params "
                                     f"({units.format_bytes(b['root_params'] + b['block_params'])}: the root unit and "
                                     f"{b['blocks_held']} block{'s' if b['blocks_held'] > 1 else ''}) and grads "
                                     f"({units.format_bytes(b['root_grads'] + b['block_grads'] + b['accumulated_grads'])}); "
                                     f"activations in {result['activations_precision']}")
    result["assumptions"] += _finetune_lines(result)
    if args.model is not None:
        result["assumptions"] += common.approximation_notes(spec)
    if zero > 0 and dp == 1 and given(args, "layout.zero"):
        result["assumptions"].append(f"--zero {zero} with --dp 1 shards nothing: give --num-gpus N (or --dp N) to split the "
                                     "states over N ranks")
    if lay.sp and lay.tp == 1:
        result["assumptions"].append("--sp with --tp 1 changes nothing: sequence parallelism splits over the --tp ranks")
    if warnings:
        result["warnings"] = warnings
    return result


def _finetune_lines(result: dict) -> list[str]:
    """What fine-tuning and the levers change (account/memory/finetune.py, levers.py), one line each."""
    fmt, lines = units.format_bytes, []
    parts = result.get("finetune_parts")
    if parts:
        lines.append(f"{result['finetune']}: {result['trainable_params']:,} trainable (adapters: "
                     f"{fmt(parts['trainable_params_bytes'])}, their grads and states), {result['frozen_params']:,} frozen "
                     f"({fmt(parts['frozen_params_bytes'])} unquantized"
                     + (f", {fmt(parts['quantized_weights_bytes'])} {result['quantize']} codes + "
                        f"{fmt(parts['quantization_constants_bytes'])} quantization constants" if result["quantize"] != "none"
                        else "") + "); frozen Linears save no input for backward")
    if result.get("levers"):
        lines.append(f"levers in effect: {' '.join(result['levers'])}")
    host = result.get("host_parts") or {}
    if result.get("host_bytes"):
        lines.append("host memory " + fmt(result["host_bytes"]) + ": " +
                     ", ".join(f"{k.replace('_', ' ')} {fmt(v)}" for k, v in host.items() if v))
    if result.get("optimizer") == "paged-adamw-8bit":
        lines.append("paged-adamw-8bit: states in CUDA unified memory, counted on the GPU while they fit; under memory "
                     "pressure the driver pages them to the host (host_bytes)")
    return lines


def _data_parallel(args, run, spec) -> int:
    """The data-parallel ranks of `run`: dp = --num-gpus / (tp · pp · cp) when --num-gpus is given (the vocabulary
    of `step`, `layout`, `plan`: specs.run_checks.derive_layout), --dp otherwise (default 1); both given, they must
    agree (one line naming both flags). A --tp or --pp the model `spec` cannot take is named before the count."""
    from trainledger.cli.run_flags import given
    from trainledger.specs.run_checks import check_positive_int, check_split, derive_layout
    lay = run.layout
    for value, flag in ((lay.tp, "--tp"), (lay.pp, "--pp")):
        check_positive_int(value, flag)
    check_split(spec, lay.tp, lay.pp)
    if args.num_gpus is None:
        return lay.dp
    dp = lay.dp if given(args, "layout.dp") else None
    return derive_layout(args.num_gpus, lay.tp, lay.pp, lay.cp, dp, run.batch.batch_size, None)[1]


def reserve_line(result: dict) -> str:
    """The reserve of an answer (`memory`, `infer`) in one line: its parts when automatic, else the size given."""
    parts = result.get("reserve_parts")
    if parts:
        return (f"reserve {units.format_bytes(parts['total'])} (default on {result['gpu']}): CUDA context "
                f"{units.format_bytes(parts['context'])}, cuBLAS workspaces {units.format_bytes(parts['workspaces'])}, "
                f"caching allocator {units.format_bytes(parts['allocator'])} (10% of the peak; `measure` replays the "
                "exact figure); --reserve to change it")
    return (f"reserve {units.format_bytes(result['reserve_bytes'])} (--reserve)" if result["reserve_bytes"] else
            "no reserve: --reserve 0, or a device whose runtime overheads are not modelled")


def render(result: dict, args) -> None:
    def row(label, key):
        return (label, f"{units.format_bytes(result[key])} ({result[key]:.4g} B)")

    extra = []
    if result.get("finetune_parts"):
        extra = [("trainable / frozen params", f"{units.format_count(result['trainable_params'])} / "
                  f"{units.format_count(result['frozen_params'])}")]
        for label, key in (("  frozen base", "frozen_params_bytes"), ("  quantized codes", "quantized_weights_bytes"),
                           ("  quantization constants", "quantization_constants_bytes")):
            if result["finetune_parts"][key]:
                extra.append((label, units.format_bytes(result["finetune_parts"][key])))
    rows = extra + [("parameters", f"{units.format_count(result['n_params'])} ({units.format_count(result['n_params_per_gpu_before_zero'])} per GPU before ZeRO, {units.format_count(result['n_params_per_gpu'])} stored)"),
            row("params", "params_bytes"), row("grads", "grads_bytes"), row("master params", "master_params_bytes"),
            row("optimizer states", "optimizer_bytes"),
            row("activations", "activations_bytes") if result["activations_modeled"] else ("activations", "not modelled (--params only)"),
            row("total", "total_bytes"), row("peak of a step", "peak_bytes")]
    if result["reserve_bytes"]:
        rows.append(row("reserve", "reserve_bytes"))
    if result.get("host_bytes"):
        rows.append(row("host memory", "host_bytes"))
    rows.append(row(f"{result['gpu']} memory", "memory_per_gpu_bytes"))
    rows.append(("fits", f"{'yes' if result['fits'] else 'NO'} (headroom {units.format_bytes(result['headroom_bytes'])})"))
    print_table("Memory per GPU", rows, result["assumptions"])
