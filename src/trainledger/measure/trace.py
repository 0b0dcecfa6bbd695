"""A Chrome/Kineto trace written by torch.profiler, read safely and grouped into a step's parts (pure: no torch).

    read_trace(path, max_bytes) -> Trace    streamed (.json or .json.gz), size-capped, validated; keeps only what
                                            the grouping needs: steps, CPU ops per thread, launches, GPU activities
    gpu_breakdown(trace) -> dict            per step: GPU time by part over the union of busy intervals, idle time,
                                            top kernels (with the op that launched each)
    cpu_nodes(trace) -> list[CpuNode]       the CPU ops as a tree, for measure.profile.measured_categories

The format (Chrome Trace Event Format, as Kineto writes it): {"traceEvents": [...]} (or a bare list) of events
with `ph` "X" (complete: `ts` and `dur` in µs), "s"/"f" (flow arrows: "ac2g" links a launch to its kernel),
"M" (metadata), "i" (instants). Kineto's `cat` says what an X event is: "cpu_op" and "user_annotation" (CPU
ops and record_function spans, among them `ProfilerStep#N`), "cuda_runtime"/"cuda_driver" (launch calls, with
`args.correlation`), "kernel", "gpu_memcpy", "gpu_memset" (GPU activities, with the same `args.correlation`),
"gpu_user_annotation" (a CPU span replayed on the GPU timeline) and "overhead" (the runtime's own pseudo-events,
e.g. "Command Buffer Full": a launch call waiting for room in the queue, CPU time, not GPU work). Only the
GPU activities make GPU time; runtime calls and pseudo-events never do.

Safety: the file must be a regular file (a FIFO or a device is refused before it is opened, and re-checked on
the open descriptor); at most `max_bytes` are decompressed and parsed (a gzip bomb stops there); the JSON is
streamed by ijson, never evaluated, and each kept event's fields are type-checked.
"""

from __future__ import annotations

import bisect
import gzip
import math
import os
import re
import stat
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from trainledger.errors import TrainledgerError
from trainledger.measure.categories import GPU_CATEGORIES, LaunchContext, kernel_category, span_flags

DEFAULT_MAX_BYTES = 1024 ** 3          # decompressed JSON; a Kineto event is 200-700 bytes: ~2-5M events
BYTES_PER_KEPT_EVENT = 128             # at most max_bytes / 128 events kept (~200 B each in memory): a file of
                                       # tiny planted events cannot take more memory than a real trace would
FLAG = "--from-trace"
CPU_CATS = {"cpu_op", "user_annotation", "operator"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
GPU_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset",
             "memset": "memset"}
STEP_NAME = re.compile(r"ProfilerStep#(\d+)$")
# Kineto rounds ts and dur to the ns: a child may end 1-2 ns after its parent and is still inside it.
NEST_TOLERANCE_US = 0.01


@dataclass(slots=True)
class Activity:
    """One GPU kernel, memcpy or memset: µs on the trace's clock."""
    start: float
    end: float
    name: str
    kind: str
    device: object
    stream: object
    correlation: int | None
    external_id: int | None


@dataclass
class Trace:
    """What read_trace keeps of a trace (times in µs)."""
    path: str
    device_name: str | None = None
    steps: list = field(default_factory=list)           # (name, start, end) of ProfilerStep#N spans, by start
    cpu_ops: dict = field(default_factory=dict)         # (pid, tid) -> [(start, end, name)]
    launches: dict = field(default_factory=dict)        # correlation id -> (pid, tid, ts) of the launch call
    externals: dict = field(default_factory=dict)       # External id -> (pid, tid, ts) of the CPU op holding it
    activities: list = field(default_factory=list)      # [Activity]
    n_events: int = 0
    n_runtime_pseudo_events: int = 0                    # "overhead" events (Command Buffer Full, ...): ignored


