"""Where a training step's time goes: real steps under torch.profiler (or a recorded trace), grouped into the
prediction's parts, predicted vs measured, and a diagnosis.

    profile_steps(spec, ...) -> dict              measured: step_seconds (unprofiled median), categories
    measured_categories(events, ...) -> dict      CPU: seconds by category from profiler events (pure over the tree)
    measured_from_trace(path) -> dict             the same grouping for a Chrome/Kineto trace file (no torch)
    predicted_categories(breakdown) -> dict       account.time.step's breakdown in the same categories
    compare(spec, gpu, ...) -> dict               everything `trainledger profile --json` prints
    compare_trace(path, ...) -> dict              everything `trainledger profile --from-trace FILE --json` prints
    (the sentences: measure/diagnosis.py; the categories: measure/categories.py; the trace: measure/trace.py)

On CPU (CATEGORIES: matmul, attention, memory_bound, optimizer, communication, data_loading, overhead) a step runs
in three labelled regions (record_function): `trainledger.data` (drawing the batch), `trainledger.forward_backward`
and `trainledger.optimizer` (unscale, clip, step, zero_grad). Each CPU op's *own* (self) time goes to:
- data_loading and optimizer: the whole wall time of their regions (the Python of a per-tensor optimizer loop
  is the optimizer's cost; the prediction's optimizer part includes its ops' dispatch overhead to match); in a
  trace from elsewhere torch's own `Optimizer.step#...` and `enumerate(DataLoader)#...` spans count the same way;
- matmul: mm, addmm, bmm, baddbmm, matmul, linear (and ops they call that have no category of their own);
- attention: scaled_dot_product_attention and its kernels (flash, efficient, cuDNN or the math path's softmax and
  bmm, which inherit from the SDPA call);
- communication: c10d / NCCL / gloo collectives;
- overhead: metadata-only ops (view, transpose, empty, ...), the autograd engine's own bookkeeping, and the wall
  time of the step that no op accounts for (the Python between ops, the dispatcher outside ops, idle);
- memory_bound: every other op (elementwise, norms, softmax outside attention, casts, the loss, embeddings).
So the categories add up to the profiled step's wall time by construction; the profiler's own cost makes that
slower than an unprofiled step, and `categories_sum_seconds` vs `step_seconds` shows by how much.

On CUDA (GPU_CATEGORIES: "idle" instead of "overhead") the step is the GPU timeline: kernels grouped by name and
launch context (measure.categories.kernel_category), their union over streams, and idle time; see profile_steps.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from trainledger.errors import TrainledgerError
from trainledger.files import chrome_trace_problem, replace_output
from trainledger.measure.categories import (  # noqa: F401  (GPU_CATEGORIES, WORDS re-exported)
    CATEGORIES, GPU_CATEGORIES, REGIONS, WORDS, op_category)
from trainledger.measure.diagnosis import SetUp, diagnose, largest_part  # noqa: F401

# account.time.step's breakdown parts -> categories (a single device has no communication or bubble; kept for CUDA).
# A part this table does not know counts as overhead (a test checks that every part of account.time.step is here).
PART_CATEGORY = {"compute": "matmul", "attention": "attention", "memory_bound": "memory_bound",
                 "optimizer": "optimizer", "overhead": "overhead", "tp_comm": "communication",
                 "cp_comm": "communication", "pp_comm": "communication", "dp_comm": "communication",
                 "ep_comm": "communication",
                 "pipeline_bubble": "overhead"}


# --- grouping CPU ops ----------------------------------------------------------------------------------------
def _label(name: str) -> str | None:
    """The part a labelled span's whole time goes to ("data_loading", "optimizer"; "" for a label with no part of
    its own, trainledger.forward_backward), or None when `name` is not a label. Our regions, and torch's own
    spans: `Optimizer.step#...` / `Optimizer.zero_grad#...` and a DataLoader's `enumerate(DataLoader)#...`."""
    if name in REGIONS:
        return REGIONS[name] or ""
    if name.startswith(("Optimizer.step#", "Optimizer.zero_grad#")):
        return "optimizer"
    if name.startswith("enumerate(DataLoader)"):
        return "data_loading"
    return None


