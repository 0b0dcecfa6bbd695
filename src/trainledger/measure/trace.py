"""A Chrome/Kineto trace written by torch.profiler, grouped into a step's parts (pure: no torch).

    read_trace(path, max_bytes) -> Trace    measure/trace_read.py: streamed, size-capped, validated
    gpu_breakdown(trace) -> dict            per step: GPU time by part over the union of busy intervals, idle time,
                                            top kernels (with the op that launched each)
    cpu_nodes(trace) -> list[CpuNode]       the CPU ops as a tree, for measure.profile.measured_categories
    flash_used / optimizer_impl / compiled  the set-up a trace shows, from its names

A GPU activity's launch context is found by its correlation id (the runtime call that launched it, then the
CPU ops holding that call on its thread, by time containment: Kineto writes no parent links), else by its
External id (the CPU op itself).
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from dataclasses import dataclass

from trainledger.measure.categories import GPU_CATEGORIES, LaunchContext, kernel_category, span_flags
from trainledger.measure.trace_read import (  # noqa: F401  (re-exported)
    DEFAULT_MAX_BYTES, Activity, Trace, read_trace)

# Kineto rounds ts and dur to the ns: a child may end 1-2 ns after its parent and is still inside it.
NEST_TOLERANCE_US = 0.01


# --- the CPU side as trees: which ops enclose a moment on a thread --------------------------------------------
class ThreadTree:
    """The ops of one thread, nested by time containment (Kineto writes no parent links): ops[i] = (start, end,
    name), parent[i] the index of the innermost op holding op i (or -1)."""

    def __init__(self, ops: list):
        self.ops = sorted(ops, key=lambda op: (op[0], -op[1]))
        self.starts = [op[0] for op in self.ops]
        self.parent = [-1] * len(self.ops)
        stack = []
        for i, (_, end, _) in enumerate(self.ops):
            while stack and self.ops[stack[-1]][1] + NEST_TOLERANCE_US < end:   # ends before i does: not its parent
                stack.pop()
            self.parent[i] = stack[-1] if stack else -1
            stack.append(i)
        self._context = {}

    def innermost(self, ts: float) -> int:
        """Index of the innermost op holding the moment `ts`, or -1."""
        i = bisect.bisect_right(self.starts, ts) - 1
        while i >= 0 and self.ops[i][1] < ts:
            i = self.parent[i]
        return i

    def context(self, i: int) -> LaunchContext:
        """The LaunchContext of op i: its own and its ancestors' flags, its name as the innermost op."""
        if i < 0:
            return LaunchContext()
        if i not in self._context:
            chain = []
            j = i
            while j >= 0 and j not in self._context:
                chain.append(j)
                j = self.parent[j]
            above = self._context.get(j, LaunchContext()) if j >= 0 else LaunchContext()
            for j in reversed(chain):
                optimizer, data, attention = span_flags(self.ops[j][2])
                above = LaunchContext(above.optimizer or optimizer, above.data or data, above.attention or attention,
                                      self.ops[j][2])
                self._context[j] = above
        return self._context[i]


def launch_contexts(trace: Trace) -> list[LaunchContext]:
    """For each GPU activity, the CPU context of its launch: found by its correlation id (the runtime call that
    launched it, then the ops holding that call on its thread), else by its External id (the op itself)."""
    trees = {thread: ThreadTree(ops) for thread, ops in trace.cpu_ops.items()}
    out = []
    for activity in trace.activities:
        site = trace.launches.get(activity.correlation) if activity.correlation is not None else None
        if site is None and activity.external_id is not None:
            site = trace.externals.get(activity.external_id)
        tree = trees.get(site[:2]) if site is not None else None
        out.append(tree.context(tree.innermost(site[2])) if tree is not None else LaunchContext())
    return out


# --- the GPU side: parts of each step window -----------------------------------------------------------------
def step_windows(trace: Trace, activities=None) -> tuple[list, str]:
    """([(name, start, end)], how found): the ProfilerStep#N spans, or else the whole trace as one window."""
    if trace.steps:
        return list(trace.steps), "ProfilerStep"
    times = [(a.start, a.end) for a in (activities if activities is not None else trace.activities)]
    times += [(op[0], op[1]) for ops in trace.cpu_ops.values() for op in ops]
    return [("whole trace", min(t[0] for t in times), max(t[1] for t in times))], "whole trace"