MAX_DEPTH = 32                          # Kineto nests 5 deep (traceEvents[i].args.grid[j]); ijson's cost grows
BRACKETS_ONLY = bytes(c for c in range(256) if c not in b"[]{}")   # with the square of the depth: refuse deeper


class _CappedReader:
    """A binary file-like object over `raw` that raises once more than `limit` bytes were read through it, or
    once the JSON in them nests deeper than MAX_DEPTH (counted outside strings, before the parser sees them)."""

    def __init__(self, raw, limit: int, path: str):
        self.raw, self.limit, self.path, self.count = raw, limit, path, 0
        self.depth, self.in_string, self.carry = 0, False, b""

    def read(self, size: int = -1) -> bytes:
        want = self.limit + 1 - self.count if size is None or size < 0 else min(size, self.limit + 1 - self.count)
        try:
            data = self.raw.read(max(want, 0))
        except (OSError, EOFError, zlib.error) as error:     # a corrupt or truncated gzip stream
            raise TrainledgerError(f"{FLAG} {self.path}: cannot decompress it ({error})") from None
        self.count += len(data)
        if self.count > self.limit:
            raise TrainledgerError(f"{FLAG} {self.path}: more than {self.limit / 2 ** 20:,.0f} MiB of JSON "
                                   f"(decompressed); raise --max-trace-mib if the trace is really that large")
        self._check_depth(data)
        return data

    def _check_depth(self, chunk: bytes) -> None:
        """Tracks the nesting depth of the JSON text read so far (strings and their escapes skipped)."""
        text = self.carry + chunk
        run = len(text) - len(text.rstrip(b"\\"))
        self.carry = text[-1:] if run % 2 else b""           # an escape cut in two by the chunk boundary
        text = text[:-1] if run % 2 else text
        pieces = text.replace(b"\\\\", b"").replace(b'\\"', b"").split(b'"')
        outside = b"".join(pieces[1::2] if self.in_string else pieces[0::2])
        if len(pieces) % 2 == 0:
            self.in_string = not self.in_string
        depth = self.depth
        for char in outside.translate(None, BRACKETS_ONLY):
            depth += 1 if char in (91, 123) else -1
            if depth > MAX_DEPTH:
                raise TrainledgerError(f"{FLAG} {self.path}: JSON nested deeper than {MAX_DEPTH} levels; a "
                                       "torch.profiler trace nests about 5")
        self.depth = depth


