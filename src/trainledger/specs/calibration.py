"""A machine's calibration profile (what `trainledger bench --calibrate` measured) as data, and the GPUSpec it makes.

The profile is a plain JSON object, written by measure/calibrate.py and read back here without torch:

    format "trainledger-calibration", version 1 | 2, device "cpu" | "cuda", device_name, host, torch_version,
    threads (torch intra-op threads, CPU), created_utc, calibration_seconds,
    peak_flops_per_s {dtype: FLOP/s}, peak_source         the ceiling the fractions below are taken of
    gemm {dtype: [[m, n, k, flops_per_s], ...]}           C[m,n] = A[m,k]·B[k,n], fastest of timed samples
    memory [[bytes_per_op, bytes_per_s], ...]             out-of-place adds: 3 · n · 4 bytes per op, by size
    elementwise {kernel name: [[bytes_per_op, bytes_per_s], ...]}   (optional) ops that are not plain streams,
                                                          named as account/time/kernels.py names them, bytes counted
                                                          as it does (tanh-GELU: 8, its backward 12 per fp32 element;
                                                          cross_entropy 12, its backward 20 per logit; version 1
                                                          counted 8 and 16 and is converted on load)
    attention {dtype, head_dim, heads, points [[seq_len, fwd_flops_per_s, bwd_flops_per_s], ...],
               other_head_dims [{head_dim, points}, ...] (version 2)}
                                                          causal SDPA, FLOPs as executed (half the T×T square)
    op_overhead_seconds                                   CPU seconds per dispatched op that launches a kernel,
                                                          under autograd (forward and backward)
    decode_op_overhead_seconds                            (optional) CPU seconds per dispatched op of a KV-cache decoding
                                                          step of our Transformer at a negligible size (inference mode)
    memory_bytes                                          RAM (CPU) or device memory (CUDA)
  version 2 adds:
    gpu_timed (CUDA)                                      the rates above are device time (CUDA events around a
                                                          queue kept full), not wall time per call
    kernel_overhead_seconds (CUDA)                        device time per back-to-back tiny kernel
    host_op_seconds                                       CPU seconds per op that launches nothing (a view)
    launch_seconds                                        CPU seconds per launch without autograd (compiled code)
    optimizer_tensor_seconds                              CPU seconds of the optimizer's Python per parameter tensor

Version 1 on CUDA timed each call by the wall clock: where the CPU's dispatch took longer than the kernel (small
matmuls, adds and attention), a rate is the CPU's, not the GPU's. Such points are dropped on load: a point is
dispatch-bound when its time per call is within twice the longest per-call time of the points that certainly
are (those the table's best rate would finish in under a tenth of their measured time). Its SDPA rates (one head
size, 16 heads, batch 1) give way to the GPU's published kernel tables where there are some.

`check_profile` rejects anything else, with bounds (finite positive rates within physical limits, sane sizes,
at most 5,000 rows per table): a bad cached file is named and measured again; a bad `--calibration FILE` is an
error naming the file and the field. `read_profile` parses JSON only (never unpickles), refusing files over
4 MiB or nested deeper than the format (no RecursionError on hostile input). Pure, no torch.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

from trainledger.errors import TrainledgerError
from trainledger.specs.hardware import GPUSpec
from trainledger.specs.performance import AttentionEfficiency, GemmEfficiency

FORMAT = "trainledger-calibration"
VERSION = 2
VERSIONS = (1, 2)
DEVICES = ("cpu", "cuda")
MAX_FILE_BYTES = 4 * 2**20
MAX_DEPTH = 6                      # {attention: {other_head_dims: [{points: [[...]]}]}}: 5 levels
MAX_ROWS = 5000
# (low, high) of each kind of figure: outside, a file is damaged or forged, not measured
BOUNDS = {"flops_per_s": (1e6, 1e18), "bytes_per_s": (1e5, 1e15), "size": (1, 2**50), "bytes": (1, 1e15),
          "seconds": (1e-10, 1.0), "memory_bytes": (1e6, 1e16), "seq_len": (1, 2**24), "head_dim": (1, 4096)}
CE_V1_RATIO = {"cross_entropy": 12 / 8, "cross_entropy_backward": 20 / 16}   # version 1 → physical bytes


def _number(value, what: str, kind: str | None = None, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TrainledgerError(f"calibration profile: {what} must be a finite number, got {value!r}")
    if positive and not value > 0:
        raise TrainledgerError(f"calibration profile: {what} must be positive, got {value!r}")
    if kind is not None:
        low, high = BOUNDS[kind]
        if not low <= value <= high:
            raise TrainledgerError(f"calibration profile: {what} = {value!r} is outside [{low:g}, {high:g}]")
    return float(value)


def _rows(value, kinds: tuple, what: str) -> list[list[float]]:
    if not isinstance(value, list) or not value:
        raise TrainledgerError(f"calibration profile: {what} must be a non-empty list")
    if len(value) > MAX_ROWS:
        raise TrainledgerError(f"calibration profile: {what} has {len(value)} rows (at most {MAX_ROWS})")
    for i, row in enumerate(value):
        if not isinstance(row, list) or len(row) != len(kinds):
            raise TrainledgerError(f"calibration profile: each row of {what} must be a list of {len(kinds)} numbers")
        for x, kind in zip(row, kinds):
            _number(x, f"{what} row {i}", kind)
    return value


def _string(profile: dict, key: str, required: bool = True) -> None:
    value = profile.get(key)
    if value is None and not required:
        return
    if not isinstance(value, str) or len(value) > 1000:
        raise TrainledgerError(f"calibration profile: {key} must be a string (at most 1000 characters)")


def check_profile(profile, device: str | None = None) -> dict:
    """`profile` if it is a valid calibration profile (version 1 or 2, within bounds; of `device` when given);
    a TrainledgerError naming the field otherwise."""
    if not isinstance(profile, dict):
        raise TrainledgerError("calibration profile: not a JSON object")
    if profile.get("format") != FORMAT:
        raise TrainledgerError(f"calibration profile: not a {FORMAT} file (format {str(profile.get('format'))[:40]!r})")
    version = profile.get("version")
    if isinstance(version, bool) or version not in VERSIONS:
        newer = isinstance(version, int) and not isinstance(version, bool) and version > VERSION
        raise TrainledgerError(f"calibration profile: format version {str(version)[:20]} is "
                               + ("newer than this trainledger reads (1-2): upgrade trainledger" if newer else
                                  "not one this trainledger reads (1-2): measure again with `trainledger bench --calibrate`"))
    if profile.get("device") not in DEVICES:
        raise TrainledgerError(f"calibration profile: device must be one of {', '.join(DEVICES)}")
    if device is not None and profile["device"] != device:
        raise TrainledgerError(f"calibration profile: device is {profile['device']!r}, expected {device!r}")
    for key in ("device_name", "torch_version", "peak_source"):
        _string(profile, key)
    for key in ("host", "created_utc"):
        _string(profile, key, required=False)
    peaks = profile.get("peak_flops_per_s")
    gemm = profile.get("gemm")
    if not isinstance(peaks, dict) or not isinstance(gemm, dict) or not gemm or len(gemm) > 16 or len(peaks) > 16:
        raise TrainledgerError("calibration profile: peak_flops_per_s and gemm must be objects keyed by dtype")
    for dtype, rows in gemm.items():
        _number(peaks.get(dtype), f"peak_flops_per_s[{dtype[:20]!r}]", "flops_per_s")
        _rows(rows, ("size", "size", "size", "flops_per_s"), f"gemm[{dtype[:20]!r}]")
    _rows(profile.get("memory"), ("bytes", "bytes_per_s"), "memory")
    elementwise = profile.get("elementwise", {})
    if not isinstance(elementwise, dict) or len(elementwise) > 64:
        raise TrainledgerError("calibration profile: elementwise must be an object keyed by kernel name")
    for name, rows in elementwise.items():
        _rows(rows, ("bytes", "bytes_per_s"), f"elementwise[{name[:40]!r}]")
    attention = profile.get("attention")
    if attention is not None:
        if not isinstance(attention, dict) or attention.get("dtype") not in peaks:
            raise TrainledgerError("calibration profile: attention must name a dtype of peak_flops_per_s")
        _rows(attention.get("points"), ("seq_len", "flops_per_s", "flops_per_s"), "attention.points")
        if attention.get("head_dim") is not None:
            _number(attention["head_dim"], "attention.head_dim", "head_dim")
        others = attention.get("other_head_dims", [])
        if not isinstance(others, list) or len(others) > 16:
            raise TrainledgerError("calibration profile: attention.other_head_dims must be a list")
        for i, other in enumerate(others):
            if not isinstance(other, dict):
                raise TrainledgerError("calibration profile: attention.other_head_dims must hold objects")
            _number(other.get("head_dim"), f"attention.other_head_dims[{i}].head_dim", "head_dim")
            _rows(other.get("points"), ("seq_len", "flops_per_s", "flops_per_s"), f"attention.other_head_dims[{i}].points")
    _number(profile.get("op_overhead_seconds"), "op_overhead_seconds", "seconds")
    for key in ("kernel_overhead_seconds", "host_op_seconds", "launch_seconds", "optimizer_tensor_seconds",
                "decode_op_overhead_seconds"):
        if profile.get(key) is not None:
            _number(profile[key], key, "seconds")
    _number(profile.get("memory_bytes"), "memory_bytes", "memory_bytes")
    if not isinstance(profile.get("gpu_timed", False), bool):
        raise TrainledgerError("calibration profile: gpu_timed must be true or false")
    for key in ("load_average", "calibration_seconds", "others_cpus"):
        if profile.get(key) is not None:
            _number(profile[key], key, positive=False)
    return profile


def _depth(text: str) -> int:
    """The deepest nesting of [ and { in JSON `text`, outside strings (checked before parsing it)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    return deepest
        elif ch in "]}":
            depth -= 1
    return deepest


def read_profile(path, device: str | None = None) -> dict:
    """The validated profile in the JSON file `path` (of `device` when given); a one-line TrainledgerError naming
    the file otherwise: missing, not a regular file, over 4 MiB, not UTF-8 JSON (a pickle is just bytes here),
    nested deeper than the format, or outside the bounds of check_profile."""
    path = Path(path)
    try:
        if not path.is_file():
            raise TrainledgerError("not a regular file" if path.exists() else "no such file")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise TrainledgerError(f"larger than {MAX_FILE_BYTES // 2**20} MiB")
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
        text = raw.decode("utf-8")
        if _depth(text) > MAX_DEPTH:
            raise TrainledgerError(f"nested deeper than the format ({MAX_DEPTH} levels)")
        profile = json.loads(text, parse_constant=lambda name: float("nan"))
        return check_profile(profile, device)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError, TrainledgerError) as error:
        reason = str(error).removeprefix("calibration profile: ") if isinstance(error, TrainledgerError) else \
            ("not UTF-8 JSON" if isinstance(error, (UnicodeDecodeError, ValueError)) else error.__class__.__name__)
        raise TrainledgerError(f"calibration file {path}: {reason}", "--calibration") from None


def _dispatch_bound_cut(times: list[float], work: list[float]) -> float:
    """Per-call time at or below which a wall-clock point is dispatch-bound (module docstring): twice the longest
    time of the points the best rate (work / time) would finish in under a tenth of their time; 0 when none."""
    best = max(w / t for w, t in zip(work, times))
    certain = [t for w, t in zip(work, times) if w / best < t / 10]
    return 2 * max(certain) if certain else 0.0


def _device_bound(rows: list, work_of, column: int = -1) -> list:
    """The rows of a version-1 CUDA table whose time per call (work / the rate in `column`) is the device's (see
    _dispatch_bound_cut)."""
    work = [work_of(row) for row in rows]
    times = [w / row[column] for w, row in zip(work, rows)]
    cut = _dispatch_bound_cut(times, work)
    return [row for row, t in zip(rows, times) if t > cut]


def _dispatch_floor(profile: dict) -> float:
    """A version-1 CUDA profile's CPU cost of a no-grad launch: the shortest wall-clock time per call of its adds
    (the smallest are bound by the CPU's dispatch)."""
    return min(b / r for b, r in profile["memory"])


def gpu_from_profile(profile: dict) -> GPUSpec:
    """The GPUSpec of a profile: a CPU's own; a CUDA device's datasheet entry (by the name it reports) with the
    measured tables."""
    base = None
    if profile["device"] == "cuda":
        from trainledger.specs.hardware import gpu_for_device_name
        base = gpu_for_device_name(profile["device_name"])
    return calibrated_gpu(profile, base)


def calibrated_gpu(profile: dict, base: GPUSpec | None = None) -> GPUSpec:
    """The GPUSpec of a calibrated machine: `base` (the datasheet entry of a CUDA GPU, None for a CPU or an
    unknown GPU) with the measured GEMM table, memory bandwidth by op size, SDPA rates and per-op costs of
    `profile` (a version-1 CUDA profile's dispatch-bound points dropped: module docstring).

    Fractions are of the larger of the stated peak and the best measured matmul rate, so each is in (0, 1]
    (attention rates above it are capped at it); a CPU's stated peak is derived from /proc/cpuinfo
    (`peak_source`), a GPU's is its datasheet.
    """
    check_profile(profile)
    cuda, v1 = profile["device"] == "cuda", profile["version"] == 1
    wall_clock = cuda and not profile.get("gpu_timed")
    where = f"measured by `trainledger bench --calibrate` on {profile['device_name']} ({profile.get('created_utc', '?')})"
    peaks, gemm = {}, {}
    for dtype, rows in profile["gemm"].items():
        peaks[dtype] = max(profile["peak_flops_per_s"][dtype], max(row[3] for row in rows))
        kept = _device_bound(rows, lambda r: 2.0 * r[0] * r[1] * r[2]) if wall_clock else rows
        note = f" ({len(rows) - len(kept)} dispatch-bound dropped)" if len(kept) < len(rows) else ""
        gemm[dtype] = GemmEfficiency(tuple((int(m), int(n), int(k), rate / peaks[dtype]) for m, n, k, rate in kept),
                                     full_waves=False, source=f"{len(kept)} matmul shapes {where}{note}")
    curve_rows = _device_bound(profile["memory"], lambda r: r[0]) if wall_clock else profile["memory"]
    curve = tuple(sorted((float(b), float(r)) for b, r in curve_rows))
    elementwise = {}
    for name, rows in profile.get("elementwise", {}).items():
        ratio = CE_V1_RATIO.get(name, 1.0) if v1 else 1.0
        kept = _device_bound(rows, lambda r: r[0]) if wall_clock else rows
        if kept:
            elementwise[name] = tuple(sorted((float(b) * ratio, float(r) * ratio) for b, r in kept))
    attention = _attention(profile, peaks, where, wall_clock)
    if base is not None and base.attention_efficiency:
        if wall_clock:      # version 1's SDPA rates (dispatch-bound, one head size): the published kernels first
            attention = dict(base.attention_efficiency) | attention
        else:               # measured on the GPU at the head sizes that matter: the default, the published beside
            attention = attention | {k: v for k, v in base.attention_efficiency.items() if k not in attention}
    fields = dict(gemm_efficiency=gemm, attention_efficiency=attention, memory_bandwidth_bytes_per_s=curve[-1][1],
                  memory_bandwidth_curve=curve, memory_bandwidth_fraction=1.0, elementwise_curves=elementwise,
                  op_overhead_seconds=float(profile["op_overhead_seconds"]),
                  decode_op_overhead_seconds=(float(profile["decode_op_overhead_seconds"])
                                              if profile.get("decode_op_overhead_seconds") is not None else None),
                  host_op_seconds=float(profile.get("host_op_seconds") or 0.0), async_launch=cuda,
                  launch_seconds=float(profile.get("launch_seconds") or (_dispatch_floor(profile) if wall_clock else 0.0)),
                  optimizer_tensor_seconds=float(profile.get("optimizer_tensor_seconds") or 0.0),
                  performance_source=f"{where}; peak: {profile['peak_source']}")
    if profile.get("kernel_overhead_seconds"):
        fields["kernel_overhead_seconds"] = float(profile["kernel_overhead_seconds"])
    if base is not None:
        return replace(base, peak_flops_per_s=dict(base.peak_flops_per_s) | peaks, **fields)
    fields.setdefault("kernel_overhead_seconds", 0.0)
    return GPUSpec(name=profile["device"], aliases=(), vendor="this machine", peak_flops_per_s=peaks,
                   memory_bytes=float(profile["memory_bytes"]), source=f"{profile['device_name']}: {profile['peak_source']}",
                   gpus_per_node=1, **fields)


def _attention(profile: dict, peaks: dict, where: str, wall_clock: bool) -> dict:
    """{"sdpa": AttentionEfficiency} of the profile's SDPA rates (by head size), or {} without any left."""
    a = profile.get("attention")
    if not a:
        return {}
    peak = peaks[a["dtype"]]
    heads = a.get("heads", 1)

    def table(head_dim, points):
        if wall_clock:    # FLOPs of one call: 2 matmuls over half the T×T square, forward; 2.5× that backward
            forward = _device_bound(points, lambda p: 2 * heads * p[0] ** 2 * head_dim, 1)
            backward = _device_bound(points, lambda p: 5 * heads * p[0] ** 2 * head_dim, 2)
            points = [p for p in points if p in forward and p in backward]
        if not points:
            return None
        return AttentionEfficiency(
            "sdpa", tuple((int(s), min(f / peak, 1.0), min(b / peak, 1.0)) for s, f, b in points), (),
            f"causal scaled_dot_product_attention, head dim {head_dim}, {a['dtype']}, {where}",
            head_dim=int(head_dim), dtype=a["dtype"])

    tables = [t for t in [table(a.get("head_dim") or 128, a["points"])]
              + [table(o["head_dim"], o["points"]) for o in a.get("other_head_dims", [])] if t is not None]
    if not tables:
        return {}
    first, *others = tables
    return {"sdpa": replace(first, other_head_dims=tuple(others))}