def _region(event) -> str | None:
    """The part of the outermost labelled span holding `event` (itself included), or None."""
    found = None
    while event is not None:
        label = _label(event.name)
        if label is not None:
            found = label
        event = event.cpu_parent
    return found or None


def event_category(event) -> str:
    """Category of `event`'s own time: its region (data, optimizer) first; then its own name; then the nearest
    ancestor that is a matmul or attention op (the math path of SDPA inherits attention); else memory-bound."""
    region = _region(event)
    if region is not None:
        return region
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


def measured_categories(events, wall_seconds: float, n_steps: int) -> dict:
    """Seconds per step by CATEGORIES from the CPU profiler `events` of `n_steps` steps that took `wall_seconds`.

    Each op's own time (self CPU time) goes to `event_category`; the data and optimizer regions count whole
    (their Python included); what remains of the wall time is overhead. Events are torch FunctionEvents or
    anything with `name`, `cpu_parent`, `self_cpu_time_total` (µs) and `time_range` (µs), such as the nodes
    measure.trace.cpu_nodes rebuilds from a trace.
    """
    seconds = dict.fromkeys(CATEGORIES, 0.0)
    for event in events:
        region = _region(event)
        if region is not None:
            if _label(event.name) and _region(event.cpu_parent) is None:    # the outermost region: all of it
                seconds[region] += _span_seconds(event)
            continue
        if _label(event.name) is not None:         # forward_backward's own time: Python, left to overhead
            continue
        seconds[event_category(event)] += event.self_cpu_time_total * 1e-6
    accounted = sum(seconds.values())
    seconds["overhead"] += max(0.0, wall_seconds - accounted)
    return {k: v / n_steps for k, v in seconds.items()}


def top_ops(events, n_steps: int, n: int = 8) -> list[dict]:
    """The `n` CPU ops with the most own time per step: [{name, category, seconds, calls}], largest first."""
    totals = {}
    for event in events:
        if _label(event.name) is not None or _region(event) == "data_loading":
            continue
        key = (event.name, event_category(event))
        seconds, calls = totals.get(key, (0.0, 0))
        totals[key] = (seconds + event.self_cpu_time_total * 1e-6 / n_steps, calls + 1)
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])[:n]
    return [{"name": name, "category": cat, "seconds": sec, "calls": calls / n_steps}
            for (name, cat), (sec, calls) in ranked]


def _span_seconds(event) -> float:
    return (event.time_range.end - event.time_range.start) * 1e-6


def predicted_categories(breakdown: dict, optimizer_overhead_seconds: float = 0.0, device: str = "cpu") -> dict:
    """account.time.step's breakdown (seconds by part) summed into the measured side's categories (data loading: not
    modelled, 0). On CPU, `optimizer_overhead_seconds` (the dispatch overhead of the optimizer's ops, inside the
    breakdown's "overhead") moves to "optimizer", as the measured optimizer region includes its Python. On CUDA
    the categories are GPU_CATEGORIES: the predicted overhead (CPU time the kernels cannot hide) is GPU idle."""
    out = dict.fromkeys(CATEGORIES, 0.0)
    for part, value in breakdown.items():
        out[PART_CATEGORY.get(part, "overhead")] += value
    moved = min(optimizer_overhead_seconds, out["overhead"])
    out["overhead"] -= moved
    out["optimizer"] += moved
    if device == "cuda":
        out["idle"] = out.pop("overhead")
    return out