def _open_regular(path: str):
    """An open binary file of `path`, refused unless it is a regular file (checked before and after opening)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise TrainledgerError(f"{FLAG} {path}: no such file") from None
    except OSError as error:
        raise TrainledgerError(f"{FLAG} {path}: cannot read it ({error.strerror})") from None
    if stat.S_ISDIR(info.st_mode):
        raise TrainledgerError(f"{FLAG} {path}: is a directory; give a trace file (.json or .json.gz)")
    if not stat.S_ISREG(info.st_mode):
        raise TrainledgerError(f"{FLAG} {path}: not a regular file (a FIFO, socket or device); give a trace file "
                               "(.json or .json.gz)")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise TrainledgerError(f"{FLAG} {path}: cannot open it ({error.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):            # replaced between the stat and the open
        os.close(fd)
        raise TrainledgerError(f"{FLAG} {path}: not a regular file; give a trace file (.json or .json.gz)")
    return os.fdopen(fd, "rb")


def _stream(path: str, max_bytes: int):
    """(file to close, capped reader of the JSON text): gzip by its magic bytes, whatever the file is called."""
    handle = _open_regular(path)
    magic = handle.read(2)
    handle.seek(0)
    raw = gzip.GzipFile(fileobj=handle, mode="rb") if magic == b"\x1f\x8b" else handle
    return handle, _CappedReader(raw, max_bytes, path)


def _number(value, what: str, index: int, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TrainledgerError(f"{FLAG} {path}: traceEvents[{index}] has {what} {str(value)[:40]!r}; "
                               "expected a finite number of µs (is this a torch.profiler trace?)")
    return float(value)


def _key(value, what: str, index: int, path: str):
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TrainledgerError(f"{FLAG} {path}: traceEvents[{index}] has {what} {str(value)[:40]!r}; "
                               "expected a number or a string")
    return value


def _int_or_none(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _head(path: str, max_bytes: int) -> tuple[str, str | None]:
    """("object" or "array", the first device's name): reads the trace's start, up to its traceEvents."""
    import ijson

    handle, reader = _stream(path, max_bytes)
    shape, name = None, None
    try:
        with handle:
            for prefix, event, value in ijson.parse(reader, use_float=True):
                if shape is None:
                    if event not in ("start_map", "start_array"):
                        raise TrainledgerError(f"{FLAG} {path}: a trace is a JSON object with traceEvents (or a "
                                               "list of events), got a bare value")
                    shape = "object" if event == "start_map" else "array"
                    if shape == "array":
                        break
                elif prefix == "deviceProperties.item.name" and name is None and isinstance(value, str):
                    name = value
                elif prefix == "traceEvents" and event == "start_array":
                    break
    except ijson.JSONError as error:
        if reader.count == 0:
            shape = None
        else:
            raise TrainledgerError(f"{FLAG} {path}: not valid JSON ({str(error).splitlines()[0][:80]})") from None
    if shape is None:
        raise TrainledgerError(f"{FLAG} {path}: empty file; give a trace written by torch.profiler (.json, .json.gz)")
    return shape, name


def read_trace(path, max_bytes: int = DEFAULT_MAX_BYTES) -> Trace:
    """The parts of the trace at `path` that the grouping needs; a TrainledgerError (one line naming --from-trace)
    for anything that is not a readable Chrome/Kineto trace of at most `max_bytes` decompressed bytes."""
    import ijson

    path = str(path)
    shape, device_name = _head(path, max_bytes)
    trace = Trace(path=path, device_name=device_name)
    steps, names, max_kept, kept = {}, {}, max_bytes // BYTES_PER_KEPT_EVENT, 0
    handle, reader = _stream(path, max_bytes)
    prefix = "traceEvents.item" if shape == "object" else "item"
    try:
        with handle:
            for index, event in enumerate(ijson.items(reader, prefix, use_float=True)):
                trace.n_events += 1
                if not isinstance(event, dict):
                    raise TrainledgerError(f"{FLAG} {path}: traceEvents[{index}] is not an object; expected "
                                           "events like {\"ph\": \"X\", \"name\": ..., \"ts\": ..., \"dur\": ...}")
                if event.get("ph") != "X":
                    continue
                cat = str(event.get("cat", "")).lower()
                if cat == "overhead":
                    trace.n_runtime_pseudo_events += 1
                    continue
                kind = GPU_KINDS.get(cat)
                if kind is None and cat not in CPU_CATS and cat not in LAUNCH_CATS:
                    continue
                name = event.get("name")
                if not isinstance(name, str):
                    raise TrainledgerError(f"{FLAG} {path}: traceEvents[{index}] has no name (a {cat} event)")
                name = names.setdefault(name, name)         # one copy of each (kernel names run to kilobytes)
                kept += 1
                if kept > max_kept:
                    raise TrainledgerError(f"{FLAG} {path}: more than {max_kept:,} ops and kernels; raise "
                                           "--max-trace-mib if the trace is really that large")
                ts = _number(event.get("ts"), "ts", index, path)
                dur = _number(event.get("dur", 0.0), "dur", index, path)
                if dur < 0:
                    raise TrainledgerError(f"{FLAG} {path}: traceEvents[{index}] has a negative dur ({dur})")
                args = event.get("args") or {}
                if not isinstance(args, dict):
                    raise TrainledgerError(f"{FLAG} {path}: traceEvents[{index}] has args that are not an object")
                if kind is not None:
                    trace.activities.append(Activity(ts, ts + dur, name, kind,
                                                     _key(args.get("device", event.get("pid", 0)), "device", index, path),
                                                     _key(args.get("stream", event.get("tid", 0)), "stream", index, path),
                                                     _int_or_none(args.get("correlation")),
                                                     _int_or_none(args.get("External id"))))
                    continue
                thread = (_key(event.get("pid", 0), "pid", index, path), _key(event.get("tid", 0), "tid", index, path))
                if cat in LAUNCH_CATS:
                    correlation = _int_or_none(args.get("correlation"))
                    if correlation is not None:
                        trace.launches[correlation] = (*thread, ts)
                    continue
                match = STEP_NAME.match(name)
                if match:
                    steps.setdefault(int(match.group(1)), (name, ts, ts + dur))
                trace.cpu_ops.setdefault(thread, []).append((ts, ts + dur, name))
                external = _int_or_none(args.get("External id"))
                if external is not None and cat == "cpu_op":
                    trace.externals.setdefault(external, (*thread, ts))
    except ijson.JSONError as error:
        raise TrainledgerError(f"{FLAG} {path}: not valid JSON ({str(error).splitlines()[0][:80]})") from None
    if trace.n_events == 0:
        raise TrainledgerError(f"{FLAG} {path}: no trace events; expected a torch.profiler trace "
                               "({\"traceEvents\": [...]}, from prof.export_chrome_trace or tensorboard_trace_handler)")
    if not trace.cpu_ops and not trace.activities:
        raise TrainledgerError(f"{FLAG} {path}: no CPU ops and no GPU kernels among its {trace.n_events} events; "
                               "expected a torch.profiler trace")
    trace.steps = sorted(steps.values(), key=lambda s: s[1])
    return trace


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
    chosen = [(a, ctx) for a, ctx in zip(trace.activities, contexts) if a.device == device]
    chosen.sort(key=lambda pair: pair[0].start)
    windows, found = step_windows(trace, [a for a, _ in chosen])
    starts = [a.start for a, _ in chosen]
    longest = max((a.end - a.start for a, _ in chosen), default=0.0)
    sums, busy_us, overlap_us, raw_us = Counter(), 0.0, 0.0, 0.0
    kernels = {}
    n_calls = 0
    for _, w_start, w_end in windows:
        lo, hi = bisect.bisect_left(starts, w_start - longest), bisect.bisect_left(starts, w_end)
        intervals = []
        for a, ctx in chosen[lo:hi]:
            clipped = min(a.end, w_end) - max(a.start, w_start)
            if clipped <= 0 and not (a.end == a.start and w_start <= a.start < w_end):
                continue
            category = kernel_category(a.name, a.kind, ctx)
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
    names = [a.name for a, _ in chosen]
    return {"device": "cuda", "gpu_device": device, "device_name": trace.device_name,
            "windows": found, "n_steps": n, "step_names": [w[0] for w in windows],
            "step_seconds": total_us * 1e-6 / n, "step_times_s": [(w[2] - w[1]) * 1e-6 for w in windows],
            "categories": categories, "busy_seconds": busy_us * 1e-6 / n, "idle_seconds": categories["idle"],
            "overlap_seconds": overlap_us * 1e-6 / n, "n_kernels_per_step": n_calls / n, "top_kernels": top_kernels,
            "flash_used": flash_used(names, _cpu_names(trace)), "optimizer_impl": optimizer_impl(
                [a.name for a, ctx in chosen if kernel_category(a.name, a.kind, ctx) == "optimizer"]),
            "compiled": compiled(names, _cpu_names(trace)), "n_runtime_pseudo_events": trace.n_runtime_pseudo_events,
            "n_devices": len(by_device)}


def _cpu_names(trace: Trace) -> set:
    return {op[2] for ops in trace.cpu_ops.values() for op in ops}


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
