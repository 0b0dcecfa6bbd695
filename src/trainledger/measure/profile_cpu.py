"""`profile`'s steps on a CPU: unprofiled and profiled steps taken in turn, so that both are measured alike.

    interleaved_steps(step, steps, trace_path) -> dict   the timed and the profiled steps, one pair at a time
    middle_parts(parts, totals) -> dict                  the parts of the median step (or the mean of the two middle ones)

Why in turn. The measured step is the median of unprofiled steps and its parts come from profiled ones (the
profiler's own cost stays out of the step). Taken in two blocks — first every unprofiled step, then every
profiled one, as before — the two blocks saw different machines: on a shared 2-core virtual machine the same
step's time moved by 20-40 % within seconds (other guests, the host's clock), so the parts of the tiny model
(batch 8 × 256) summed to 156.7 ms beside a 128.5 ms step, and those of a 256-wide GPT to 1,254 ms beside
872 ms (issue 41). Here each unprofiled step is followed by one profiler warm-up step (untimed: torch.profiler's
schedule, whose first recorded step otherwise pays the profiler's start) and one profiled step, `steps` times
over (schedule(wait=1, warmup=1, active=1, repeat=steps)), so both sides see the same machine, and both are
reduced the same way: the step is the median of its unprofiled steps, the parts are those of the median
profiled step (measured with the same clock: wall time, or on a busy machine with one thread that thread's CPU
time, time.thread_time, for both). The profiler's own cost per op remains in the parts; on this machine's
quiet moments it was a few per cent of the step (tiny, one thread: 201-221 ms unprofiled, 206-223 ms
profiled, 2026-12-02).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
import warnings
from pathlib import Path


def interleaved_steps(step, steps: int, trace_path=None) -> dict:
    """Runs `steps` pairs of (unprofiled step, profiler warm-up step, profiled step) of `step()` on the CPU.

    Returns {times, cpu_times, thread_times (the unprofiled steps: wall, process CPU and this thread's CPU time),
    walls, profiled_thread_times (the profiled steps), events (one list of torch FunctionEvents per profiled
    step), others_cpus (other processes' CPUs over the whole run, measure.cpu_load), trace (the path written, or
    None)}. With `trace_path` the profiled steps' traces are merged into one Chrome/Perfetto file there."""
    from torch.profiler import ProfilerActivity, profile, schedule

    from trainledger.measure.cpu_load import OthersCpu
    from trainledger.measure.native_stderr import dropping_native_lines

    times, cpu_times, thread_times, walls, profiled_thread_times, events = [], [], [], [], [], []
    scratch = tempfile.TemporaryDirectory() if trace_path else None
    cycle_traces: list[Path] = []

    def ready(prof):                      # the end of each cycle: its profiled step's events (and trace)
        events.append(list(prof.events()))
        if scratch is not None:
            cycle_traces.append(Path(scratch.name) / f"cycle{len(cycle_traces)}.json")
            prof.export_chrome_trace(str(cycle_traces[-1]))

    others = OthersCpu()
    with warnings.catch_warnings():       # each cycle's events are taken by `ready`: the clearing is intended
        warnings.filterwarnings("ignore", message=".*[Pp]rofiler clears events.*")
        with dropping_native_lines(), profile(activities=[ProfilerActivity.CPU], on_trace_ready=ready,
                                              schedule=schedule(wait=1, warmup=1, active=1, repeat=steps)) as prof:
            for i in range(3 * steps):
                start, cpu_start, thread_start = time.perf_counter(), time.process_time(), time.thread_time()
                step()
                wall, cpu, thread = (time.perf_counter() - start, time.process_time() - cpu_start,
                                     time.thread_time() - thread_start)
                if i % 3 == 0:            # wait: the profiler is off
                    times.append(wall)
                    cpu_times.append(cpu)
                    thread_times.append(thread)
                elif i % 3 == 2:          # active: recorded
                    walls.append(wall)
                    profiled_thread_times.append(thread)
                prof.step()
    out = {"times": times, "cpu_times": cpu_times, "thread_times": thread_times, "walls": walls,
           "profiled_thread_times": profiled_thread_times, "events": events, "others_cpus": others.cpus(),
           "trace": None}
    if scratch is not None:
        with scratch:
            out["trace"] = str(merge_traces(cycle_traces, trace_path))
    return out


def merge_traces(paths: list[Path], out_path) -> Path:
    """One Chrome/Kineto trace holding the events of every trace in `paths` (the cycles of one profiler: the same
    clock base, so their timestamps line up), written atomically to `out_path` (files.replace_output)."""
    from trainledger.files import chrome_trace_problem, replace_output

    merged = None
    for path in paths:
        trace = json.loads(Path(path).read_text())
        if merged is None:
            merged = trace
        else:
            merged["traceEvents"].extend(trace.get("traceEvents", []))
    out_path = Path(out_path)
    with replace_output(out_path, "--trace", "a profiler trace", chrome_trace_problem) as tmp, open(tmp, "w") as handle:
        json.dump(merged or {"traceEvents": []}, handle)
    return out_path


def middle_parts(parts: list[dict], totals: list[float]) -> dict:
    """The parts of the median step: `parts[i]` (seconds by category) of the step whose `totals[i]` is the median,
    or the mean of the two middle steps' parts for an even count; they add up to statistics.median(totals) when
    each step's parts add up to its total."""
    order = sorted(range(len(totals)), key=totals.__getitem__)
    middle = order[(len(order) - 1) // 2: len(order) // 2 + 1]
    return {k: statistics.fmean(parts[i][k] for i in middle) for k in parts[middle[0]]}


def mean_parts(parts: list[dict]) -> dict:
    """Seconds by category averaged over steps (what a replay of the merged trace groups)."""
    return {k: statistics.fmean(p[k] for p in parts) for k in parts[0]}