def optimizer_overhead_seconds(spec, gpu, precision: str, optimizer: str) -> float:
    """Dispatch overhead of one optimizer step on one device: its ops (account.kernels.optimizer_kernels, one
    per parameter tensor and update) × the device's per-op overhead, as account.time.step counts it."""
    from trainledger.account.time.step import optimizer_dispatch_seconds
    return optimizer_dispatch_seconds(spec, gpu, precision, optimizer)


# --- a recorded trace ---------------------------------------------------------------------------------------
def measured_from_trace(path, max_bytes: int | None = None) -> dict:
    """The measured side of a Chrome/Kineto trace: on a GPU trace measure.trace.gpu_breakdown (kernels on the
    GPU timeline, idle); on a CPU-only trace the CPU ops grouped as a live CPU profile groups them, over the
    ProfilerStep#N windows (or the whole trace). Adds categories_sum_seconds, the largest part and the set-up
    read from the names (flash_used, optimizer_impl, compiled)."""
    from trainledger.measure import trace as tr

    trace = tr.read_trace(path, **({"max_bytes": max_bytes} if max_bytes else {}))
    if trace.activities:
        out = tr.gpu_breakdown(trace)
    else:
        windows, found = tr.step_windows(trace)
        nodes = [node for node in tr.cpu_nodes(trace)
                 if any(start <= node.time_range.start < end for _, start, end in windows)]
        wall_us = sum(end - start for _, start, end in windows)
        n = len(windows)
        names = {node.name for node in nodes}
        in_optimizer = [node.name for node in nodes if _region(node) == "optimizer" and node.name.startswith("aten::")]
        out = {"device": "cpu", "device_name": None, "windows": found, "n_steps": n,
               "step_names": [w[0] for w in windows], "step_seconds": wall_us * 1e-6 / n,
               "step_times_s": [(w[2] - w[1]) * 1e-6 for w in windows],
               "categories": measured_categories(nodes, wall_us * 1e-6, n), "top_ops": top_ops(nodes, n),
               "flash_used": tr.flash_used((), names), "optimizer_impl": tr.optimizer_impl(in_optimizer),
               "compiled": tr.compiled((), names), "n_runtime_pseudo_events": trace.n_runtime_pseudo_events}
    if not out["step_seconds"] > 0:
        raise TrainledgerError(f"--from-trace {path}: its {out['windows']} window{'s' if out['n_steps'] > 1 else ''} "
                               "last 0 µs; there is no time to group")
    out["categories_sum_seconds"] = sum(out["categories"].values())
    out["largest_part"] = largest_part(out["categories"])
    return out


def compare_trace(path, *, measured: dict | None = None, spec=None, gpu=None, batch_size: int | None = None,
                  seq_len: int | None = None, precision: str = "amp-bf16", optimizer: str = "adamw",
                  calibrated: bool = False, max_bytes: int | None = None) -> dict:
    """Everything `trainledger profile --from-trace FILE --json` prints: the trace's measured parts and diagnosis,
    and with a model (`spec`, `gpu`, shapes) the prediction of account.time.step.step_time beside them. `measured`:
    measured_from_trace(path), when already read."""
    measured = measured if measured is not None else measured_from_trace(path, max_bytes)
    result = {"source": "trace", "trace": str(path), "device": measured["device"],
              "device_name": measured.get("device_name"), "measured": measured}
    setup = SetUp(device=measured["device"], batch_size=batch_size, optimizer=optimizer if spec else None,
                  optimizer_impl=measured["optimizer_impl"], flash_used=measured["flash_used"],
                  compiled=measured["compiled"], calibrated=calibrated, profiled_steps=True)
    if spec is not None:
        prediction = _predict(spec, gpu, batch_size, seq_len, precision, optimizer, measured["device"],
                              flash=measured["flash_used"] is not False, compiled=bool(measured["compiled"]))
        result.update(model=spec.name, gpu=gpu.name, batch_size=batch_size, seq_len=seq_len, precision=precision,
                      optimizer=optimizer, predicted=prediction["predicted"], assumptions=prediction["assumptions"],
                      relative_error=_relative_errors(prediction["predicted"], measured))
    result["diagnosis"] = diagnose(measured, result.get("predicted"), setup)
    return result


