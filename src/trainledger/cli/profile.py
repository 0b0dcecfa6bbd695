"""`trainledger profile`: real training steps under torch.profiler, time by part, predicted vs measured, a diagnosis."""

from __future__ import annotations

import argparse

from trainledger.cli import common
from trainledger.errors import TrainledgerError

HELP = "run a few real training steps here under torch.profiler: where the time goes, predicted vs measured"
DESCRIPTION = """Runs --warmup + --steps training steps of --model on this machine (CPU, or CUDA when present), then
--steps more under torch.profiler, and groups the measured time into the parts of the prediction:
matmul, attention, memory_bound, optimizer, communication, data_loading, overhead (Python, dispatch, idle).
The prediction is `trainledger step` (account/time.py) on this machine's calibrated device: matmul rates by
shape, memory bandwidth by op size, SDPA rates and per-op overhead measured by `trainledger bench --calibrate`
(run automatically the first time, a few seconds, then cached). The diagnosis names the largest gaps and what
to try. The measured step is the median of the unprofiled steps; the categories come from the profiled ones and
add up to their wall time (the profiler's own cost shows as the difference).

examples:
  trainledger profile --model tiny --batch-size 8 --seq-len 128
  trainledger profile --model gpt2 --batch-size 4 --seq-len 256 --trace step.json   # open in ui.perfetto.dev
  trainledger profile --model llama-3.2-1b --device cuda --precision amp-bf16 --json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="preset name or Hugging Face config.json path")
    parser.add_argument("--batch-size", type=common.positive_int, default=8, help="sequences per step (default 8)")
    parser.add_argument("--seq-len", type=common.positive_int,
                        help="tokens per sequence (default: the context the model was pre-trained at)")
    common.add_precision_flag(parser, None, "fp32 on CPU, amp-bf16 on CUDA")
    common.add_optimizer_flag(parser)
    parser.add_argument("--steps", type=common.positive_int, default=3,
                        help="timed steps, and as many profiled steps (default 3)")
    parser.add_argument("--warmup", type=common.nonnegative_int, default=2, help="untimed steps first (default 2)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="where to run (default: cuda when available, else cpu)")
    parser.add_argument("--threads", type=common.positive_int, default=None,
                        help="torch intra-op threads on CPU (default: torch's, one per core); the calibration is per thread count")
    common.add_compile_flag(parser)
    parser.add_argument("--trace", metavar="FILE", default=None,
                        help="write the profiled steps as a Chrome/Perfetto trace (JSON; open in ui.perfetto.dev)")
    common.add_json_flag(parser)


def compute(args) -> dict:
    import torch

    from trainledger.cli.plan import load_transformer
    from trainledger.measure.calibrate import calibrated_device
    from trainledger.measure.profile import compare

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise TrainledgerError("--device cuda: no CUDA device is available here (use --device cpu)")
    if args.threads is not None and device == "cpu":
        torch.set_num_threads(args.threads)
    precision = args.precision or ("fp32" if device == "cpu" else "amp-bf16")
    spec, seq_len = load_transformer(args.model, args.seq_len)
    if getattr(spec, "kind", None) != "transformer":
        raise TrainledgerError(f"--model {args.model}: profile runs language models (a transformer preset or config.json)")
    if args.trace is not None and not args.trace.strip():
        raise TrainledgerError("--trace needs a file name, got ''")
    gpu = calibrated_device(device)
    if not _calibrated_for(gpu, precision):
        allowed = " or ".join(r for r in ("fp32", "amp-bf16", "amp-fp16", "bf16") if _calibrated_for(gpu, r))
        raise TrainledgerError(f"--precision {precision}: this machine's {device} calibration measured "
                               f"{', '.join(gpu.gemm_efficiency)} matmuls only; use --precision {allowed}")
    result = compare(spec, gpu, batch_size=args.batch_size, seq_len=seq_len, precision=precision,
                     optimizer=args.optimizer, steps=args.steps, warmup=args.warmup, device=device,
                     trace_path=args.trace, compiled=args.compile)
    result["threads"] = torch.get_num_threads() if device == "cpu" else None
    return result


def _calibrated_for(gpu, precision: str) -> bool:
    """Whether the calibration of `gpu` measured the matmuls `precision` runs."""
    from trainledger.specs.recipes import get_recipe
    try:
        return gpu.gemm_table(get_recipe(precision).compute_dtype) is not None
    except TrainledgerError:
        return False


def render(result: dict, args) -> None:
    from trainledger import units

    pred, meas = result["predicted"], result["measured"]
    total = sum(meas["categories"].values()) or 1.0
    rows = []
    for k in sorted(meas["categories"], key=lambda k: -max(meas["categories"][k], pred["categories"][k])):
        p, m = pred["categories"][k], meas["categories"][k]
        if p == 0 and m == 0:
            continue
        error = result["relative_error"]["categories"][k]
        rows.append([k, units.format_seconds(p), units.format_seconds(m), f"{100 * m / total:.0f}%",
                     f"{100 * error:+.0f}%" if error is not None else "—"])
    rows.append(["step", units.format_seconds(pred["step_seconds"]), units.format_seconds(meas["step_seconds"]), "",
                 f"{100 * result['relative_error']['step_seconds']:+.0f}%"])
    where = (f"{result['device']}{', ' + str(result['threads']) + ' threads' if result.get('threads') else ''}")
    caption = [f"measured step: median of {result['steps']} unprofiled steps; categories: {result['steps']} profiled "
               f"steps, summing to {units.format_seconds(meas['categories_sum_seconds'])} "
               f"({100 * result['categories_sum_error']:+.0f}% vs the step)",
               f"prediction: account/time.py on the calibrated {result['gpu']} ({result['assumptions'][1]})"]
    if result.get("trace"):
        caption.append(f"trace: {result['trace']} (open in ui.perfetto.dev or chrome://tracing)")
    console = common.console()
    console.print(common.table(
        f"Where a step's time goes: {result['model']}, batch {result['batch_size']} × {result['seq_len']}, "
        f"{result['precision']} + {result['optimizer']} on {where}",
        ["part", "predicted", "measured", "share", "error"], rows, caption="\n".join(caption)))
    console.print("diagnosis:")
    for line in result["diagnosis"]:
        console.print(f"  - {line}")
