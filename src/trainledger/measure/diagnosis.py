"""The diagnosis of a profiled step, in sentences: what is largest, how far the prediction is off, what to try.

    diagnose(measured, predicted=None, setup=SetUp()) -> list[str]
    largest_part(categories) -> str

Every piece of advice is checked against the set-up it is given to: a user of a foreach optimizer is never told to
"use a foreach optimizer", nor a user of a fused one to fuse it; flash attention is never suggested when flash
attention ran; torch.compile is never suggested to a compiled model; a datasheet prediction is not blamed on a
calibration that was never made.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainledger.measure.categories import ALL_CATEGORIES, WORDS

SHARE_FLAGS = {"overhead": 0.25, "idle": 0.25, "optimizer": 0.15, "data_loading": 0.10}
GAP_FRACTION = 0.05          # a gap between predicted and measured smaller than this share of the step is not named


@dataclass(frozen=True)
class SetUp:
    """What ran, as far as it is known (None: not known; then advice that depends on it is worded for both)."""
    device: str = "cpu"                  # "cpu": CPU ops grouped; "cuda": the GPU timeline
    batch_size: int | None = None
    optimizer: str | None = None         # its name, e.g. "adamw"
    optimizer_impl: str | None = None    # "foreach", "fused" or "per-tensor"
    flash_used: bool | None = None       # SDPA ran a fused kernel (True) or its math path (False)
    compiled: bool | None = None         # torch.compile ran
    calibrated: bool = True              # the prediction used rates measured on this device (not a datasheet)
    profiled_steps: bool = False         # the step times are of steps under the profiler (a trace)
    calibration_busy: str | None = None  # why the calibration behind the prediction understates the machine


def largest_part(categories: dict) -> str:
    """The category with the most time (the first of ALL_CATEGORIES' order on a tie)."""
    order = {k: i for i, k in enumerate(ALL_CATEGORIES)}
    return max(categories, key=lambda k: (categories[k], -order.get(k, len(order))))


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def diagnose(measured: dict, predicted: dict | None = None, setup: SetUp = SetUp()) -> list[str]:
    """Sentences about a step, most important first: the first names the largest measured part (with what to
    try when that part is a cost to cut); with a prediction, how far off the step is and the largest gaps (at
    least 5 % of the step); then any part over its flag (idle or overhead ≥ 25 %, optimizer ≥ 15 %, data
    loading ≥ 10 %) not yet named. `measured` and `predicted` are {step_seconds, categories}.

    Before all of these, when other processes kept the machine busy while it measured (`measured["load"]`,
    measure.profile.machine_load), a line that says so, how it was dealt with and how to measure cleanly; then,
    when the calibration behind the prediction was measured busy, a line that says that."""
    first = [line for line in (busy_line(measured), _calibration_line(setup)) if line]
    return first + _diagnose(measured, predicted, setup)


def busy_line(measured: dict) -> str | None:
    """The machine was busy while these steps ran: what other processes took, what that did to the times, and the
    cure (--threads 1, an idle machine); None when it was not (or could not be read)."""
    load = measured.get("load") or {}
    if not load.get("busy"):
        return None
    threads, cpus = load["threads"], load["cpu_count"]
    head = (f"the machine is busy: other processes kept {load['others_cpus']:.1f} of its {cpus} CPUs busy while "
            f"this measured, and its {threads} thread{'s' if threads > 1 else ''} needed {min(threads, cpus)}")
    if measured.get("clock") == "thread_cpu":
        return (f"{head}: the times are this thread's CPU time (time.thread_time), which leaves the others' turns "
                f"out (the wall-clock step took {_ms(measured['step_wall_seconds'])} ms); for wall-clock times, "
                "rerun on an idle machine")
    times = measured.get("step_times_s") or [measured["step_seconds"]]
    if measured.get("device") == "cuda" or threads == 1:       # the CPU thread that launches the kernels waited
        return (f"{head}: the thread launching the kernels waited for a CPU, so the step and the GPU's idle time "
                f"are inflated and uneven (steps took {_ms(min(times))} to {_ms(max(times))} ms); for a clean "
                "measurement rerun on an idle machine")
    return (f"{head}: threads waited for CPUs, so the times below are inflated and uneven (steps took "
            f"{_ms(min(times))} to {_ms(max(times))} ms); for a clean measurement rerun with --threads 1 (one "
            "thread's own CPU time is then measured) or on an idle machine")


def _calibration_line(setup: SetUp) -> str | None:
    if not setup.calibration_busy:
        return None
    return (f"the prediction's calibration understates this machine: {setup.calibration_busy}; re-run "
            "`trainledger bench --calibrate` on an idle machine (or with --threads 1)")


def _diagnose(measured: dict, predicted: dict | None, setup: SetUp) -> list[str]:
    cat_m = measured["categories"]
    total_m = sum(cat_m.values()) or measured["step_seconds"]
    share = {k: v / total_m for k, v in cat_m.items()}
    top = largest_part(cat_m)
    hinted = set()
    lines = []
    if _profiler_idle(share, setup):
        lines, top, hinted = _profiler_idle_lines(cat_m, total_m, share, setup), largest_part(_busy(cat_m)), {"idle"}
    line = (f"largest part: {WORDS[top]}, {_ms(cat_m[top])} of {_ms(total_m)} ms per step ({100 * share[top]:.0f} %)")
    if hinted:
        busy = sum(_busy(cat_m).values())
        line = (f"largest part of the GPU's busy time: {WORDS[top]}, {_ms(cat_m[top])} of {_ms(busy)} ms per step "
                f"({100 * cat_m[top] / busy:.0f} %)")
    hint = _cost_hint(top, share[top], setup)
    if hint:
        hinted.add(top)
    lines.append(f"{line}: {hint}" if hint else line)
    if predicted is not None:
        lines += _prediction_lines(predicted, measured, share, total_m, setup, hinted)
    for k, threshold in SHARE_FLAGS.items():
        if k in share and share[k] >= threshold and k not in hinted:
            hinted.add(k)
            lines.append(f"{WORDS[k]} is {100 * share[k]:.0f} % of the step: {_cost_hint(k, share[k], setup)}")
    return lines


def _profiler_idle(share: dict, setup: SetUp) -> bool:
    """True when GPU idle time of steps that ran under the profiler would otherwise lead or be flagged: the
    profiler's own CPU cost (it records every op and launch) widens those gaps, so they do not show a CPU-bound step."""
    return (setup.device == "cuda" and setup.profiled_steps and share.get("idle", 0.0) >= SHARE_FLAGS["idle"]
            and len(share) > 1)


def _busy(categories: dict) -> dict:
    return {k: v for k, v in categories.items() if k != "idle"}


def _profiler_idle_lines(cat_m: dict, total_m: float, share: dict, setup: SetUp) -> list[str]:
    """What GPU idle under the profiler means, said before anything that reads it as a CPU-bound step."""
    busy = sum(_busy(cat_m).values())
    return [f"profiled steps: the GPU idled {_ms(cat_m['idle'])} of {_ms(total_m)} ms per step "
            f"({100 * share['idle']:.0f} %), but these steps ran under the profiler, whose own CPU cost (it records "
            f"every op and launch) makes much of that idle: the GPU was busy {_ms(busy)} ms per step, so time an "
            f"unprofiled step (`trainledger profile --device cuda`, or your loop's step time) before calling it "
            f"CPU-bound: near {_ms(busy)} ms it is GPU-bound",
            f"if the unprofiled step is well above {_ms(busy)} ms, the GPU waits for the CPU; then "
            + _launch_hint(SetUp(**{**setup.__dict__, "profiled_steps": False}))]


def _prediction_lines(predicted, measured, share, total_m, setup, hinted) -> list[str]:
    step_p, step_m = predicted["step_seconds"], measured["step_seconds"]
    cat_p, cat_m = predicted["categories"], measured["categories"]
    error = (step_p - step_m) / step_m
    lines = [f"the {'profiled ' if setup.profiled_steps else ''}step took {_ms(step_m)} ms, predicted {_ms(step_p)} ms ({'+' if error >= 0 else ''}"
             f"{100 * error:.0f} %)"]
    keys = [k for k in cat_m if k in cat_p]
    for k in sorted(keys, key=lambda k: -abs(cat_m[k] - cat_p[k]))[:3]:
        gap = cat_m[k] - cat_p[k]
        if abs(gap) < GAP_FRACTION * total_m:
            continue
        ratio = cat_m[k] / cat_p[k] if cat_p[k] > 0 else None
        how = f"{ratio:.1f}× its prediction" if ratio is not None else "time that the model does not predict"
        if ratio is not None and ratio < 1:
            how = f"{100 * ratio:.0f} % of its prediction"
        line = f"{WORDS[k]}: {how} ({_ms(cat_m[k])} vs {_ms(cat_p[k])} ms, {100 * share[k]:.0f} % of the step)"
        hint = _gap_hint(k, gap > 0, share[k], setup) if k not in hinted or gap < 0 else ""
        if hint and gap > 0:
            hinted.add(k)
        lines.append(f"{line}: {hint}" if hint else line)
    return lines


def _optimizer_hint(setup: SetUp) -> str:
    more_tokens = "more tokens per step (a larger batch, or gradient accumulation) run it less often per token"
    name = setup.optimizer or "the optimizer"
    if setup.optimizer_impl == "fused":
        return (f"{name} is already fused (one pass over parameters, gradients and states): what is left is its "
                f"memory traffic; {more_tokens}, or shard its states over several GPUs (ZeRO / FSDP)")
    if setup.optimizer_impl == "foreach":
        return (f"{name} already runs foreach (multi-tensor) kernels, a few passes over the parameters and "
                "states; a fused optimizer does it in one pass (e.g. torch.optim.AdamW(fused=True)); or "
                f"{more_tokens}")
    if setup.optimizer_impl == "per-tensor":
        return (f"{name} updates one tensor at a time (a kernel per tensor per operation): use a foreach or "
                "fused optimizer (torch.optim.AdamW(foreach=True) or fused=True)")
    return f"a foreach or fused optimizer (one kernel per group of tensors) if it is not one already; or {more_tokens}"


def _launch_hint(setup: SetUp) -> str:
    if setup.device == "cuda":
        cures = [f"a larger --batch-size than {setup.batch_size} (more work per launch)" if setup.batch_size
                 else "a larger batch (more work per launch)"]
        if not setup.compiled:
            cures.append("torch.compile (fuses elementwise ops: fewer launches)")
        cures.append("CUDA graphs (one launch for the whole step; torch.compile(mode=\"reduce-overhead\"))")
        cures.append("fewer, larger ops (no Python loops over small tensors)")
        text = "the step is CPU-bound (launch overhead, Python between ops): " + ", ".join(cures)
        if setup.profiled_steps:
            text += ("; these steps ran under the profiler, which slows the CPU side (it records every op and "
                     "launch), so part of this idle time is the profiler's own: an unprofiled step "
                     "(`trainledger profile`, or your loop's step time) shows how much")
        return text
    batch = f"batch {setup.batch_size}" if setup.batch_size else "the batch"
    text = f"Python and dispatch between ops: {batch} is too small for this machine; raise --batch-size"
    return text + ("" if setup.compiled else ", or compile the model (torch.compile)")


def _cost_hint(category: str, share: float, setup: SetUp) -> str:
    """What to try when `category` takes `share` of the step ('' for parts that are the work itself)."""
    if category in ("overhead", "idle"):
        return _launch_hint(setup) if share >= 0.10 else ""
    if category == "optimizer":
        return _optimizer_hint(setup) if share >= 0.10 else ""
    if category == "data_loading":
        return "prefetch batches (DataLoader workers, pin_memory) so they overlap compute" if share >= 0.05 else ""
    if category == "memory_bound":
        if setup.compiled:
            return "the model is already compiled: what is left is the memory traffic of norms, casts and the loss"
        return "each unfused elementwise op reads and writes its tensors once: fuse them (torch.compile)"
    if category == "attention" and setup.flash_used is False:
        return _gap_hint("attention", True, share, setup)
    if category == "communication":
        return "overlap communication with compute (bucketed all-reduce, prefetching all-gathers), or use fewer ranks"
    return ""


def _gap_hint(category: str, slower: bool, share: float, setup: SetUp) -> str:
    """What a gap between measured and predicted in `category` suggests ('' when nothing useful)."""
    if not slower:
        return {"matmul": "this run's matmuls are faster than the rates the prediction used at these shapes "
                          + ("(re-run `trainledger bench --calibrate` on a quiet machine)" if setup.calibrated else
                             "(a calibration measured on that device predicts them better)"),
                "overhead": "fewer or cheaper ops than the model assumes",
                "idle": "the CPU keeps further ahead of the GPU than the model assumes"}.get(category, "")
    if category == "attention":
        if setup.flash_used is False:
            return ("flash attention is off: SDPA ran its math path (a mask or dtype it cannot fuse); drop the "
                    "mask or use a supported dtype")
        return "the attention kernel runs below its predicted rate at this shape (head dim, heads)"
    if category == "matmul":
        if setup.calibrated:
            return ("matmuls run below the calibrated rate: other processes share the device, or the shapes are "
                    "skinnier than calibrated (re-run `trainledger bench --calibrate` on a quiet machine)")
        return ("matmuls run below the datasheet efficiency at these shapes: a calibration measured on that device "
                "(`trainledger bench --calibrate` there) predicts them")
    if category == "memory_bound":
        return ("elementwise ops stream below the predicted bandwidth"
                + ("" if setup.compiled else ": fuse them (torch.compile)"))
    if category in ("overhead", "idle"):
        return _launch_hint(setup)
    if category == "optimizer":
        return f"its kernels are slower than their memory traffic: {_optimizer_hint(setup)}"
    return _cost_hint(category, share, setup)
