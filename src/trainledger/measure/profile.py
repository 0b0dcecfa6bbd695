"""Where a training step's time goes: real steps under torch.profiler, grouped into the prediction's parts.

    profile_steps(spec, ...) -> dict           measured: step_seconds (unprofiled median), categories (profiled)
    measured_categories(events, ...) -> dict   seconds by category from profiler events (pure over the event tree)
    predicted_categories(breakdown) -> dict    account.time's breakdown in the same categories
    diagnose(predicted, measured, ...) -> list the largest gaps in words, with what to try
    compare(spec, gpu, ...) -> dict            everything `trainledger profile --json` prints

Categories: matmul, attention, memory_bound, optimizer, communication, data_loading, overhead.
A step runs in three labelled regions (record_function): `trainledger.data` (drawing the batch),
`trainledger.forward_backward` and `trainledger.optimizer` (step + zero_grad). Each profiler event's *own* time
(self time; on CUDA the device time of the kernels it launched) goes to:
- data_loading and optimizer: the whole wall time of their regions (the Python of a per-tensor optimizer loop
  is the optimizer's cost; the prediction's optimizer part includes its ops' dispatch overhead to match);
- matmul: mm, addmm, bmm, baddbmm, matmul, linear (and ops they call that have no category of their own);
- attention: scaled_dot_product_attention and its kernels (flash, efficient, cuDNN or the math path's softmax and
  bmm, which inherit from the SDPA call);
- communication: c10d / NCCL / gloo collectives;
- overhead: metadata-only ops (view, transpose, empty, ...), the autograd engine's own bookkeeping, and the wall
  time of the step that no op accounts for (the Python between ops, the dispatcher outside ops, idle);
- memory_bound: every other op (elementwise, norms, softmax outside attention, casts, the loss, embeddings).
So the categories add up to the profiled step's wall time by construction; the profiler's own cost makes that
slower than an unprofiled step, and `categories_sum_seconds` vs `step_seconds` shows by how much.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from trainledger.files import atomic_path

CATEGORIES = ("matmul", "attention", "memory_bound", "optimizer", "communication", "data_loading", "overhead")
# account.time's breakdown parts -> categories (a single device has no communication or bubble; kept for CUDA)
PART_CATEGORY = {"compute": "matmul", "attention": "attention", "memory_bound": "memory_bound",
                 "optimizer": "optimizer", "overhead": "overhead", "tp_comm": "communication",
                 "cp_comm": "communication", "pp_comm": "communication", "dp_comm": "communication",
                 "pipeline_bubble": "overhead"}
REGIONS = {"trainledger.data": "data_loading", "trainledger.forward_backward": None,
           "trainledger.optimizer": "optimizer"}
MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
              "aten::addmv", "aten::mv", "aten::_addmm_activation"}
METADATA_OPS = {"aten::view", "aten::reshape", "aten::_reshape_alias", "aten::_unsafe_view", "aten::transpose",
                "aten::t", "aten::permute", "aten::expand", "aten::as_strided", "aten::unsqueeze", "aten::squeeze",
                "aten::slice", "aten::select", "aten::split", "aten::split_with_sizes", "aten::chunk", "aten::unbind",
                "aten::detach", "aten::detach_", "aten::alias", "aten::empty", "aten::empty_strided",
                "aten::empty_like", "aten::resolve_conj", "aten::resolve_neg", "aten::lift_fresh", "aten::unflatten",
                "aten::flatten", "aten::expand_as", "aten::view_as", "aten::result_type", "aten::is_nonzero",
                "aten::item", "aten::_local_scalar_dense", "detach", "aten::set_", "aten::zeros"}
WORDS = {"matmul": "matrix multiplications", "attention": "attention (SDPA)",
         "memory_bound": "memory-bound ops (norms, activations, residual adds, the loss)",
         "optimizer": "the optimizer step", "communication": "communication", "data_loading": "data loading",
         "overhead": "Python / dispatch overhead and idle time"}


# --- grouping -----------------------------------------------------------------------------------------------
def op_category(name: str) -> str | None:
    """The category an op's own time belongs to by its name, or None (then it inherits, or is memory-bound)."""
    if name in MATMUL_OPS:
        return "matmul"
    lowered = name.lower()
    if "scaled_dot_product" in lowered or "flash_attention" in lowered or "efficient_attention" in lowered \
            or "cudnn_attention" in lowered or "scaleddotproduct" in lowered:
        return "attention"
    if "c10d" in lowered or "nccl" in lowered or "gloo" in lowered or name.startswith("record_param_comms"):
        return "communication"
    if name in METADATA_OPS or name.startswith("autograd::") or name.endswith(("Backward0", "Backward1")) \
            or name == "torch::autograd::AccumulateGrad" or name.startswith("ProfilerStep"):
        return "overhead"
    return None


