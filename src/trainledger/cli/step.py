"""`trainledger step`: seconds of one training iteration predicted, by part, with MFU/HFU and memory per GPU."""

from __future__ import annotations

import argparse

from trainledger import units
from trainledger.cli import common
from trainledger.cli.interval import interval_line, interval_of, range_text, with_interval
from trainledger.cli.experts import expert_assumption
from trainledger.cli.plan import model_of, print_table, seq_len_assumption, seq_len_warnings
from trainledger.cli.reserve import near_limit_warning
from trainledger.errors import TrainledgerError

HELP = "time of one training iteration of --model on --num-gpus GPUs under a parallel layout, by part, with MFU"
USAGE = "%(prog)s --model NAME [--gpu GPU] [--num-gpus N] [settings below] [--config FILE] [--json]"
DESCRIPTION = """One iteration predicted by account/time/step.py: every kernel of a layer (GEMMs on a shape-dependent
roofline with measured matmul efficiency, the attention core, memory-bound ops), recomputation, the exposed part
of each collective (α–β ring costs on the link it crosses), the pipeline bubble and the optimizer step.

The layout: --tp (with --sp), --pp (with --interleave V chunks per GPU), --cp (context parallel), and data
parallelism over the rest: dp = num_gpus / (tp · pp · cp) (--dp may be given; it must agree). --batch-size is
the micro-batch per GPU; global_batch / (dp · batch-size) micro-batches are accumulated per step.
Defaults: --precision amp-bf16 (fp32 on a CPU); --zero the stage a user of the layout runs (3 = FSDP2 for data
parallelism alone, 1 with pipelining or --framework megatron, 0 with dp 1; the reason is printed); --seq-len the
pre-training context, --gpu h100, one micro-batch per GPU. With --zero 3 the step is FSDP2 as it runs, unit by
unit: bf16 gathers under a mixed-precision policy (--fsdp-param-dtype), fp32 reduce-scatters,
--reshard-after-forward, --fsdp-accumulate, HSDP with --dp-replicate. When data-parallel communication dominates,
the bottleneck line names the faster stage. In eager PyTorch on a GPU the CPU launches ops ahead of the GPU: the
step is the longer of the two timelines between the training loop's syncs (docs/time.md). --compile: the model
under torch.compile. --calibration FILE: the rates and per-op costs `bench --calibrate --out FILE` measured on a
GPU machine. Time in seconds; MFU = model FLOPs / (step · GPUs · dense peak).

examples:
  trainledger step --model gpt2 --gpu h100 --num-gpus 8 --global-batch-size 64 --batch-size 8
  trainledger step --model gpt2 --batch-size 8 --num-gpus 1 --calibration calibration-cuda-h100.json --compile
  trainledger step --model llama-2-7b --num-gpus 8 --zero 3 --recompute selective
  trainledger step --model llama-3-8b --gpu a100 --num-gpus 64 --global-batch-size 64 --seq-len 8192 --recompute selective-op
  trainledger step --model gpt3-175b --gpu a100 --num-gpus 64 --tp 8 --sp --pp 8 --interleave 3 \\
      --recompute selective --precision mixed-fp16 --optimizer adam --global-batch-size 64 --framework megatron --no-flash
"""


RUN_FLAGS = True        # cli/main.py merges --config and the run's flags (cli/run_flags.py) before compute()
HARDWARE_DEFAULTS = {"gpu": "h100"}     # after --config: the defaults of --gpu and --num-gpus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from trainledger.cli.run_flags import add_config_flags, add_run_flags
    parser.add_argument("--model", help="preset name or Hugging Face config.json path")
    parser.add_argument("--gpu", default=None, help="accelerator (`trainledger hardware`; default h100)")
    parser.add_argument("--num-gpus", type=common.gpu_count, help="GPUs of the job (default: tp · pp · cp · dp)")
    add_run_flags(parser, "step")
    add_config_flags(parser)
    common.add_calibration_flag(parser)
    common.add_hardware_flags(parser)
    common.add_json_flag(parser)