def _predict(spec, gpu, batch_size, seq_len, precision, optimizer, device, flash=True, compiled=False) -> dict:
    """step_time of profile's own loop (loop="profile": its synchronizations and per-step host work)."""
    from trainledger.account.time.step import step_time

    from trainledger.specs.run import Hardware, Run
    run = Run().with_(batch_size=batch_size, seq_len=seq_len, precision=precision, optimizer=optimizer, zero=0,
                      flash=flash, compile=compiled, loop="profile")
    prediction = step_time(spec, Hardware(gpu, 1), run, with_memory=False)
    moved = optimizer_overhead_seconds(spec, gpu, precision, optimizer) if device == "cpu" else 0.0
    from trainledger.account.memory.per_gpu import memory_per_gpu       # the tensors, as train predicts them
    tensors = memory_per_gpu(spec, None, run.with_(impl="paper", reserve=0.0))["total_bytes"]
    return {"predicted": {"step_seconds": prediction["step_seconds"], "memory_bytes": tensors,
                          "categories": predicted_categories(prediction["breakdown"], moved, device)},
            "assumptions": prediction["assumptions"], "kernels_per_layer": prediction["kernels_per_layer"]}


def _relative_errors(predicted: dict, measured: dict) -> dict:
    errors = {k: ((predicted["categories"].get(k, 0.0) - v) / v if v > 0 else None)
              for k, v in measured["categories"].items()}
    return {"step_seconds": (predicted["step_seconds"] - measured["step_seconds"]) / measured["step_seconds"],
            "categories": errors}


# --- running steps ------------------------------------------------------------------------------------------
def profile_steps(spec, *, batch_size: int, seq_len: int, precision: str = "fp32", optimizer: str = "adamw",
                  steps: int = 3, warmup: int = 2, device: str = "cpu", trace_path=None, seed: int = 0,
                  compiled: bool = False) -> dict:
    """Runs `warmup` untimed steps, then `steps` unprofiled (timed) and `steps` profiled steps: on a CPU in turn
    (measure/profile_cpu.py: the two sides see the same machine), on CUDA one block after the other.

    Returns {step_seconds (median of the unprofiled steps), step_times_s, step_min_seconds (the fastest: the least
    disturbed by other processes, as the calibration's samples are), step_cpu_seconds (the process's CPU time per
    step, median: on one thread, the step's time without what other processes took), profiled_step_seconds
    (median), categories (seconds per step), categories_sum_seconds, flash_used, optimizer_impl, compiled,
    n_ops_per_step, top_ops, trace, load, clock, step_thread_seconds, profiled_step_thread_seconds}; on a CPU also
    profiled_step_times_s and profiled_categories (the parts averaged over the profiled steps, wall clock: what a
    replay of the trace gives). Data: random tokens drawn with trainledger.data.get_batch from an in-memory token
    array, as the training loop draws them.

    On a CPU the parts are those of the median profiled step (profile_cpu.middle_parts), so that the step and its
    parts are reduced the same way and add up within the profiler's own cost (issue 41: in two blocks, the
    tiny model's parts summed to 156.7 ms beside a 128.5 ms step on a quiet 2-core machine).

    `load` (machine_load) is how many CPUs other processes kept busy while the steps ran (measure.cpu_load:
    /proc/stat less this process's CPU time) and whether that left fewer idle than the threads needed. Then wall
    time counts the others' turns. On one CPU thread (torch runs every op and the backward on the calling thread)
    the step and its parts are both measured by that thread's CPU time instead (time.thread_time; clock
    "thread_cpu", the wall-clock median kept as step_wall_seconds): each profiled step's parts scaled to its
    thread CPU time (scaled_to). With more threads the main thread's CPU time misses the others' work, so the
    clock stays "wall" and the diagnosis says to rerun with --threads 1.

    On CPU the categories group the profiled steps' CPU ops (measured_categories). On CUDA they are the GPU
    timeline of the profiled steps, read from their Kineto trace (measure.trace.gpu_breakdown: kernels by part,
    never CPU op durations or runtime pseudo-events), with one change: the profiler slows the CPU side (it
    records every op and launch) but not the kernels, so idle is the unprofiled step less the kernels' busy time;
    the profiled steps' own idle is `profiled_idle_seconds`.
    """
    import numpy as np
    import torch
    from torch.profiler import record_function

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
                loss = model(x, y)[1]      # not `_, loss = ...`: the logits would live through backward
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

    for _ in range(warmup):
        step()
    from trainledger.measure.timing import peak_memory_bytes, peak_memory_kind
    result = (_cpu_result(step, steps, trace_path, torch.get_num_threads()) if dev.type == "cpu" else
              _cuda_result(step, steps, dev, trace_path))
    return {**result, "peak_memory_bytes": peak_memory_bytes(dev), "peak_memory_kind": peak_memory_kind(dev)}


