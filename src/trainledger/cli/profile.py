"""`trainledger profile`: real training steps under torch.profiler (or a recorded trace), time by part, predicted vs
measured, a diagnosis."""

from __future__ import annotations

import argparse

from trainledger.cli import common
from trainledger.errors import TrainledgerError

HELP = ("run a few real training steps under torch.profiler, or read a recorded trace (--from-trace): where the "
        "time goes, predicted vs measured")
DESCRIPTION = """Runs --warmup + --steps training steps of --model on this machine (CPU, or CUDA when present), then
--steps more under torch.profiler, and groups the measured time into the parts of the prediction:
matmul, attention, memory_bound, optimizer, communication, data_loading, overhead (Python, dispatch, idle).
The prediction is `trainledger step` (account/time/step.py) on this machine's calibrated device: matmul rates by
shape, memory bandwidth by op size, SDPA rates and per-op overhead measured by `trainledger bench --calibrate`
(run automatically the first time, seconds on a CPU and about 40 s on a GPU, then cached). The diagnosis names the largest part first,
then the largest gaps between prediction and measurement, with what to try (checked against the set-up: the
optimizer's kind, flash attention, torch.compile). The measured step is the median of the unprofiled steps; the
categories are those of the median profiled step (on a CPU each profiled step follows an unprofiled one, so both
see the same machine) and add up to its time (the profiler's own cost shows as the difference). When other processes kept the
machine busy (fewer idle CPUs than threads, read from /proc/stat) the first line says so: on --threads 1 the
step and its parts are then the thread's CPU time; on more threads, rerun with --threads 1 or when idle.
Without --threads, profile takes the cores other processes leave idle (as `train` does; OMP_NUM_THREADS is kept)
and prints its choice first.

examples:
  trainledger profile --model tiny --batch-size 8 --seq-len 128
  trainledger profile --model gpt2 --batch-size 4 --seq-len 256 --trace step.json   # open in ui.perfetto.dev
  trainledger profile --model gpt2 --device cuda --precision amp-bf16 --json

On CUDA the parts are the GPU timeline: kernels grouped by name and by the op that launched them (GEMMs →
matmul, flash/cuDNN/efficient attention → attention, NCCL → communication, kernels of the optimizer step →
optimizer, the rest → memory_bound), their union over streams, and idle (the GPU waiting for the CPU).

--from-trace FILE reads any trace written by torch.profiler (prof.export_chrome_trace or
tensorboard_trace_handler; .json or .json.gz, from any model) and groups it the same way without running
anything: parts per ProfilerStep#N span (the whole trace when it has none), idle time, top kernels, a
diagnosis. With --model and the shapes it ran (--batch-size, --seq-len, --precision) it also predicts the
step, on --gpu (a datasheet entry), --calibration FILE (a `bench --calibrate` profile) or, by default, the
trace's own GPU's datasheet entry.
  trainledger profile --from-trace trace.json.gz
  trainledger profile --from-trace trace.json.gz --model gpt2 --batch-size 8 --seq-len 1024 --gpu h100
"""
LIVE_DEFAULTS = {"batch_size": 8, "steps": 3, "warmup": 2}
LIVE_ONLY = {"steps": "--steps", "warmup": "--warmup", "device": "--device", "threads": "--threads",
             "trace": "--trace"}
TRACE_ONLY = {"gpu": "--gpu", "calibration": "--calibration", "max_trace_mib": "--max-trace-mib"}


