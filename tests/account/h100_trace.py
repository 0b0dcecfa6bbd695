"""Reading the recorded H100 Kineto traces (tests/data/h100_2026_11_26) for the time-model tests: which kernels
each step launched, from which CPU op, how long each took. Plain JSON, no torch."""

from __future__ import annotations

import collections
import functools
import gzip
import json
from pathlib import Path

DATA = Path(__file__).parent.parent / "data" / "h100_2026_11_26"
GPU_EVENTS = ("kernel", "gpu_memset", "gpu_memcpy")


@functools.lru_cache(maxsize=2)
def events(name: str) -> tuple:
    with gzip.open(DATA / name) as handle:
        return tuple(json.load(handle)["traceEvents"])


def step_window(name: str, step: str = "ProfilerStep#2") -> tuple[float, float]:
    event = next(e for e in events(name) if e.get("name") == step)
    return event["ts"], event["ts"] + event["dur"]


def kind(kernel_name: str) -> str:
    """gemm, attention, memset, memcpy or elementwise, from a kernel's name."""
    if "nvjet" in kernel_name or "gemm" in kernel_name.lower():
        return "gemm"
    if "cudnn" in kernel_name or "flash" in kernel_name or "fmha" in kernel_name:
        return "attention"
    if "Memset" in kernel_name:
        return "memset"
    if "Memcpy" in kernel_name:
        return "memcpy"
    return "elementwise"


@functools.lru_cache(maxsize=4)
def launches(name: str, step: str = "ProfilerStep#2") -> tuple:
    """(region, kind, duration µs, kernel name) of every GPU event a step launched, in launch order; region is
    forward, backward (launched by the autograd engine), optimizer or data (the loop's record_function ranges)."""
    t0, t1 = step_window(name, step)
    evs = events(name)
    calls = {e["args"]["correlation"]: e for e in evs
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
             and t0 <= e["ts"] < t1}
    spans = collections.defaultdict(list)
    for e in evs:
        if e.get("cat") in ("cpu_op", "user_annotation") and t0 <= e["ts"] < t1:
            spans[e["tid"]].append(e)
    out = []
    for k in evs:
        if k.get("cat") not in GPU_EVENTS:
            continue
        call = calls.get(k["args"].get("correlation"))
        if call is None:
            continue
        around = [s for s in spans[call["tid"]] if s["ts"] <= call["ts"] <= s["ts"] + s["dur"]]
        labels = [s["name"] for s in around if s.get("cat") == "user_annotation"]
        ops = [s["name"] for s in around if s.get("cat") == "cpu_op"]
        if any("ptimizer" in label for label in labels):
            region = "optimizer"
        elif any(label == "trainledger.data" for label in labels):
            region = "data"
        elif any(op.startswith("autograd::engine") for op in ops):
            region = "backward"
        else:
            region = "forward"
        out.append((call["ts"], region, kind(k["name"]), k["dur"], k["name"], ops[0] if ops else ""))
    out.sort()
    return tuple(row[1:5] for row in out)


@functools.lru_cache(maxsize=4)
def launches_with_ops(name: str, step: str = "ProfilerStep#2") -> tuple:
    """launches(), each with the top-level CPU op that launched it: (region, kind, µs, kernel name, op name)."""
    t0, t1 = step_window(name, step)
    evs = events(name)
    calls = {e["args"]["correlation"]: e for e in evs
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
             and t0 <= e["ts"] < t1}
    ops = collections.defaultdict(list)
    for e in evs:
        if e.get("cat") == "cpu_op" and t0 <= e["ts"] < t1:
            ops[e["tid"]].append(e)
    rows = []
    for k in evs:
        call = calls.get(k.get("args", {}).get("correlation")) if k.get("cat") in GPU_EVENTS else None
        if call is None:
            continue
        around = sorted((o for o in ops[call["tid"]] if o["ts"] <= call["ts"] <= o["ts"] + o["dur"]),
                        key=lambda o: o["ts"])
        rows.append((call["ts"], kind(k["name"]), k["dur"], k["name"], around[0]["name"] if around else ""))
    rows.sort()
    return tuple(row[1:] for row in rows)


def back_to_back_gaps(name: str, step: str = "ProfilerStep#2") -> list[float]:
    """µs between consecutive GPU events whose second was launched before the first ended (queued: the GPU's own
    gap between kernels, not a wait for the CPU)."""
    t0, t1 = step_window(name, step)
    evs = events(name)
    calls = {e["args"]["correlation"]: e for e in evs
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    gpu = sorted((e for e in evs if e.get("cat") in GPU_EVENTS and t0 <= e["ts"] < t1), key=lambda e: e["ts"])
    gaps = []
    for a, b in zip(gpu, gpu[1:]):
        call = calls.get(b["args"].get("correlation"))
        if call and call["ts"] + call["dur"] < a["ts"] + a["dur"] - 5:
            gaps.append(b["ts"] - (a["ts"] + a["dur"]))
    return gaps


def steps() -> list[dict]:
    """The measured configs of profile_steps.jsonl."""
    return [json.loads(line) for line in (DATA / "profile_steps.jsonl").read_text().splitlines() if line.strip()]