def compute(args) -> dict:
    from trainledger.account.planning import zero_choice
    from trainledger.account.time.step import step_time
    from trainledger.cli.run_flags import asked, document_of, hardware_of
    from trainledger.specs.run_checks import default_precision, resolve

    if args.model is None:
        raise TrainledgerError("step needs --model (a preset or a config.json), or --config FILE with a [model]",
                               "--model")
    lay = asked(args).layout          # refused before calibrating this machine: the links 8 CPUs would need
    common.check_links_before_calibrating(args, args.num_gpus or (lay.dp or 1) * lay.tp * lay.pp * lay.cp)
    gpu = common.apply_hardware_flags(common.resolve_gpu(args.gpu, calibration=args.calibration), args)
    spec, _ = model_of(args)
    hardware = hardware_of(args, gpu, args.num_gpus)
    resolved = resolve(spec, hardware, asked(args))
    run, hardware = resolved.run, resolved.hardware
    from trainledger.specs.bounds import check_request
    check_request(hardware.num_gpus, "num_gpus", "--num-gpus" if args.num_gpus is not None else "--dp")
    seq_len, precision, zero = run.batch.seq_len, run.numerics.precision, run.layout.zero
    result = step_time(spec, hardware, run)
    if "fp8_gemms" in result:     # the same layout in the 16-bit recipe: what FP8 buys (account/time/fp8_compare.py)
        from trainledger.account.time.fp8_compare import compare_with_base
        result["fp8"] = compare_with_base(spec, hardware, result)
    if max(result["breakdown"], key=result["breakdown"].get) == "dp_comm":
        found = zero_choice.lever(spec, hardware, run, result)
        if found is not None:
            result["lever"] = found
            result["bottleneck"] = result["bottleneck"].split(" (")[0] + f" ({found['text']})"
    lay = run.layout
    first = [seq_len_assumption(spec, seq_len, None if seq_len == spec.default_seq_len else seq_len),
             f"micro-batch {run.batch.batch_size} × {result['micro_batches']} accumulation step"
             f"{'s' if result['micro_batches'] > 1 else ''} × dp {result['dp']} = global batch {result['global_batch_size']} "
             f"(--batch-size, --global-batch-size)",
             f"layout tp {lay.tp}{' + sp' if result['sp'] else ''}, pp {lay.pp} (interleave {lay.interleave}"
             f"{uneven_words(spec.n_layers, lay.pp, lay.interleave) if result['uneven_chunks'] else ''}), cp {lay.cp}, "
             f"dp {result['dp']} with ZeRO {zero} on {result['num_gpus']} × {gpu.name}; "
             f"recompute {run.levers.recompute}, flash {'on' if run.kernels.flash else 'off'}, {result['precision']} + "
             f"{result['optimizer']}"
             + ("; the cross-entropy on the 16-bit logits (--no-loss-upcast)" if not run.kernels.loss_upcast else "")]
    if precision == default_precision(gpu) and precision == "fp32":
        first.append(f"--precision fp32 (default here: {gpu.name} has no bf16 matmul peak; amp-bf16 elsewhere)")
    if "fp8" in result:
        from trainledger.account.time.roofline import gemm_efficiency
        f = result["fp8"]
        first.append(f"FP8 GEMMs ({fp8_gemm_words(f['fp8_gemms'])}): {units.format_seconds(f['fp8_gemm_seconds'])} of GEMMs "
                     f"vs {units.format_seconds(f['base_gemm_seconds'])} in {f['base_precision']}, casts add "
                     f"{units.format_seconds(f['cast_seconds_added'])}; step {_faster_or_slower(f['speedup'])}; attention, "
                     f"norms and the LM head stay bf16; FP8 GEMMs: "
                     f"{gemm_efficiency(gpu, 4096, 4096, 4096, 'fp8')['source']}")
        first.append(result["model_flops_convention"] + f": {result['model_flops_per_s_per_gpu'] / 1e12:.0f} TFLOP/s/GPU")
    if expert_assumption(result):
        first.append(expert_assumption(result))
    if args.calibration is not None:
        first.append(f"device measured by {args.calibration}: {gpu.performance_source.split(';')[0]} (--gpu ignored)")
    default, why = zero_choice.default_zero(dp=result["dp"], pp=lay.pp, framework=run.kernels.framework)
    if zero == default:
        first.append(f"ZeRO {zero} by default (--zero to choose): {why}")
    if "fsdp" in result:
        first.append(result["fsdp"]["assumption"])
    first += _unused_switches(run)
    result["assumptions"] = first + result["assumptions"]
    result.update(interval_of(result["step_seconds"], result["tokens_per_step"], run.kernels.framework, gpu.name,
                              result["num_gpus"], moe=spec.is_moe))
    result["suggestion"] = suggestion(spec, hardware, result)
    result["run"] = document_of(args, run, hardware.num_gpus)
    warnings = seq_len_warnings(spec, seq_len) + common.outlandish(num_gpus=result["num_gpus"])
    if not result["fits"]:
        warnings.append(f"this layout peaks at {units.format_bytes(result['memory_bytes'])} per GPU + "
                        f"{units.format_bytes(result['reserve_bytes'])} reserve, more than the "
                        f"{units.format_bytes(gpu.memory_bytes)} of {gpu.name}: try `trainledger layout`")
    else:
        near = near_limit_warning("this layout", result["memory_bytes"], result["reserve_bytes"], gpu.memory_bytes)
        warnings += [near] if near else []
    if warnings:
        result["warnings"] = warnings
    return result


def _unused_switches(run) -> list[str]:
    """One line for each switch of `run` that changes nothing in its layout or framework (said, not refused)."""
    lay, k, lines = run.layout, run.kernels, []
    if lay.sp and lay.tp == 1:
        lines.append("--sp with --tp 1 changes nothing: sequence parallelism splits over the --tp ranks")
    if not k.tp_overlap and (k.framework != "megatron" or lay.tp == 1):
        lines.append("--no-tp-overlap changes nothing here: it is Megatron-LM's (--framework megatron) overlap of TP "
                     "gradient reductions, and PyTorch's TP reduces them synchronously anyway")
    if k.pp_overlap and lay.pp == 1:
        lines.append("--pp-overlap changes nothing here: there is no pipeline (--pp 1)")
    if not k.dp_overlap and k.framework != "megatron":
        lines.append("--no-dp-overlap changes nothing here: it is Megatron-LM's (--framework megatron) choice of when "
                     "to reduce data-parallel gradients")
    return lines