def _cpu_result(step, steps: int, trace_path, threads: int) -> dict:
    """profile_steps on a CPU: the unprofiled and the profiled steps in turn (measure/profile_cpu.py), both
    reduced the same way (the median step, by the same clock)."""
    from trainledger.measure import trace as tr
    from trainledger.measure.profile_cpu import interleaved_steps, mean_parts, middle_parts

    run = interleaved_steps(step, steps, trace_path)
    load = machine_load([run["others_cpus"]], threads)
    walls, events = run["walls"], [e for cycle in run["events"] for e in cycle]
    per_step = [measured_categories(cycle, wall, 1) for cycle, wall in zip(run["events"], walls)]
    names = {e.name for e in events}
    result = {"step_seconds": statistics.median(run["times"]), "step_times_s": run["times"],
              "step_cpu_seconds": statistics.median(run["cpu_times"]), "step_min_seconds": min(run["times"]),
              "profiled_step_seconds": statistics.median(walls), "profiled_step_times_s": walls,
              "profiled_categories": mean_parts(per_step), "flash_used": tr.flash_used((), names),
              "optimizer_impl": "foreach",            # every optimizer of trainledger.optim is a foreach optimizer
              "compiled": tr.compiled((), names),    # a compiled model's CPU ops show its compiled regions
              "n_ops_per_step": _n_ops(events) / steps, "top_ops": top_ops(events, steps), "trace": run["trace"],
              "load": load, "step_thread_seconds": run["thread_times"],
              "profiled_step_thread_seconds": statistics.median(run["profiled_thread_times"]), "clock": "wall"}
    if load["busy"] and threads == 1:     # wall time counts the others' turns: this thread's CPU time, both sides
        per_step = [scaled_to(parts, t) for parts, t in zip(per_step, run["profiled_thread_times"])]
        result.update(clock="thread_cpu", step_wall_seconds=result["step_seconds"],
                      step_seconds=statistics.median(run["thread_times"]),
                      categories=middle_parts(per_step, run["profiled_thread_times"]))
    else:
        result["categories"] = middle_parts(per_step, walls)
    result["categories_sum_seconds"] = sum(result["categories"].values())
    return result


def _n_ops(events) -> int:
    """aten ops called from outside another aten op (what a step dispatches)."""
    return sum(1 for e in events if e.name.startswith("aten::") and e.cpu_parent is not None
               and not e.cpu_parent.name.startswith("aten::"))


