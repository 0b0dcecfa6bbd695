"""A machine's calibration profile (what `trainledger bench --calibrate` measured) as data, and the GPUSpec it makes.

The profile is a plain JSON object, written by measure/calibrate.py and read back here without torch:

    format "trainledger-calibration", version 1, device "cpu" | "cuda", device_name, host, torch_version,
    threads (torch intra-op threads, CPU), created_utc, calibration_seconds,
    peak_flops_per_s {dtype: FLOP/s}, peak_source         the ceiling the fractions below are taken of
    gemm {dtype: [[m, n, k, flops_per_s], ...]}           C[m,n] = A[m,k]·B[k,n], fastest of timed samples
    memory [[bytes_per_op, bytes_per_s], ...]             out-of-place adds: 3 · n · 4 bytes per op, by size
    elementwise {kernel name: [[bytes_per_op, bytes_per_s], ...]}   (optional) ops that are not plain streams,
                                                          named as account/kernels.py names them, bytes counted
                                                          as it does (tanh-GELU: 8, its backward 12 per fp32 element;
                                                          cross_entropy 8, its backward 16 per logit, in 3 ops each)
    attention {dtype, head_dim, points [[seq_len, fwd_flops_per_s, bwd_flops_per_s], ...]}
                                                          causal SDPA, FLOPs as executed (half the T×T square)
    op_overhead_seconds                                   per dispatched op under autograd (tiny tensors)
    decode_op_overhead_seconds                            (optional) per dispatched op of a KV-cache decoding step
                                                          of our Transformer at a negligible size (inference mode)
    memory_bytes                                          RAM (CPU) or device memory (CUDA)

`check_profile` rejects anything else (a bad file is then treated as absent and the machine re-calibrated);
`calibrated_gpu` turns a valid profile into a GPUSpec that account/ uses like any datasheet entry: the GEMM
efficiency table with `full_waves=False` (interpolated in log-shape space, no wave model), the memory bandwidth
by op size (`memory_bandwidth_curve`), the SDPA kernel's rates, and the per-op overhead. Pure, no torch.
"""

from __future__ import annotations

import math
from dataclasses import replace

from trainledger.errors import TrainledgerError
from trainledger.specs.hardware import GPUSpec
from trainledger.specs.performance import AttentionEfficiency, GemmEfficiency

FORMAT = "trainledger-calibration"
VERSION = 1
DEVICES = ("cpu", "cuda")