def _region(event) -> str | None:
    """The label of the step region `event` runs in (its outermost labelled ancestor), or None."""
    found = None
    while event is not None:
        if event.name in REGIONS:
            found = event.name
        event = event.cpu_parent
    return found


def event_category(event) -> str:
    """Category of `event`'s own time: its region (data, optimizer) first; then its own name; then the nearest
    ancestor that is a matmul or attention op (the math path of SDPA inherits attention); else memory-bound."""
    region = _region(event)
    if region is not None and REGIONS[region] is not None:
        return REGIONS[region]
    own = op_category(event.name)
    if own is not None:
        return own
    parent = event.cpu_parent
    while parent is not None:
        inherited = op_category(parent.name)
        if inherited in ("matmul", "attention", "communication"):
            return inherited
        parent = parent.cpu_parent
    return "memory_bound"


def measured_categories(events, wall_seconds: float, n_steps: int, device: str = "cpu") -> dict:
    """Seconds per step by category from profiler `events` of `n_steps` steps that took `wall_seconds` in all.

    Each op's own time (self CPU time; on CUDA self device time) goes to `event_category`; the data region (and on
    CPU the optimizer region) counts whole; what remains of the wall time is overhead (on CUDA: GPU idle). Events are torch FunctionEvents or anything with `name`,
    `cpu_parent`, `self_cpu_time_total` (µs) and, for CUDA, `self_device_time_total` (µs).
    """
    seconds = dict.fromkeys(CATEGORIES, 0.0)
    whole = ("trainledger.data",) if device == "cuda" else ("trainledger.data", "trainledger.optimizer")
    for event in events:
        if device == "cuda" and "CUDA" in str(getattr(event, "device_type", "")):
            continue                                    # kernels themselves: counted through the ops that launched them
        if event.name in REGIONS:
            if event.name in whole:                     # data (and on CPU optimizer) regions whole, their Python included
                seconds[REGIONS[event.name]] += _span_seconds(event)
            continue
        if _region(event) in whole:
            continue
        own_us = event.self_device_time_total if device == "cuda" else event.self_cpu_time_total
        seconds[event_category(event)] += own_us * 1e-6
    accounted = sum(seconds.values())
    seconds["overhead"] += max(0.0, wall_seconds - accounted)
    return {k: v / n_steps for k, v in seconds.items()}


def top_ops(events, n_steps: int, device: str = "cpu", n: int = 8) -> list[dict]:
    """The `n` ops with the most own time per step: [{name, category, seconds, calls}], largest first."""
    totals = {}
    for event in events:
        if event.name in REGIONS or _region(event) == "trainledger.data":
            continue
        own_us = event.self_device_time_total if device == "cuda" else event.self_cpu_time_total
        key = (event.name, event_category(event))
        seconds, calls = totals.get(key, (0.0, 0))
        totals[key] = (seconds + own_us * 1e-6 / n_steps, calls + 1)
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])[:n]
    return [{"name": name, "category": cat, "seconds": sec, "calls": calls / n_steps}
            for (name, cat), (sec, calls) in ranked]


def _span_seconds(event) -> float:
    return (event.time_range.end - event.time_range.start) * 1e-6


def predicted_categories(breakdown: dict, optimizer_overhead_seconds: float = 0.0) -> dict:
    """account.time's breakdown (seconds by part) summed into CATEGORIES (data loading: not modelled, 0).

    `optimizer_overhead_seconds`, the dispatch overhead of the optimizer's ops (inside the breakdown's
    "overhead"), moves to "optimizer", as the measured optimizer region includes it."""
    out = dict.fromkeys(CATEGORIES, 0.0)
    for part, value in breakdown.items():
        out[PART_CATEGORY[part]] += value
    moved = min(optimizer_overhead_seconds, out["overhead"])
    out["overhead"] -= moved
    out["optimizer"] += moved
    return out


def optimizer_overhead_seconds(spec, gpu, precision: str, optimizer: str) -> float:
    """Dispatch overhead of one optimizer step on one device: its ops (account.kernels.optimizer_kernels, one
    per parameter tensor and update) × the device's per-op overhead, as account.time counts it."""
    from trainledger.account.time import optimizer_dispatch_seconds
    return optimizer_dispatch_seconds(spec, gpu, precision, optimizer)