def suggestion(spec, hardware, result: dict) -> dict | None:
    """A faster micro-batch / ZeRO / recompute / interleave on the same GPUs, or one that fits when this step does
    not (account.planning.suggest.faster_setting), with a one-line summary under "line"; None when there is none."""
    from trainledger.account.planning.suggest import faster_setting
    found = faster_setting(spec, hardware, result)
    if found is None:
        return None
    m = found["micro_batches"]
    this = (f"{units.format_seconds(result['step_seconds'])}, {100 * result['mfu']:.1f}%" if result["fits"]
            else "does not fit")
    found["line"] = (f"{' '.join(found['changes'])} ({m} accumulation step{'s' if m > 1 else ''}): "
                     f"{units.format_seconds(found['step_seconds'])}, MFU {100 * found['mfu']:.1f}% (this layout: {this}), "
                     f"{units.format_bytes(found['memory_bytes'])} per GPU; `trainledger layout` searches every layout")
    return found


def _faster_or_slower(speedup: float) -> str:
    """'1.19× faster' or, when the casts cost more than the FP8 GEMMs save, '1.02× slower'."""
    return f"{speedup:.2f}× faster" if speedup >= 1 else f"{1 / speedup:.2f}× slower (the casts cost more than FP8 saves)"


def fp8_gemm_words(names: list[str]) -> str:
    """The FP8 GEMMs of a layer in a few words: each Linear once (×n where a layer runs n of them, e.g. a GPU's
    grouped expert GEMMs), then which passes: 'qkv, proj, expert_up ×4; forward, input and weight gradients'.
    The full list stays in the JSON (fp8.fp8_gemms)."""
    passes = {"_dgrad": "input", "_wgrad": "weight"}
    counts, seen = {}, set()
    for name in names:
        suffix = next((s for s in passes if name.endswith(s)), "")
        base = name.removesuffix(suffix) if suffix else name
        counts[base] = counts.get(base, 0) + (0 if suffix else 1)
        seen.add(suffix)
    linears = ", ".join(f"{base} ×{n}" if n > 1 else base for base, n in counts.items())
    grads = [passes[s] for s in passes if s in seen]
    which = ["forward"] * ("" in seen) + ([f"{' and '.join(grads)} gradient{'s' if len(grads) > 1 else ''}"]
                                           if grads else [])
    return f"{linears}; {', '.join(which)}" if which else linears


def render(result: dict, args) -> None:
    total = result["step_seconds"]
    rows = [("step time", with_interval(units.format_seconds(total), result)),
            ("tokens/s", f"{units.format_count(result['tokens_per_s'])} ({units.format_count(result['tokens_per_step'])} per step)"),
            ("MFU / HFU", f"{100 * result['mfu']:.1f}% / {100 * result['hfu']:.1f}%"
                          + (f" ({result['mfu_convention']})" if result.get("mfu_convention") else "")),
            ("model / hardware FLOPs per step", f"{units.format_flops(result['model_flops_per_step'])} / "
                                                f"{units.format_flops(result['hardware_flops_per_step'])}")]
    for part, seconds in sorted(result["breakdown"].items(), key=lambda kv: -kv[1]):
        if seconds > 0:
            rows.append((f"  {part}", f"{units.format_seconds(seconds)} ({100 * seconds / total:.1f}%)"))
    rows.append((f"memory per GPU ({result['gpu']})",
                 f"peak {units.format_bytes(result['memory_bytes'])} + reserve {units.format_bytes(result['reserve_bytes'])} "
                 f"of {units.format_bytes(result['memory_per_gpu_bytes'])}: {'fits' if result['fits'] else 'does NOT fit'}"))
    print_table(f"One training step of {result['model']}", rows, result["assumptions"])
    out = common.console()       # the advice in whole lines under the table, as `layout` prints its bottleneck
    if "interval_words" in result:
        out.print(interval_line("step", f"{units.format_seconds(total)} ({units.format_count(result['tokens_per_s'])}"
                                " tokens/s)", f"{range_text(result)} ({range_text(result, 'tokens_per_s', units.format_count)}"
                                " tokens/s)", result), soft_wrap=True)
    out.print(f"bottleneck: {result['bottleneck']}", soft_wrap=True)
    if result.get("suggestion"):
        label = "faster" if result["suggestion"]["why"] == "faster" else "fits with"
        out.print(f"{label}: {result['suggestion']['line']}", soft_wrap=True)


def uneven_words(n_layers: int, pp: int, interleave: int) -> str:
    """', uneven chunks: 61 layers in 32 chunks of 1-2' for a step with --uneven-chunks whose layers do not split evenly."""
    chunks = pp * interleave
    return f", uneven chunks: {n_layers} layers in {chunks} chunks of {n_layers // chunks}-{-(-n_layers // chunks)}"