def _number(value, what: str, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TrainledgerError(f"calibration profile: {what} must be a finite number, got {value!r}")
    if positive and not value > 0:
        raise TrainledgerError(f"calibration profile: {what} must be positive, got {value!r}")
    return float(value)


def _rows(value, width: int, what: str) -> list[list[float]]:
    if not isinstance(value, list) or not value:
        raise TrainledgerError(f"calibration profile: {what} must be a non-empty list")
    for row in value:
        if not isinstance(row, list) or len(row) != width:
            raise TrainledgerError(f"calibration profile: each row of {what} must be a list of {width} numbers")
        for x in row:
            _number(x, what)
    return value


def check_profile(profile) -> dict:
    """`profile` if it is a valid version-1 calibration profile; a TrainledgerError saying what is wrong otherwise."""
    if not isinstance(profile, dict):
        raise TrainledgerError("calibration profile: not a JSON object")
    if profile.get("format") != FORMAT or profile.get("version") != VERSION:
        raise TrainledgerError(f"calibration profile: not a {FORMAT} version {VERSION} file")
    if profile.get("device") not in DEVICES:
        raise TrainledgerError(f"calibration profile: device must be one of {', '.join(DEVICES)}")
    for key in ("device_name", "torch_version", "peak_source"):
        if not isinstance(profile.get(key), str):
            raise TrainledgerError(f"calibration profile: {key} must be a string")
    peaks = profile.get("peak_flops_per_s")
    gemm = profile.get("gemm")
    if not isinstance(peaks, dict) or not isinstance(gemm, dict) or not gemm:
        raise TrainledgerError("calibration profile: peak_flops_per_s and gemm must be objects keyed by dtype")
    for dtype, rows in gemm.items():
        _number(peaks.get(dtype), f"peak_flops_per_s[{dtype!r}]")
        _rows(rows, 4, f"gemm[{dtype!r}]")
    _rows(profile.get("memory"), 2, "memory")
    elementwise = profile.get("elementwise", {})
    if not isinstance(elementwise, dict):
        raise TrainledgerError("calibration profile: elementwise must be an object keyed by kernel name")
    for name, rows in elementwise.items():
        _rows(rows, 2, f"elementwise[{name!r}]")
    attention = profile.get("attention")
    if attention is not None:
        if not isinstance(attention, dict) or attention.get("dtype") not in peaks:
            raise TrainledgerError("calibration profile: attention must name a dtype of peak_flops_per_s")
        _rows(attention.get("points"), 3, "attention.points")
    _number(profile.get("op_overhead_seconds"), "op_overhead_seconds", positive=False)
    if profile.get("decode_op_overhead_seconds") is not None:
        _number(profile["decode_op_overhead_seconds"], "decode_op_overhead_seconds")
    _number(profile.get("memory_bytes"), "memory_bytes")
    return profile


def calibrated_gpu(profile: dict, base: GPUSpec | None = None) -> GPUSpec:
    """The GPUSpec of a calibrated machine: `base` (the datasheet entry of a CUDA GPU, None for a CPU) with the
    measured GEMM table, memory bandwidth by op size, SDPA rates and per-op overhead of `profile`.

    Fractions are of the larger of the stated peak and the best measured matmul rate, so each is in (0, 1]
    (attention rates above it are capped at it); a CPU's stated peak is derived from /proc/cpuinfo
    (`peak_source`), a GPU's is its datasheet.
    """
    check_profile(profile)
    where = f"measured by `trainledger bench --calibrate` on {profile['device_name']} ({profile.get('created_utc', '?')})"
    peaks = {}
    for dtype, rows in profile["gemm"].items():
        peaks[dtype] = max(profile["peak_flops_per_s"][dtype], max(row[3] for row in rows))
    gemm = {dtype: GemmEfficiency(tuple((int(m), int(n), int(k), rate / peaks[dtype]) for m, n, k, rate in rows),
                                  full_waves=False, source=f"{len(rows)} matmul shapes {where}")
            for dtype, rows in profile["gemm"].items()}
    attention = {}
    if profile.get("attention"):
        a = profile["attention"]
        peak = peaks[a["dtype"]]
        attention["sdpa"] = AttentionEfficiency(
            "sdpa", tuple((int(s), min(f / peak, 1.0), min(b / peak, 1.0)) for s, f, b in a["points"]), (),
            f"causal scaled_dot_product_attention, head dim {a.get('head_dim', '?')}, {a['dtype']}, {where}")
    curve = tuple(sorted((float(b), float(r)) for b, r in profile["memory"]))
    fields = dict(gemm_efficiency=gemm, attention_efficiency=attention, memory_bandwidth_bytes_per_s=curve[-1][1],
                  memory_bandwidth_curve=curve, memory_bandwidth_fraction=1.0,
                  elementwise_curves={name: tuple(sorted((float(b), float(r)) for b, r in rows))
                                      for name, rows in profile.get("elementwise", {}).items()},
                  op_overhead_seconds=float(profile["op_overhead_seconds"]),
                  decode_op_overhead_seconds=(float(profile["decode_op_overhead_seconds"])
                                              if profile.get("decode_op_overhead_seconds") is not None else None),
                  performance_source=f"{where}; peak: {profile['peak_source']}")
    if base is not None:
        return replace(base, peak_flops_per_s=dict(base.peak_flops_per_s) | peaks, **fields)
    return GPUSpec(name=profile["device"], aliases=(), vendor="this machine", peak_flops_per_s=peaks,
                   memory_bytes=float(profile["memory_bytes"]), source=f"{profile['device_name']}: {profile['peak_source']}",
                   gpus_per_node=1, **fields)