RUN_FLAGS = True        # cli/main.py merges --config and the run's flags (cli/run_flags.py) before compute()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from trainledger.cli.run_flags import add_config_flags, add_run_flags, bind
    parser.add_argument("--model", help="preset name or Hugging Face config.json path (needed unless --from-trace)")
    bind(parser.add_argument("--batch-size", type=common.positive_int, default=None,
                             help="sequences per step (default 8; with --from-trace and --model: the trace's, required)"),
         "--batch-size", "profile")
    add_run_flags(parser, "profile", skip=("--batch-size",),
                  types={"--precision": common._lower_refusing(common.FP8_NOT_MEASURED)},
                  helps={"--precision": "precision recipe (default: fp32 on CPU, amp-bf16 on CUDA; bytes per state: "
                                        "`trainledger memory --help`)"})
    add_config_flags(parser)
    parser.add_argument("--steps", type=common.positive_int, default=None,
                        help="timed steps, and as many profiled steps (default 3)")
    parser.add_argument("--warmup", type=common.nonnegative_int, default=None, help="untimed steps first (default 2)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="where to run (default: cuda when available, else cpu)")
    parser.add_argument("--threads", type=common.positive_int, default=None,
                        help="torch intra-op threads on CPU, at most 4 per core (default: the cores other processes "
                             "leave idle, as `train` picks them, or OMP_NUM_THREADS when set; printed); the "
                             "calibration is per thread count")
    parser.add_argument("--trace", metavar="FILE", default=None,
                        help="write the profiled steps as a Chrome/Perfetto trace (JSON; open in ui.perfetto.dev)")
    g = parser.add_argument_group("a recorded trace instead of running steps")
    g.add_argument("--from-trace", metavar="FILE", default=None,
                   help="group the steps of a torch.profiler trace (.json or .json.gz) instead of running any")
    g.add_argument("--gpu", default=None,
                   help="with --from-trace and --model: predict on this datasheet GPU (`trainledger hardware`; "
                        "default: the GPU named in the trace)")
    g.add_argument("--calibration", metavar="FILE", default=None,
                   help="with --from-trace and --model: predict with this calibration profile (from "
                        "`trainledger bench --calibrate` on the traced machine)")
    g.add_argument("--max-trace-mib", type=common.positive_int, default=None,
                   help="largest trace read, in MiB of JSON after decompression (default 1024)")
    common.add_json_flag(parser)


def compute(args) -> dict:
    if args.from_trace is not None:
        return compute_from_trace(args)
    for key, flag in TRACE_ONLY.items():
        if getattr(args, key, None) is not None:
            raise TrainledgerError(f"{flag} applies with --from-trace FILE; a live profile predicts with this "
                                   "machine's own calibration")
    if args.model is None:
        raise TrainledgerError("--model is required (a preset name or config.json), or --from-trace FILE")
    for key, value in LIVE_DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    from trainledger.measure.cpu_load import OthersCpu, check_threads, set_threads
    others = OthersCpu()          # other processes' CPU use while torch loads: which cores are idle (as train)
    if args.threads is not None:
        check_threads(args.threads)
    import torch

    from trainledger.measure.calibrate import calibrated_device
    from trainledger.measure.diagnosis import busy_line
    from trainledger.measure.profile import compare

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise TrainledgerError("--device cuda: no CUDA device is available here (use --device cpu)")
    precision = args.precision or ("fp32" if device == "cpu" else "amp-bf16")
    from trainledger.cli.plan import model_of
    spec, seq_len = model_of(args)
    if getattr(spec, "kind", None) != "transformer":
        raise TrainledgerError(f"--model {args.model}: profile runs language models (a transformer preset or config.json)")
    if args.trace is not None and not args.trace.strip():
        raise TrainledgerError("--trace needs a file name, got ''")
    if args.trace is not None:        # before the steps run: never a link, a device, a directory or a foreign file
        from trainledger.files import check_output, chrome_trace_problem
        check_output(args.trace, "--trace", "a profiler trace", chrome_trace_problem)
    threads_line = set_threads(args.threads, device, others)   # before the calibration: it is per thread count
    busy: list[str] = []
    gpu = calibrated_device(device, busy=busy)
    if not _calibrated_for(gpu, precision):
        allowed = " or ".join(r for r in ("fp32", "amp-bf16", "amp-fp16", "bf16") if _calibrated_for(gpu, r))
        raise TrainledgerError(f"--precision {precision}: this machine's {device} calibration measured "
                               f"{', '.join(gpu.gemm_efficiency)} matmuls only; use --precision {allowed}")
    result = compare(spec, gpu, batch_size=args.batch_size, seq_len=seq_len, precision=precision,
                     optimizer=args.optimizer, steps=args.steps, warmup=args.warmup, device=device,
                     trace_path=args.trace, compiled=args.compile, calibration_busy=busy[0] if busy else None)
    result["threads"] = torch.get_num_threads() if device == "cpu" else None
    result["threads_choice"] = threads_line
    from trainledger.cli.run_flags import asked, document_of
    run = asked(args).with_(batch_size=args.batch_size, seq_len=seq_len, precision=precision, zero=0)
    args.gpu = device
    result["run"] = document_of(args, run, 1)
    warnings = [line for line in (busy_line(result["measured"]),) if line]
    if warnings:     # cli/main.py prints them first (stderr): the numbers below are not the idle machine's
        result["warnings"] = warnings
    return result


def _calibrated_for(gpu, precision: str) -> bool:
    """Whether the calibration of `gpu` measured the matmuls `precision` runs."""
    from trainledger.specs.recipes import get_recipe
    try:
        return gpu.gemm_table(get_recipe(precision).compute_dtype) is not None
    except TrainledgerError:
        return False


# --- --from-trace ---------------------------------------------------------------------------------------------
def _check_trace_file(path: str) -> None:
    """A one-line error naming --from-trace when `path` is missing, unreadable or a directory (as the trace reader,
    measure/trace_read.py, says it), checked before the flags that describe the traced run."""
    import os
    import stat
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise TrainledgerError(f"--from-trace {path}: no such file") from None
    except OSError as error:
        raise TrainledgerError(f"--from-trace {path}: cannot read it ({error.strerror})") from None
    if stat.S_ISDIR(info.st_mode):
        raise TrainledgerError(f"--from-trace {path}: is a directory; give a trace file (.json or .json.gz)")


def compute_from_trace(args) -> dict:
    """`profile --from-trace FILE`: the trace's parts and diagnosis; with --model also the prediction."""
    from trainledger.measure.profile import compare_trace, measured_from_trace

    for key, flag in LIVE_ONLY.items():
        if getattr(args, key, None) is not None:
            raise TrainledgerError(f"{flag} runs steps here; it does not apply with --from-trace FILE")
    if not args.from_trace.strip():
        raise TrainledgerError("--from-trace needs a file name, got ''")
    _check_trace_file(args.from_trace)       # the file first: what the other flags describe is of no use without it
    if args.model is None:
        for key, flag in (("batch_size", "--batch-size"), ("seq_len", "--seq-len"), ("precision", "--precision"),
                          ("gpu", "--gpu"), ("calibration", "--calibration")):
            if getattr(args, key, None) is not None:
                raise TrainledgerError(f"{flag} with --from-trace describes the model to predict: give --model too")
    elif args.batch_size is None:
        raise TrainledgerError("--batch-size is required with --from-trace and --model: the sequences per step "
                               "that the traced run used")
    if args.gpu is not None and args.calibration is not None:
        raise TrainledgerError("--gpu and --calibration both name the device to predict on: give one")
    max_bytes = args.max_trace_mib * 2 ** 20 if args.max_trace_mib else None
    measured = measured_from_trace(args.from_trace, max_bytes)
    if args.model is None:
        return compare_trace(args.from_trace, measured=measured)
    from trainledger.cli.plan import model_of
    spec, seq_len = model_of(args)
    if getattr(spec, "kind", None) != "transformer":
        raise TrainledgerError(f"--model {args.model}: profile predicts language models (a transformer preset or "
                               "config.json)")
    gpu, calibrated, where = _trace_gpu(args, measured)
    precision = args.precision or ("amp-bf16" if measured["device"] == "cuda" else "fp32")
    if calibrated and not _calibrated_for(gpu, precision):
        raise TrainledgerError(f"--precision {precision}: the calibration measured "
                               f"{', '.join(gpu.gemm_efficiency)} matmuls only")
    result = compare_trace(args.from_trace, measured=measured, spec=spec, gpu=gpu, batch_size=args.batch_size,
                           seq_len=seq_len, precision=precision, optimizer=args.optimizer, calibrated=calibrated)
    result["assumptions"] = [where] + result["assumptions"]
    return result


def _trace_gpu(args, measured: dict):
    """(GPUSpec, calibrated, where it came from) to predict a trace on: --calibration, --gpu, or the trace's GPU."""
    from trainledger.specs.hardware import gpu_for_device_name

    if args.calibration is not None:
        return load_calibration(args.calibration), True, f"predicted with the calibration {args.calibration}"
    if args.gpu is not None:
        name = args.gpu.strip().lower()
        return common.resolve_gpu(args.gpu), name in ("cpu", "cuda"), f"predicted on --gpu {args.gpu}"
    if measured["device"] == "cuda" and measured.get("device_name"):
        gpu = gpu_for_device_name(measured["device_name"])
        if gpu is not None:
            return gpu, False, (f"predicted on the datasheet of {gpu.name}, the trace's {measured['device_name']} "
                                "(--gpu or --calibration to change)")
        raise TrainledgerError(f"--from-trace: the trace's GPU '{measured['device_name']}' has no datasheet entry; "
                               "give --gpu NAME (`trainledger hardware`) or --calibration FILE")
    raise TrainledgerError("--from-trace of a CPU trace with --model: give --gpu cpu (this machine's calibration) "
                           "or --calibration FILE (the traced machine's)")


MAX_CALIBRATION_BYTES = 16 * 2 ** 20


def load_calibration(path: str):
    """The GPUSpec of the calibration profile at `path` (JSON, validated; a CUDA profile on its datasheet entry)."""
    import json
    import os
    import stat

    from trainledger.specs.calibration import calibrated_gpu, check_profile
    from trainledger.specs.hardware import gpu_for_device_name

    try:
        info = os.stat(path)
    except OSError as error:
        raise TrainledgerError(f"--calibration {path}: cannot read it ({error.strerror})") from None
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_CALIBRATION_BYTES:
        raise TrainledgerError(f"--calibration {path}: not a calibration profile (a regular JSON file under "
                               "16 MiB, from `trainledger bench --calibrate`)")
    try:
        with open(path, "rb") as handle:
            profile = check_profile(json.loads(handle.read(MAX_CALIBRATION_BYTES + 1)))
    except OSError as error:
        raise TrainledgerError(f"--calibration {path}: cannot read it ({error.strerror})") from None
    except (ValueError, RecursionError) as error:
        raise TrainledgerError(f"--calibration {path}: not a valid calibration profile "
                               f"({str(error).splitlines()[0][:100] if str(error) else 'bad JSON'})") from None
    base = gpu_for_device_name(profile["device_name"]) if profile["device"] == "cuda" else None
    return calibrated_gpu(profile, base)


def render(result: dict, args) -> None:
    from trainledger import units

    if result.get("source") == "trace":
        return render_trace(result)
    meas = result["measured"]
    steps = result["steps"]
    console = common.console()
    if result.get("threads_choice"):          # the thread count `profile` picked (as train does), and why
        console.print(result["threads_choice"], soft_wrap=True)
    if result["device"] == "cuda":
        how = (f"categories: GPU kernels of {units.count_of(steps, 'profiled step')} (busy {units.format_seconds(meas['busy_seconds'])}"
               f") + idle: the unprofiled step less that (under the profiler idle was "
               f"{units.format_seconds(meas['profiled_idle_seconds'])})")
    else:
        how = (f"categories: the median of {units.count_of(steps, 'profiled step')}, each taken right after an "
               f"unprofiled one, summing to {units.format_seconds(meas['categories_sum_seconds'])} "
               f"({100 * result['categories_sum_error']:+.0f}% vs the step)")
    clock = ("median CPU time of this thread over" if meas.get("clock") == "thread_cpu" else "median of")
    caption = [f"measured step: {clock} {units.count_of(steps, 'unprofiled step')}; {how}",
               f"prediction: account/time/step.py on the calibrated {result['gpu']} ({result['assumptions'][1]})"]
    if meas.get("peak_memory_bytes"):      # RSS (the whole process) on a CPU vs the predicted tensors: said so
        from trainledger.measure.timing import PEAK_MEMORY_WORDS
        caption.append(f"memory: {PEAK_MEMORY_WORDS.get(meas['peak_memory_kind'], 'peak')} "
                       f"{units.format_bytes(meas['peak_memory_bytes'])}"
                       + (" (the whole process: Python, torch, data)" if meas["peak_memory_kind"] == "rss" else
                          " (tensors)")
                       + f" vs predicted {units.format_bytes(result['predicted']['memory_bytes'])} of tensors")
    if result.get("trace"):
        caption.append(f"trace: {result['trace']} (open in ui.perfetto.dev or chrome://tracing)")
    where = (f"{result['device']}{', ' + units.count_of(result['threads'], 'thread') if result.get('threads') else ''}")
    console.print(_parts_table(
        f"Where a step's time goes: {result['model']}, batch {result['batch_size']} × {result['seq_len']}, "
        f"{result['precision']} + {result['optimizer']} on {where}", result, caption))
    if result["device"] == "cuda":
        console.print("top kernels per step:")
        _print_top(console, meas["top_ops"])
    _print_diagnosis(console, result)


def render_trace(result: dict) -> None:
    from pathlib import Path

    from trainledger import units

    meas = result["measured"]
    n = meas["n_steps"]
    if meas["windows"] == "ProfilerStep":
        notes = [f"{n} step{'s' if n > 1 else ''} ({', '.join(meas['step_names'][:3])}{', ...' if n > 3 else ''}): "
                 "the parts add up to their mean span"]
    else:
        notes = ["no ProfilerStep#N spans in the trace: the whole trace is one window"]
    if meas["device"] == "cuda":
        notes.append(f"GPU busy {units.format_seconds(meas['busy_seconds'])} per step: the union of its "
                     f"{meas['n_kernels_per_step']:.0f} kernels, copies and memsets over streams "
                     f"({units.format_seconds(meas['overlap_seconds'])} overlapped); CPU op durations and runtime "
                     "pseudo-events" + (f" ({meas['n_runtime_pseudo_events']} Command Buffer Full and the like here)"
                                        if meas["n_runtime_pseudo_events"] else "") + " are never GPU time")
    if result.get("predicted"):
        notes.append(f"prediction: account/time/step.py for {result['model']}, batch {result['batch_size']} × "
                     f"{result['seq_len']}, {result['precision']} + {result['optimizer']}; {result['assumptions'][0]}")
    where = meas.get("device_name") or meas["device"]
    console = common.console()
    console.print(_parts_table(f"Where a step's time goes: {Path(result['trace']).name} ({where})", result, []))
    for note in notes:
        console.print(note)
    top = meas.get("top_kernels") or meas.get("top_ops") or []
    if top:
        console.print(f"top {'kernels' if meas['device'] == 'cuda' else 'CPU ops'} per step:")
        _print_top(console, top)
    _print_diagnosis(console, result)


def _parts_table(title: str, result: dict, caption: list):
    """The parts table: measured (and predicted, with the error, when there is a prediction)."""
    from trainledger import units

    pred, meas = result.get("predicted"), result["measured"]
    total = sum(meas["categories"].values()) or 1.0
    rows = []
    size = lambda k: max(meas["categories"][k], pred["categories"].get(k, 0.0) if pred else 0.0)  # noqa: E731
    for k in sorted(meas["categories"], key=lambda k: -size(k)):
        m = meas["categories"][k]
        if size(k) == 0:
            continue
        row = [k, units.format_seconds(m), f"{100 * m / total:.0f}%"]
        if pred:
            error = result["relative_error"]["categories"][k]
            row = [k, units.format_seconds(pred["categories"].get(k, 0.0))] + row[1:] + \
                [f"{100 * error:+.0f}%" if error is not None else "—"]
        rows.append(row)
    if pred:
        rows.append(["step", units.format_seconds(pred["step_seconds"]), units.format_seconds(meas["step_seconds"]),
                     "", f"{100 * result['relative_error']['step_seconds']:+.0f}%"])
        columns = ["part", "predicted", "measured", "share", "error"]
    else:
        rows.append(["step", units.format_seconds(meas["step_seconds"]), ""])
        columns = ["part", "measured", "share"]
    return common.table(title, columns, rows, caption="\n".join(caption) if caption else None)


def _print_top(console, top: list) -> None:
    """One line per kernel (or op): time and calls per step, part, short name, and the op that launched it."""
    from trainledger import units
    from trainledger.measure.trace import short_kernel_name

    for t in top:
        name = short_kernel_name(t["name"], 44)
        op = f" ← {short_kernel_name(t['op'], 18)}" if t.get("op") else ""
        console.print(f"  {units.format_seconds(t['seconds']):>9} {t['calls']:>6g}× {t['category']:<12} {name}{op}",
                      soft_wrap=True)


def _print_diagnosis(console, result: dict) -> None:
    console.print("diagnosis:")
    for line in result["diagnosis"]:
        console.print(f"  - {line}")
