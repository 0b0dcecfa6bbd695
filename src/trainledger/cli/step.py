"""`trainledger step`: seconds of one training iteration predicted, by part, with MFU/HFU and memory per GPU."""

from __future__ import annotations

import argparse

from trainledger import units
from trainledger.cli import common
from trainledger.cli.interval import interval_of, with_interval
from trainledger.cli.experts import add_expert_flags, expert_assumption, expert_settings
from trainledger.cli.plan import load_transformer, print_table, seq_len_assumption, seq_len_warnings
from trainledger.cli.reserve import add_reserve_flag, near_limit_warning, reserve_of

HELP = "time of one training iteration of --model on --num-gpus GPUs under a parallel layout, by part, with MFU"
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


def add_layout_arguments(parser: argparse.ArgumentParser, precision: str | None = "amp-bf16",
                         why: str = "PyTorch autocast, fp32 weights and states") -> None:
    """The model, batch, precision and layout flags `step` shares with `memory` (and `profile`)."""
    parser.add_argument("--model", required=True, help="preset name or Hugging Face config.json path")
    parser.add_argument("--batch-size", type=common.positive_int, default=1,
                        help="micro-batch: sequences per GPU per forward/backward (default 1)")
    parser.add_argument("--seq-len", type=common.positive_int, help="tokens per sequence (default: the context the model was pre-trained at)")
    common.add_precision_flag(parser, precision, why)
    common.add_optimizer_flag(parser)
    parser.add_argument("--zero", type=int, choices=(0, 1, 2, 3), default=None,
                        help="ZeRO stage over the dp ranks (default: what a user of the layout runs: FSDP2 = 3 for data "
                             "parallelism alone, 1 with --pp or --framework megatron, 0 with dp 1; 0 = DDP)")
    parser.add_argument("--tp", type=common.positive_int, default=1, help="tensor-parallel size; must divide the heads (default 1)")
    parser.add_argument("--sp", action="store_true", help="sequence parallelism with --tp (Korthikanti et al. 2022)")
    parser.add_argument("--pp", type=common.positive_int, default=1, help="pipeline stages, 1F1B schedule (default 1)")
    parser.add_argument("--recompute", choices=common.RECOMPUTE_CHOICES, default="none", help=common.RECOMPUTE_HELP)
    parser.add_argument("--flash", action=argparse.BooleanOptionalAction, default=True,
                        help="flash attention (default on); --no-flash stores and streams the T×T scores")
    parser.add_argument("--gpu", default="h100", help="accelerator (`trainledger hardware`; default h100)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_layout_arguments(parser, None, "amp-bf16; fp32 on a device without a bf16 peak, e.g. --gpu cpu")
    common.add_loss_upcast_flag(parser)
    parser.add_argument("--num-gpus", type=common.positive_int, help="GPUs of the job (default: tp · pp · cp · dp)")
    parser.add_argument("--dp", type=common.positive_int, help="data-parallel ranks (default: num_gpus / (tp · pp · cp))")
    parser.add_argument("--global-batch-size", type=common.positive_int,
                        help="sequences per optimizer step over all GPUs (default: one micro-batch per data-parallel rank)")
    parser.add_argument("--interleave", type=common.positive_int, default=1,
                        help="virtual pipeline chunks per GPU, Megatron-LM's interleaved schedule (default 1 = 1F1B)")
    parser.add_argument("--uneven-chunks", action="store_true",
                        help="let the interleaved schedule's chunks hold unequal numbers of layers, as Megatron-Core's "
                             "--pipeline-model-parallel-layout or torch.distributed.pipelining stages do (e.g. "
                             "DeepSeek-V3's 61 layers over --pp 4 --interleave 8); each --pp × --interleave chunk holds "
                             "at least one layer, and the bubble waits for the largest chunk (default: equal chunks)")
    parser.add_argument("--cp", type=common.positive_int, default=1, help="context-parallel ranks splitting the sequence (default 1)")
    parser.add_argument("--schedule", choices=("1f1b", "dualpipe"), default="1f1b",
                        help="pipeline schedule: 1f1b (default; interleaved with --interleave > 1) or dualpipe "
                             "(DeepSeek-V3's bidirectional pipeline: a smaller bubble, a second copy of the parameters; "
                             "even --pp and micro-batches)")
    parser.add_argument("--mtp", action=argparse.BooleanOptionalAction, default=None,
                        help="train the model's multi-token-prediction modules (DeepSeek-V3: 1) on the last pipeline "
                             "stage, counted in the model FLOPs (default: with --framework megatron, as DeepSeek-V3 "
                             "was pre-trained; our torch Transformer does not build them); --no-mtp leaves them out")
    parser.add_argument("--tp-overlap", action=argparse.BooleanOptionalAction, default=True,
                        help="with --framework megatron: reduce a column-parallel Linear's input gradient beside its "
                             "weight-gradient GEMM (default, Megatron-LM since 2022); --no-tp-overlap: after the "
                             "Linear's backward, exposed, as the 2021 Megatron-LM and Megatron-DeepSpeed did")
    parser.add_argument("--pp-overlap", action=argparse.BooleanOptionalAction, default=None,
                        help="run the pipeline's point-to-point sends beside the next chunk's computation (default: "
                             "with --framework megatron and --interleave > 1, as Megatron Bridge sets overlap_p2p_comm "
                             "and Megatron-LM defaults to it since 2023; otherwise each send is waited for); "
                             "--no-pp-overlap: exposed, as Megatron-LM's 2021-22 interleaved schedule ran")
    parser.add_argument("--dp-overlap", action=argparse.BooleanOptionalAction, default=True,
                        help="with --framework megatron: reduce data-parallel gradients beside the last micro-batch's "
                             "backward (default: --overlap-grad-reduce, as Megatron Bridge's and NeMo's recipes set "
                             "it); --no-dp-overlap: after the last micro-batch, exposed (Megatron-LM's own default and "
                             "its 2021 code)")
    add_reserve_flag(parser)
    add_model_flags(parser)
    add_expert_flags(parser)
    common.add_compile_flag(parser)
    parser.add_argument("--loop", choices=("train", "profile"), default="train",
                        help="whose synchronizations end the step's timelines: trainledger's training loop, which reads "
                             "the loss and the gradient norm back after the backward (default), or `profile`'s steps, "
                             "which synchronize once at the end")
    common.add_calibration_flag(parser)
    common.add_fsdp_flags(parser)
    common.add_hardware_flags(parser)
    common.add_json_flag(parser)


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    """--attention, --framework, --attention-kernel: how FLOPs are counted and which kernels run."""
    parser.add_argument("--attention", choices=("full", "causal"), default="full",
                        help="attention-score FLOPs counted for MFU: the full T×T (PaLM, default) or half (Megatron); "
                             "a causal flash kernel executes half either way")
    parser.add_argument("--framework", choices=("trainledger", "torchtitan", "megatron"), default="trainledger",
                        help="whose kernels: our torch Transformer in eager PyTorch (default), torchtitan's Llama "
                             "(complex-number RoPE, --compile per block with the head and loss eager) or Megatron-LM's "
                             "fused GPT (fused norms/bias-GeLU/softmax, dropout, weight gradients fused into fp32 "
                             "main_grad)")
    parser.add_argument("--attention-kernel", default=None,
                        help="which measured flash-attention kernel of --gpu (e.g. flash-attention-2, cudnn; default: "
                             "the first in `trainledger hardware --json`, what PyTorch SDPA runs)")


def compute(args) -> dict:
    from trainledger.account.planning import zero_choice
    from trainledger.account.time.step import derive_layout, step_time

    gpu = common.apply_hardware_flags(common.resolve_gpu(args.gpu, calibration=args.calibration), args)
    spec, seq_len = load_transformer(args.model, args.seq_len)
    precision, precision_note = default_precision(args.precision, gpu)
    _, dp, _, _ = derive_layout(args.num_gpus, args.tp, args.pp, args.cp, args.dp, args.batch_size, args.global_batch_size)
    zero, why = (args.zero, None) if args.zero is not None else zero_choice.default_zero(dp=dp, pp=args.pp,
                                                                                        framework=args.framework)
    settings = dict(batch_size=args.batch_size, seq_len=seq_len, global_batch_size=args.global_batch_size,
                    num_gpus=args.num_gpus, precision=precision, optimizer=args.optimizer, tp=args.tp,
                    sp=args.sp, pp=args.pp, interleave=args.interleave, cp=args.cp, dp=args.dp,
                    recompute=args.recompute, flash=args.flash, attention=args.attention,
                    framework=args.framework, attention_kernel=args.attention_kernel, compiled=args.compile,
                    loop=args.loop, reserve_bytes=reserve_of(args, gpu), tp_overlap=args.tp_overlap,
                    dp_overlap=args.dp_overlap, pp_overlap=args.pp_overlap, schedule=args.schedule, mtp=args.mtp, loss_upcast=args.loss_upcast,
                    uneven_chunks=args.uneven_chunks, **expert_settings(args))
    fsdp_for = lambda z: common.fsdp_from_args(args, precision, z, dp, args.pp)  # noqa: E731
    result = step_time(spec, gpu, **settings, zero=zero, fsdp=fsdp_for(zero))
    if "fp8_gemms" in result:     # the same layout in the 16-bit recipe: what FP8 buys (account/time/fp8_compare.py)
        from trainledger.account.time.fp8_compare import base_precision, compare_with_base
        base_fsdp = common.fsdp_from_args(args, base_precision(precision), zero, dp, args.pp)
        result["fp8"] = compare_with_base(spec, gpu, result, dict(settings, zero=zero), base_fsdp)
    if max(result["breakdown"], key=result["breakdown"].get) == "dp_comm":
        found = zero_choice.lever(spec, gpu, settings, result, fsdp_for=lambda z: fsdp_for(z) if args.dp_replicate == 1
                                  or z == 3 else None)
        if found is not None:
            result["lever"] = found
            result["bottleneck"] = result["bottleneck"].split(" (")[0] + f" ({found['text']})"
    first = [seq_len_assumption(spec, seq_len, args.seq_len),
             f"micro-batch {args.batch_size} × {result['micro_batches']} accumulation step"
             f"{'s' if result['micro_batches'] > 1 else ''} × dp {result['dp']} = global batch {result['global_batch_size']} "
             f"(--batch-size, --global-batch-size)",
             f"layout tp {args.tp}{' + sp' if result['sp'] else ''}, pp {args.pp} (interleave {args.interleave}"
             f"{uneven_words(spec.n_layers, args.pp, args.interleave) if result['uneven_chunks'] else ''}), cp {args.cp}, "
             f"dp {result['dp']} with ZeRO {zero} on {result['num_gpus']} × {gpu.name}; "
             f"recompute {args.recompute}, flash {'on' if args.flash else 'off'}, {result['precision']} + {result['optimizer']}"
             + ("; the cross-entropy on the 16-bit logits (--no-loss-upcast)" if not args.loss_upcast else "")]
    if precision_note:
        first.append(precision_note)
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
    if why is not None:
        first.append(f"ZeRO {zero} by default (--zero to choose): {why}")
    if "fsdp" in result:
        first.append(result["fsdp"]["assumption"])
    if args.sp and args.tp == 1:
        first.append("--sp with --tp 1 changes nothing: sequence parallelism splits over the --tp ranks")
    if not args.tp_overlap and (args.framework != "megatron" or args.tp == 1):
        first.append("--no-tp-overlap changes nothing here: it is Megatron-LM's (--framework megatron) overlap of TP "
                     "gradient reductions, and PyTorch's TP reduces them synchronously anyway")
    if args.pp_overlap is not None and args.pp == 1:
        first.append(f"--{'' if args.pp_overlap else 'no-'}pp-overlap changes nothing here: there is no pipeline (--pp 1)")
    if not args.dp_overlap and args.framework != "megatron":
        first.append("--no-dp-overlap changes nothing here: it is Megatron-LM's (--framework megatron) choice of when "
                     "to reduce data-parallel gradients")
    result["assumptions"] = first + result["assumptions"]
    result.update(interval_of(result["step_seconds"], result["tokens_per_step"], args.framework, gpu.name,
                              result["num_gpus"], moe=spec.is_moe))
    result["suggestion"] = suggestion(spec, gpu, result, lambda z: fsdp_for(z) if args.dp_replicate == 1 or z == 3 else None)
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


def suggestion(spec, gpu, result: dict, fsdp_for=None) -> dict | None:
    """A faster micro-batch / ZeRO / recompute / interleave on the same GPUs, or one that fits when this step does
    not (account.planning.suggest.faster_setting), with a one-line summary under "line"; None when there is none."""
    from trainledger.account.planning.suggest import faster_setting
    found = faster_setting(spec, gpu, result, fsdp_for=fsdp_for)
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


def default_precision(asked: str | None, gpu) -> tuple[str, str | None]:
    """(recipe, note): `asked`, or by default amp-bf16, fp32 on a device without a bf16 peak (a CPU), said once."""
    if asked is not None:
        return asked, None
    if "bf16" in gpu.peak_flops_per_s:
        return "amp-bf16", None
    return "fp32", f"--precision fp32 (default here: {gpu.name} has no bf16 matmul peak; amp-bf16 elsewhere)"


def render(result: dict, args) -> None:
    total = result["step_seconds"]
    rows = [("step time", with_interval(units.format_seconds(total), result)),
            ("tokens/s", f"{units.format_count(result['tokens_per_s'])} ({units.format_count(result['tokens_per_step'])} per step)"),
            ("MFU / HFU", f"{100 * result['mfu']:.1f}% / {100 * result['hfu']:.1f}%"),
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
    out.print(f"bottleneck: {result['bottleneck']}", soft_wrap=True)
    if result.get("suggestion"):
        label = "faster" if result["suggestion"]["why"] == "faster" else "fits with"
        out.print(f"{label}: {result['suggestion']['line']}", soft_wrap=True)


def uneven_words(n_layers: int, pp: int, interleave: int) -> str:
    """', uneven chunks: 61 layers in 32 chunks of 1-2' for a step with --uneven-chunks whose layers do not split evenly."""
    chunks = pp * interleave
    return f", uneven chunks: {n_layers} layers in {chunks} chunks of {n_layers // chunks}-{-(-n_layers // chunks)}"