def _cuda_result(step, steps: int, dev, trace_path) -> dict:
    """profile_steps on CUDA: `steps` timed steps, then `steps` profiled ones (after one profiler warm-up step);
    the parts are the profiled steps' GPU timeline, idle the unprofiled step less the kernels' busy time."""
    import tempfile

    from torch.profiler import ProfilerActivity, profile, schedule

    from trainledger.measure import trace as tr
    from trainledger.measure.cpu_load import OthersCpu
    from trainledger.measure.native_stderr import dropping_native_lines
    from trainledger.measure.timing import synchronize
    times, cpu_times, thread_times = [], [], []
    others_timed = OthersCpu()           # other processes' CPU use while the timed steps run
    for _ in range(steps):
        synchronize(dev)
        start, cpu_start, thread_start = time.perf_counter(), time.process_time(), time.thread_time()
        step()
        synchronize(dev)
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
        thread_times.append(time.thread_time() - thread_start)
    others = [others_timed.cpus()]
    walls, profiled_thread_times = [], []
    with dropping_native_lines(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], acc_events=True,
                                          schedule=schedule(wait=0, warmup=1, active=steps, repeat=1)) as prof:
        for i in range(steps + 1):
            synchronize(dev)
            if i == 1:
                others_profiled = OthersCpu()
            start, thread_start = time.perf_counter(), time.thread_time()
            step()
            synchronize(dev)
            if i >= 1:
                walls.append(time.perf_counter() - start)
                profiled_thread_times.append(time.thread_time() - thread_start)
            prof.step()
        others.append(others_profiled.cpus())
    events = prof.events()
    step_seconds = statistics.median(times)
    names = {e.name for e in events}
    result = {"step_seconds": step_seconds, "step_times_s": times,
              "step_cpu_seconds": statistics.median(cpu_times), "step_min_seconds": min(times),
              "profiled_step_seconds": statistics.median(walls), "flash_used": tr.flash_used((), names),
              "optimizer_impl": "foreach", "compiled": tr.compiled((), names),
              "n_ops_per_step": _n_ops(events) / steps, "trace": None}
    with tempfile.TemporaryDirectory() as scratch:
        path = write_trace(prof, trace_path or Path(scratch) / "trace.json")
        gpu = tr.gpu_breakdown(tr.read_trace(path))
    categories = unprofiled_categories(gpu, step_seconds)
    result.update(categories=categories, top_ops=gpu["top_kernels"], busy_seconds=gpu["busy_seconds"],
                  idle_seconds=categories["idle"], profiled_idle_seconds=gpu["idle_seconds"],
                  overlap_seconds=gpu["overlap_seconds"], n_kernels_per_step=gpu["n_kernels_per_step"],
                  flash_used=gpu["flash_used"], compiled=gpu["compiled"])
    if trace_path:
        result["trace"] = str(path)
    result.update(load=machine_load(others, 1), step_thread_seconds=thread_times,
                  profiled_step_thread_seconds=statistics.median(profiled_thread_times), clock="wall")
    result["categories_sum_seconds"] = sum(result["categories"].values())
    return result


def machine_load(others_cpus: list, threads: int) -> dict:
    """{others_cpus (the most CPUs other processes kept busy in either window: timed or profiled steps; None
    when /proc/stat cannot be read), cpu_count, threads, busy (measure.cpu_load.busy_during)}."""
    import os

    from trainledger.measure.cpu_load import busy_during

    readings = [x for x in others_cpus if x is not None]
    most = max(readings) if readings else None
    cpu_count = os.cpu_count() or 1
    return {"others_cpus": most, "cpu_count": cpu_count, "threads": threads,
            "busy": busy_during(most, cpu_count, threads)}


def scaled_to(categories: dict, total_seconds: float) -> dict:
    """`categories` scaled to add up to `total_seconds`: on a busy machine, the profiled steps' wall-clock parts
    brought down to the thread's CPU time. The process loses the CPU at moments that have nothing to do with
    which op runs, so every part stretched in proportion to its length; dividing them all by the same factor
    undoes that on average (one part may still carry more than its share of the others' turns)."""
    wall = sum(categories.values())
    return {k: v * total_seconds / wall for k, v in categories.items()} if wall > 0 else dict(categories)