def split_busy_time(intervals: list, start: float, end: float) -> tuple[dict, float]:
    """({category: µs}, busy µs) of `intervals` [(start, end, category)] clipped to [start, end).

    Busy time is the union of the intervals (kernels on several streams that overlap count once); where k of
    them overlap, each gets 1/k of that time, so the categories add up to the busy time exactly."""
    edges = []
    for a, b, category in intervals:
        a, b = max(a, start), min(b, end)
        if b > a:
            edges.append((a, 1, category))
            edges.append((b, -1, category))
    edges.sort(key=lambda e: (e[0], e[1]))
    seconds, active, busy, last = Counter(), Counter(), 0.0, None
    n_active = 0
    for t, step, category in edges:
        if n_active and last is not None and t > last:
            length = t - last
            busy += length
            for cat, n in active.items():
                if n:
                    seconds[cat] += length * n / n_active
        active[category] += step
        n_active += step
        last = t
    return dict(seconds), busy


def gpu_breakdown(trace: Trace, top: int = 8) -> dict:
    """GPU time per step by GPU_CATEGORIES (seconds), from the GPU activities of the busiest device.

    Each step window (a ProfilerStep#N span; the whole trace if there is none) = busy time (the union of its
    kernels, memcpys and memsets, split by part) + idle (the rest): the parts add up to the window exactly. A
    kernel spanning two windows counts in each for its share. Returns {step_seconds (mean window), step_times_s,
    windows (how they were found), n_steps, categories, busy_seconds, idle_seconds, overlap_seconds (kernel time
    hidden by overlap between streams), top_kernels, device, n_kernels_per_step, flash_used, optimizer_impl,
    compiled, n_runtime_pseudo_events}."""
    by_device = defaultdict(float)
    for a in trace.activities:
        by_device[a.device] += a.end - a.start
    device = max(by_device, key=by_device.get)
    contexts = launch_contexts(trace)
    chosen = sorted(((a, ctx, kernel_category(a.name, a.kind, ctx))
                     for a, ctx in zip(trace.activities, contexts) if a.device == device), key=lambda c: c[0].start)
    windows, found = step_windows(trace, [a for a, _, _ in chosen])
    starts = [a.start for a, _, _ in chosen]
    longest = max((a.end - a.start for a, _, _ in chosen), default=0.0)
    sums, busy_us, overlap_us, raw_us = Counter(), 0.0, 0.0, 0.0
    kernels = {}
    n_calls = 0
    for _, w_start, w_end in windows:
        lo, hi = bisect.bisect_left(starts, w_start - longest), bisect.bisect_left(starts, w_end)
        intervals = []
        for a, ctx, category in chosen[lo:hi]:
            clipped = min(a.end, w_end) - max(a.start, w_start)
            if clipped <= 0 and not (a.end == a.start and w_start <= a.start < w_end):
                continue
            intervals.append((a.start, a.end, category))
            raw_us += max(clipped, 0.0)
            n_calls += 1
            entry = kernels.setdefault((a.name, category), [0.0, 0, Counter()])
            entry[0] += max(clipped, 0.0)
            entry[1] += 1
            entry[2][ctx.op] += 1
        seconds, busy = split_busy_time(intervals, w_start, w_end)
        sums.update(seconds)
        busy_us += busy
    n = len(windows)
    total_us = sum(w_end - w_start for _, w_start, w_end in windows)
    categories = {k: sums.get(k, 0.0) * 1e-6 / n for k in GPU_CATEGORIES}
    categories["idle"] = (total_us - busy_us) * 1e-6 / n
    overlap_us = raw_us - busy_us
    ranked = sorted(kernels.items(), key=lambda kv: -kv[1][0])[:top]
    top_kernels = [{"name": name, "category": category, "seconds": us * 1e-6 / n, "calls": calls / n,
                    "op": ops.most_common(1)[0][0]} for (name, category), (us, calls, ops) in ranked]
    names, cpu_names = [a.name for a, _, _ in chosen], {op[2] for ops in trace.cpu_ops.values() for op in ops}
    return {"device": "cuda", "gpu_device": device, "device_name": trace.device_name,
            "windows": found, "n_steps": n, "step_names": [w[0] for w in windows],
            "step_seconds": total_us * 1e-6 / n, "step_times_s": [(w[2] - w[1]) * 1e-6 for w in windows],
            "categories": categories, "busy_seconds": busy_us * 1e-6 / n, "idle_seconds": categories["idle"],
            "overlap_seconds": overlap_us * 1e-6 / n, "n_kernels_per_step": n_calls / n, "top_kernels": top_kernels,
            "flash_used": flash_used(names, cpu_names),
            "optimizer_impl": optimizer_impl([a.name for a, _, category in chosen if category == "optimizer"]),
            "compiled": compiled(names, cpu_names), "n_runtime_pseudo_events": trace.n_runtime_pseudo_events,
            "n_devices": len(by_device)}