# --- the diagnosis ------------------------------------------------------------------------------------------
def diagnose(predicted: dict, measured: dict, *, flash_used: bool | None = None, batch_size: int = 1,
             optimizer: str = "adamw") -> list[str]:
    """Sentences naming the largest gaps between `predicted` and `measured` ({step_seconds, categories}) and
    what to try, largest first; the first says how far off the whole step is."""
    step_p, step_m = predicted["step_seconds"], measured["step_seconds"]
    cat_p, cat_m = predicted["categories"], measured["categories"]
    total_m = sum(cat_m.values()) or step_m
    error = (step_p - step_m) / step_m
    lines = [f"the step took {step_m * 1e3:.1f} ms, predicted {step_p * 1e3:.1f} ms "
             f"({'+' if error >= 0 else ''}{100 * error:.0f} %)"]
    share = {k: v / total_m for k, v in cat_m.items()}
    gaps = sorted(CATEGORIES, key=lambda k: -abs(cat_m[k] - cat_p[k]))
    for k in gaps[:3]:
        gap = cat_m[k] - cat_p[k]
        if abs(gap) < 0.05 * total_m:
            continue
        ratio = cat_m[k] / cat_p[k] if cat_p[k] > 0 else None
        how = f"{ratio:.1f}× its prediction" if ratio is not None else "time that the model does not predict"
        if ratio is not None and ratio < 1:
            how = f"{100 * ratio:.0f} % of its prediction"
        line = (f"{WORDS[k]}: {how} ({cat_m[k] * 1e3:.1f} vs {cat_p[k] * 1e3:.1f} ms, "
                f"{100 * share[k]:.0f} % of the step)")
        hint = _hint(k, gap > 0, flash_used, batch_size, optimizer)
        lines.append(f"{line}: {hint}" if hint else line)
    if share["overhead"] >= 0.25:
        lines.append(f"{100 * share['overhead']:.0f} % of the step is Python/dispatch overhead or idle: the batch "
                     f"({batch_size}) is too small to fill this machine; raise --batch-size or fuse ops (torch.compile)")
    if share["optimizer"] >= 0.15:
        lines.append(f"the optimizer is {100 * share['optimizer']:.0f} % of the step: use a foreach or fused "
                     "optimizer (torch.optim.AdamW(fused=True)), or more tokens per step (gradient accumulation)")
    if share["data_loading"] >= 0.10:
        lines.append(f"data loading is {100 * share['data_loading']:.0f} % of the step: prefetch batches "
                     "(DataLoader workers, pin_memory) so they overlap compute")
    return lines


def _hint(category: str, slower: bool, flash_used, batch_size: int, optimizer: str) -> str:
    if not slower:
        return {"matmul": "the calibrated matmul rates are slower than this run's shapes (re-run `trainledger bench "
                          "--calibrate` on a quiet machine)",
                "overhead": "fewer or cheaper ops than the model assumes"}.get(category, "")
    if category == "attention":
        return ("flash attention is off: SDPA ran its math path (a mask or dtype it cannot fuse); drop the mask or "
                "use a supported dtype" if flash_used is False else
                "the attention kernel runs below its calibrated rate at this shape (head dim, heads)")
    return {"matmul": "matmuls run below the calibrated rate: other processes share the cores, or the shapes are "
                      "skinnier than calibrated (re-run `trainledger bench --calibrate` on a quiet machine)",
            "memory_bound": "elementwise ops stream below the calibrated bandwidth: fuse them (torch.compile)",
            "overhead": f"Python and dispatch between ops: batch {batch_size} is too small for this machine; raise "
                        "--batch-size, or compile the model (torch.compile)",
            "optimizer": f"the {optimizer} step is slower than its memory traffic: use a foreach or fused optimizer",
            "data_loading": "prefetch batches in a DataLoader with workers",
            "communication": "overlap communication with compute, or use fewer ranks"}.get(category, "")