def unprofiled_categories(gpu: dict, step_seconds: float) -> dict:
    """GPU categories of an unprofiled step of `step_seconds`: the kernels' parts as the profiled steps measured
    them (`gpu`, a measure.trace.gpu_breakdown), idle = the step less their busy time (0 if they are longer).

    The profiler records every CPU op and launch, which slows the CPU side and so lengthens the GPU's idle gaps,
    but it leaves the kernels' own durations alone (CUPTI timestamps them on the device)."""
    categories = dict(gpu["categories"])
    categories["idle"] = max(0.0, step_seconds - gpu["busy_seconds"])
    return categories


def write_trace(prof, path) -> Path:
    """Writes the profiler's Chrome/Perfetto trace (JSON) to `path` atomically, never through a link, onto a
    device or over a file that is no trace (files.replace_output)."""
    path = Path(path)
    with replace_output(path, "--trace", "a profiler trace", chrome_trace_problem) as tmp:
        prof.export_chrome_trace(str(tmp))
    return path


MEASURED_KEYS = ("step_seconds", "categories", "step_times_s", "step_cpu_seconds", "step_min_seconds", "clock",
                 "step_wall_seconds", "profiled_categories", "step_thread_seconds", "profiled_step_thread_seconds",
                 "load", "profiled_step_seconds", "profiled_step_times_s", "categories_sum_seconds", "flash_used", "optimizer_impl", "compiled",
                 "n_ops_per_step", "top_ops", "busy_seconds", "idle_seconds", "profiled_idle_seconds",
                 "overlap_seconds", "n_kernels_per_step", "peak_memory_bytes", "peak_memory_kind")


def compare(spec, gpu, *, batch_size: int, seq_len: int, precision: str, optimizer: str, steps: int,
            warmup: int = 2, device: str = "cpu", trace_path=None, compiled: bool = False,
            calibration_busy: str | None = None) -> dict:
    """Predicted (account.time.step.step_time on `gpu`, the calibrated device) vs measured steps, with the diagnosis.
    `calibration_busy`: why the calibration behind `gpu` understates the machine (measured busy), or None."""
    from trainledger.measure.compare import check_gpu_memory

    check_gpu_memory(spec, device, batch_size=batch_size, seq_len=seq_len, precision=precision, optimizer=optimizer,
                     what="a profiled training step")
    prediction = _predict(spec, gpu, batch_size, seq_len, precision, optimizer, device, compiled=compiled)
    measured = profile_steps(spec, batch_size=batch_size, seq_len=seq_len, precision=precision, optimizer=optimizer,
                             steps=steps, warmup=warmup, device=device, trace_path=trace_path, compiled=compiled)
    predicted = prediction["predicted"]
    measured["largest_part"] = largest_part(measured["categories"])
    setup = SetUp(device=device, batch_size=batch_size, optimizer=optimizer, optimizer_impl=measured["optimizer_impl"],
                  flash_used=measured["flash_used"], compiled=measured["compiled"], calibrated=True,
                  calibration_busy=calibration_busy)
    return {
        "source": "live", "model": spec.name, "device": device, "gpu": gpu.name, "batch_size": batch_size,
        "seq_len": seq_len, "precision": precision, "optimizer": optimizer, "steps": steps, "predicted": predicted,
        "measured": {k: measured[k] for k in MEASURED_KEYS + ("largest_part",) if k in measured},
        "relative_error": _relative_errors(predicted, measured),
        "categories_sum_error": (measured["categories_sum_seconds"] - measured["step_seconds"]) / measured["step_seconds"],
        "diagnosis": diagnose(measured, predicted, setup),
        "predicted_kernels_per_layer": prediction["kernels_per_layer"],
        "assumptions": prediction["assumptions"], "trace": measured["trace"],
    }
