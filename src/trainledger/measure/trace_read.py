"""Reading a Chrome/Kineto trace written by torch.profiler safely: streamed, size-capped, validated (no torch).

    read_trace(path, max_bytes) -> Trace    (.json or .json.gz) only what the grouping needs: ProfilerStep#N
                                            spans, CPU ops per thread, launch calls by correlation id, GPU activities

The format (Chrome Trace Event Format, as Kineto writes it): {"traceEvents": [...]} (or a bare list) of events
with `ph` "X" (complete: `ts` and `dur` in µs), "s"/"f" (flow arrows: "ac2g" links a launch to its kernel),
"M" (metadata), "i" (instants). Kineto's `cat` says what an X event is: "cpu_op" and "user_annotation" (CPU
ops and record_function spans, among them `ProfilerStep#N`), "cuda_runtime"/"cuda_driver" (launch calls, with
`args.correlation`), "kernel", "gpu_memcpy", "gpu_memset" (GPU activities, with the same `args.correlation`),
"gpu_user_annotation" (a CPU span replayed on the GPU timeline) and "overhead" (the runtime's own pseudo-events,
e.g. "Command Buffer Full": a launch call waiting for room in the queue, CPU time, not GPU work). Only the
GPU activities make GPU time; runtime calls and pseudo-events never do (they are counted, then dropped).

Safety: the file must be a regular file (a FIFO or a device is refused before it is opened, and re-checked on
the open descriptor); at most `max_bytes` are decompressed and parsed (a gzip bomb stops there), and at most
one kept event per BYTES_PER_KEPT_EVENT of them; nesting deeper than MAX_DEPTH is refused before the parser sees
it (ijson's cost grows with its square); the JSON is streamed by ijson, never evaluated, and each kept event's
fields are type-checked. Every problem is a TrainledgerError naming --from-trace.
"""

from __future__ import annotations

import gzip
import math
import os
import re
import stat
import zlib
from dataclasses import dataclass, field

from trainledger.errors import TrainledgerError

DEFAULT_MAX_BYTES = 1024 ** 3          # decompressed JSON; a Kineto event is 200-700 bytes: ~2-5M events
# Per max_bytes of JSON, at most one event per 32 bytes (Kineto's smallest are ~80) and one kept event (an op,
# a launch, a kernel: ~200 B each in memory) per 128: a file of planted tiny events is refused, not parsed for
# minutes or held in more memory than a real trace of its size would take.
BYTES_PER_EVENT = 32
BYTES_PER_KEPT_EVENT = 128
HEAD_BYTES = 16 * 2 ** 20              # the device's name is looked for in the first 16 MiB (Kineto writes it first)
FLAG = "--from-trace"
CPU_CATS = {"cpu_op", "user_annotation", "operator"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
GPU_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset",
             "memset": "memset"}
STEP_NAME = re.compile(r"ProfilerStep#(\d+)$")


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


# ijson (yajl2_c) copies a string's bytes again for every buffer it spans: its cost grows with the square of
# the string's length (100 MB: 28 s; 300 MB: no answer in 120 s). Longer strings are refused before it sees them.
MAX_STRING_BYTES = 2 ** 20
MAX_DEPTH = 32                          # Kineto nests 5 deep (traceEvents[i].args.grid[j]); ijson's cost grows
BRACKETS_ONLY = bytes(c for c in range(256) if c not in b"[]{}")   # with the square of the depth: refuse deeper


class _CappedReader:
    """A binary file-like object over `raw` that raises once more than `limit` bytes were read through it, or
    once the JSON in them nests deeper than MAX_DEPTH (counted outside strings, before the parser sees them)."""

    def __init__(self, raw, limit: int, path: str):
        self.raw, self.limit, self.path, self.count = raw, limit, path, 0
        self.depth, self.in_string, self.carry, self.string_bytes = 0, False, b"", 0

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

    def _check_strings(self, lengths: list[int]) -> None:
        """Refuses a JSON string longer than MAX_STRING_BYTES: `lengths` are those of the string pieces of this
        chunk, the first continuing the string the previous chunk left open (self.string_bytes so far)."""
        if not lengths:
            return
        if self.in_string:
            lengths[0] += self.string_bytes
        self.string_bytes = lengths[-1]            # kept only while that string is still open (see the caller)
        if max(lengths) > MAX_STRING_BYTES:
            raise TrainledgerError(f"{FLAG} {self.path}: a JSON string longer than {MAX_STRING_BYTES // 2 ** 20} MiB "
                                   f"(before byte {self.count:,}); a torch.profiler trace's longest strings are "
                                   "kernel names of a few KB")

    def _check_depth(self, chunk: bytes) -> None:
        """Tracks the nesting depth of the JSON text read so far (strings and their escapes skipped)."""
        text = self.carry + chunk
        run = len(text) - len(text.rstrip(b"\\"))
        self.carry = text[-1:] if run % 2 else b""           # an escape cut in two by the chunk boundary
        text = text[:-1] if run % 2 else text
        pieces = text.replace(b"\\\\", b"").replace(b'\\"', b"").split(b'"')
        outside = b"".join(pieces[1::2] if self.in_string else pieces[0::2])
        self._check_strings([len(p) for p in (pieces[0::2] if self.in_string else pieces[1::2])])
        if len(pieces) % 2 == 0:
            self.in_string = not self.in_string
        if not self.in_string:
            self.string_bytes = 0
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


MAX_MICROSECONDS = 1e17                # 3,000 years: no clock a trace uses (Unix time in µs is ~1.8e15) reaches it


def _number(value, what: str, index: int, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or abs(value) > MAX_MICROSECONDS:
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
                elif (prefix == "traceEvents" and event == "start_array") or reader.count > HEAD_BYTES:
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
    max_events = max_bytes // BYTES_PER_EVENT
    handle, reader = _stream(path, max_bytes)
    prefix = "traceEvents.item" if shape == "object" else "item"
    try:
        with handle:
            for index, event in enumerate(ijson.items(reader, prefix, use_float=True)):
                trace.n_events += 1
                if trace.n_events > max_events:
                    raise TrainledgerError(f"{FLAG} {path}: more than {max_events:,} events; raise --max-trace-mib "
                                           "if the trace is really that large")
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