# --- running steps ------------------------------------------------------------------------------------------
def profile_steps(spec, *, batch_size: int, seq_len: int, precision: str = "fp32", optimizer: str = "adamw",
                  steps: int = 3, warmup: int = 2, device: str = "cpu", trace_path=None, seed: int = 0,
                  compiled: bool = False) -> dict:
    """Runs `warmup` + `steps` timed steps, then `steps` steps under torch.profiler (after one profiler warm-up step).

    Returns {step_seconds (median of the timed steps), step_times_s, step_min_seconds (the fastest: the least
    disturbed by other processes, as the calibration's samples are), step_cpu_seconds (the process's CPU time per
    step, median: on one thread, the step's time without what other processes took), profiled_step_seconds, categories (seconds
    per profiled step), categories_sum_seconds, flash_used, n_ops_per_step, trace}. Data: random tokens drawn
    with trainledger.data.get_batch from an in-memory token array, as the training loop draws them.
    """
    import numpy as np
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    from trainledger.data import get_batch
    from trainledger.models import build_model
    from trainledger.optim import build_optimizer, clip_grad_norm_
    from trainledger.models.precision import autocast, grad_scaler, param_dtype

    torch.manual_seed(seed)
    dev = torch.device(device)
    model = build_model(spec).to(device=dev, dtype=param_dtype(precision))
    params = list(model.parameters())
    if compiled:          # --compile: the steps run the model under torch.compile (the parameters are shared)
        model = torch.compile(model)
    opt = build_optimizer(optimizer, params, lr=1e-4)
    scaler = grad_scaler(precision, dev)
    tokens = np.random.default_rng(seed).integers(0, spec.vocab_size, size=max(1 << 16, 4 * batch_size * seq_len),
                                                  dtype=np.int64)

    def step():
        with record_function("trainledger.data"):
            x, y = get_batch(tokens, batch_size, seq_len, device)
        with record_function("trainledger.forward_backward"):
            with autocast(precision, dev):
                _, loss = model(x, y)
            (scaler.scale(loss) if scaler else loss).backward()
        with record_function("trainledger.optimizer"):     # as the trainer steps: unscale, clip, step
            if scaler:
                scaler.unscale_(opt)
            clip_grad_norm_(params, 1.0)
            if scaler:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            opt.zero_grad(set_to_none=True)

    from trainledger.measure.timing import synchronize
    for _ in range(warmup):
        step()
    times, cpu_times = [], []
    for _ in range(steps):
        synchronize(dev)
        start, cpu_start = time.perf_counter(), time.process_time()
        step()
        synchronize(dev)
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    walls = []
    with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
                 acc_events=True) as prof:
        for i in range(steps + 1):
            synchronize(dev)
            start = time.perf_counter()
            step()
            synchronize(dev)
            if i >= 1:
                walls.append(time.perf_counter() - start)
            prof.step()
    events = prof.events()
    categories = measured_categories(events, sum(walls), steps, dev.type)
    names = {e.name for e in events}
    flash_used = any("flash" in n or "efficient_attention" in n or "cudnn_attention" in n for n in names) \
        if any("scaled_dot_product" in n for n in names) else None
    result = {"step_seconds": statistics.median(times), "step_times_s": times,
              "step_cpu_seconds": statistics.median(cpu_times), "step_min_seconds": min(times),
              "profiled_step_seconds": statistics.median(walls), "categories": categories,
              "categories_sum_seconds": sum(categories.values()), "flash_used": flash_used,
              "n_ops_per_step": sum(1 for e in events if e.name.startswith("aten::") and e.cpu_parent is not None
                                    and not e.cpu_parent.name.startswith("aten::")) / steps,
              "top_ops": top_ops(events, steps, dev.type), "trace": None}
    if trace_path:
        result["trace"] = str(write_trace(prof, trace_path))
    return result


def write_trace(prof, path) -> Path:
    """Writes the profiler's Chrome/Perfetto trace (JSON) to `path` atomically."""
    path = Path(path)
    with atomic_path(path) as tmp:
        prof.export_chrome_trace(str(tmp))
    return path


def compare(spec, gpu, *, batch_size: int, seq_len: int, precision: str, optimizer: str, steps: int,
            warmup: int = 2, device: str = "cpu", trace_path=None, compiled: bool = False) -> dict:
    """Predicted (account.time.step_time on `gpu`, the calibrated device) vs measured steps, with the diagnosis."""
    from trainledger.account.time import step_time

    prediction = step_time(spec, gpu, batch_size=batch_size, seq_len=seq_len, num_gpus=1, precision=precision,
                           optimizer=optimizer, zero=0, flash=True, with_memory=False, compiled=compiled,
                           loop="profile")
    measured = profile_steps(spec, batch_size=batch_size, seq_len=seq_len, precision=precision, optimizer=optimizer,
                             steps=steps, warmup=warmup, device=device, trace_path=trace_path, compiled=compiled)
    predicted = {"step_seconds": prediction["step_seconds"],
                 "categories": predicted_categories(prediction["breakdown"],
                                                    optimizer_overhead_seconds(spec, gpu, precision, optimizer))}
    errors = {k: ((predicted["categories"][k] - v) / v if v > 0 else None) for k, v in measured["categories"].items()}
    return {
        "model": spec.name, "device": device, "gpu": gpu.name, "batch_size": batch_size, "seq_len": seq_len,
        "precision": precision, "optimizer": optimizer, "steps": steps, "predicted": predicted,
        "measured": {k: measured[k] for k in ("step_seconds", "categories", "step_times_s", "step_cpu_seconds", "step_min_seconds",
                                              "profiled_step_seconds",
                                              "categories_sum_seconds", "flash_used", "n_ops_per_step", "top_ops")},
        "relative_error": {"step_seconds": (predicted["step_seconds"] - measured["step_seconds"]) / measured["step_seconds"],
                           "categories": errors},
        "categories_sum_error": (measured["categories_sum_seconds"] - measured["step_seconds"]) / measured["step_seconds"],
        "diagnosis": diagnose(predicted, measured, flash_used=measured["flash_used"], batch_size=batch_size,
                              optimizer=optimizer),
        "predicted_kernels_per_layer": prediction["kernels_per_layer"],
        "assumptions": prediction["assumptions"], "trace": measured["trace"],
    }