# --- what the set-up was, read from the names -----------------------------------------------------------------
def flash_used(kernel_names, op_names) -> bool | None:
    """True if SDPA ran a fused kernel (flash, memory-efficient, cuDNN), False if only its math path ran, None if
    the trace has no SDPA at all."""
    fused = ("flash", "efficient_attention", "cudnn_attention", "fmha", "sdpa")
    if any(any(word in name.lower() for word in fused) for name in list(kernel_names) + list(op_names)):
        return True
    return False if any("scaled_dot_product" in name for name in op_names) else None


def optimizer_impl(names) -> str | None:
    """"fused", "foreach" or "per-tensor": how the optimizer's kernels (or CPU ops) show it ran; None if unseen."""
    lowered = [name.lower() for name in names]
    if not lowered:
        return None
    if any("fused" in name for name in lowered):
        return "fused"
    if any("multi_tensor_apply" in name or "_foreach_" in name for name in lowered):
        return "foreach"
    return "per-tensor"


def compiled(kernel_names, op_names) -> bool:
    """Whether torch.compile ran: Inductor's Triton kernels or a compiled region in the CPU ops."""
    return any(name.startswith("triton_") for name in kernel_names) or \
        any("Torch-Compiled Region" in name or "CompiledFunction" in name for name in op_names)


# --- the CPU side as FunctionEvent-like nodes -----------------------------------------------------------------
@dataclass
class _Range:
    start: float
    end: float


@dataclass(eq=False)
class CpuNode:
    """A CPU op of a trace with what measure.profile's grouping reads from a torch FunctionEvent: name,
    cpu_parent, self_cpu_time_total (µs: its duration less its children's) and time_range (µs)."""
    name: str
    cpu_parent: "CpuNode | None"
    self_cpu_time_total: float
    time_range: _Range


def cpu_nodes(trace: Trace) -> list[CpuNode]:
    """Every CPU op of the trace, nested per thread by time containment, with its own (self) time."""
    nodes = []
    for ops in trace.cpu_ops.values():
        tree = ThreadTree(ops)
        made = []
        children_us = [0.0] * len(tree.ops)
        for i, (start, end, _) in enumerate(tree.ops):
            if tree.parent[i] >= 0:
                children_us[tree.parent[i]] += end - start
        for i, (start, end, name) in enumerate(tree.ops):
            parent = made[tree.parent[i]] if tree.parent[i] >= 0 else None
            made.append(CpuNode(name, parent, max(0.0, end - start - children_us[i]), _Range(start, end)))
        nodes += made
    return nodes


def short_kernel_name(name: str, width: int = 60) -> str:
    """A kernel's name for a table: without `void `, `(anonymous namespace)::` and its argument list, cut to
    `width` characters (JSON keeps the full name)."""
    text = name.replace("(anonymous namespace)::", "")
    text = text[5:] if text.startswith("void ") else text
    depth = 0
    for i, char in enumerate(text):
        depth += {"<": 1, ">": -1}.get(char, 0)
        if char == "(" and depth == 0 and i > 0:
            text = text[:i]
            break
    return text if len(text) <= width else text[:width - 1] + "…"
