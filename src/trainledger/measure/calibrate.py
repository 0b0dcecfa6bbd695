"""Calibration: this machine's matmul FLOP/s by shape, memory bandwidth by op size, SDPA rate and per-op costs.

    calibrate(device) -> profile dict          (the format of specs/calibration.py, version 2; seconds on a CPU, ~40 s on a GPU)
    profile_path(device) -> Path               $XDG_CACHE_HOME/trainledger/calibration-<key>.json (~/.cache/...)
    load_profile(path, device) -> dict | None  JSON only (never unpickled), validated with bounds; bad counts as absent
    save_profile(profile, path)                atomic: a temporary file in the same folder, then os.replace
    calibrated_device(device) -> GPUSpec       the cached profile, calibrating once on first use (a notice on stderr);
                                               one measured busy is cached as such and reused with a warning

What is measured, each the fastest of 3 timed samples after a warm-up (other processes can only slow a sample
down, so the fastest is the machine's own rate), every sample long enough (≥ 2 ms, repeating the call) that the
clock's resolution does not matter:
- matmuls C[m,n] = A[m,k]·B[k,n] over a grid of shapes (2·m·n·k FLOPs each), the efficiency curve that account/
  interpolates (GPUs: the same idea as the published "maximum achievable matmul FLOPS", at many shapes);
- out-of-place adds c = a + b of 64 KiB ... 256 MiB per op (3·n·element bytes moved), because a CPU's caches
  serve small ops several times faster than DRAM;
- tanh-GELU forward and backward, and the cross-entropy over a vocabulary of 8192, forward and backward, at 3 of
  those sizes: exp, log and tanh make them slower than a stream on a CPU (GELU about 3× an add per element,
  measured here), and they run on the largest tensors (the 4·d_model hidden, the logits);
- causal scaled_dot_product_attention forward and forward + backward (FLOPs as a flash kernel executes them:
  half the T×T square, backward 2.5 × the forward);
- the CPU cost of an op: a chain of multiplications of 8-element tensors under autograd, forward and backward,
  divided by the ops dispatched (Python call, dispatcher, autograd bookkeeping, the kernel launch), and the same
  for a chain of views, which launch nothing (`host_op_seconds`); and per operator of our Transformer's KV-cache
  decoding step at a negligible size, in inference mode (module calls, views and the cache's bookkeeping
  included), for account/time/inference.py (`decode_op_overhead_seconds`). Every CPU cost is timed by the wall
  clock, on CUDA too: timed behind a `_sleep` kernel, the decoding step's ~1 ms of launches outlasted the sleep,
  which doubled to a second per sample, so that 25 samples took most of a minute on an H200 (2026-11-28,
  tests/data/h200_2026_11_28/) and measured the GPU, not the CPU.
On CUDA (version 2) the two timelines are measured apart: the CPU costs by the wall clock (the kernels of 8
elements finish long before the next launch), every kernel rate by CUDA events around calls queued behind a
long `torch.cuda._sleep` kernel, so that the GPU runs them back to back however slowly the CPU launched them
(the wall clock per call of version 1 measured the CPU's dispatch for small ops). The time a tiny kernel holds
the GPU back to back (`kernel_overhead_seconds`) is measured the same way and taken out of the other rates.
The profile is keyed by device, its name, the host, torch's version and its thread count: any change
re-calibrates. Numbers measured on a busy machine are slower: `bench --calibrate` refuses to save them without
--force; calibrate with one thread (`--threads 1`) or on a quiet machine. The first use by another command
caches such a calibration with `"busy": true` and reuses it with a warning (measuring again only once the
machine is idle), rather than measuring a busy machine again on every command.
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from trainledger.account.time.roofline import FLASH_BACKWARD_FLOPS_RATIO
from trainledger.errors import TrainledgerError
from trainledger.files import json_format_problem, replace_output
from trainledger.measure.cpu_load import OthersCpu, busy_warning, is_busy, machine_idle_now  # noqa: F401  (this API)
from trainledger.measure.decode_overhead import decode_op_overhead_seconds
from trainledger.measure.timing import DTYPES, cpu_peak_flops_per_s, peak_flops_per_s, synchronize
from trainledger.specs.calibration import FORMAT, VERSION, check_profile, gpu_from_profile, read_profile  # noqa: F401

MIN_SAMPLE_SECONDS = 0.002
GRIDS = {   # (token rows m, output/reduction sizes n and k, largest FLOPs of one shape, dtypes)
    "cpu": ((32, 256, 2048, 8192), (32, 128, 512, 2048, 8192), 2.0 ** 31, ("fp32",)),
    "cuda": ((512, 2048, 8192, 16384), (128, 512, 2048, 8192, 16384), 2.0 ** 41, ("bf16", "fp32")),
}
MEMORY_OP_BYTES = {"cpu": [2 ** e for e in range(16, 29, 2)], "cuda": [2 ** e for e in range(20, 31, 2)]}
ATTENTION = {"cpu": ("fp32", 8, 64, (16, 32, 64, 128, 256, 512, 1024, 2048)),       # dtype, heads, head dim, lengths
             "cuda": ("bf16", 16, 128, (512, 1024, 2048, 4096, 8192))}


# --- the cache -------------------------------------------------------------------------------------------
def cache_dir() -> Path:
    """$XDG_CACHE_HOME/trainledger, or ~/.cache/trainledger (the XDG base-directory default)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "trainledger"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")[:60] or "unknown"


def device_name(device: str) -> str:
    """What the device calls itself: the CPU's model name, or torch.cuda.get_device_name()."""
    if device == "cuda":
        return torch.cuda.get_device_name(0)
    from trainledger.measure.timing import _cpu_flags
    return _cpu_flags()[1] or platform.processor() or "cpu"


def profile_path(device: str = "cpu") -> Path:
    """The cache file of `device` on this machine, torch version and thread count."""
    key = f"{device}-{_slug(device_name(device))}-{_slug(platform.node())}-torch{_slug(torch.__version__)}"
    if device == "cpu":
        key += f"-threads{torch.get_num_threads()}"
    return cache_dir() / f"calibration-{key}.json"


def load_profile(path, device: str | None = None) -> dict | None:
    """The profile stored at `path` (of `device`; by default the device a cache file is named for, as
    profile_path names it), or None when it is missing, unreadable or invalid (then it is re-measured):
    specs.calibration.read_profile, which never unpickles and bounds every figure."""
    try:
        return read_profile(path, device or cache_device(path))
    except TrainledgerError:
        return None


def cache_device(path) -> str | None:
    """The device a cache file is for ("calibration-cpu-...json" -> "cpu"), None for another name."""
    match = re.match(r"calibration-(cpu|cuda)-", Path(path).name)
    return match.group(1) if match else None


def save_profile(profile: dict, path, flag: str | None = None) -> Path:
    """Writes `profile` as JSON to `path` atomically (a temporary file beside it, then os.replace), never through a
    link or onto a device (files.replace_output). A path the user named (`flag`, bench's --out) is replaced only
    when it holds a calibration profile; the cache's own file (flag None) whatever it holds."""
    path = Path(path)
    check_profile(profile)
    ours = json_format_problem(FORMAT) if flag else None
    with replace_output(path, flag or "calibration cache", "a calibration profile", ours) as tmp, open(tmp, "w") as handle:
        json.dump(profile, handle, indent=1)
        handle.flush()
        os.fsync(handle.fileno())
    return path


def calibrated_device(device: str = "cpu", *, log=None, busy: list | None = None, idle_now=None):
    """The GPUSpec of this machine's `device` from its cached profile, calibrating first when there is none.
    `busy` (a list) gets busy_warning's text when the profile used was measured while the machine was busy.

    `log` (default: stderr) gets one line when a calibration runs. A calibration measured while the machine was
    busy is cached with `"busy": true` and reused, with a one-line warning each time (its rates understate the
    machine), instead of being measured again by every command on a machine that stays busy. When the machine
    is idle now (`idle_now()`, default machine_idle_now: other processes leave the calibration's threads free
    over half a second), a busy cached one is measured again and the idle calibration replaces it."""
    _check_device(device)
    say = log or (lambda line: print(line, file=sys.stderr, flush=True))
    path = profile_path(device)
    profile = None
    if path.exists():
        try:
            profile = read_profile(path, device)
        except TrainledgerError as error:      # damaged, forged or out of bounds: named, then measured again
            say(f"warning: {error}; measuring this machine again")
    if profile is not None and is_busy(profile) and (idle_now or machine_idle_now)(profile):
        say(f"the cached calibration {path} was measured while the machine was busy; it is idle now: measuring again")
        profile = None
    if profile is None:
        # an H200 spent 32.9 s in the stages before the decoding one (tests/data/h200_2026_11_28/calibration_stages.txt)
        how_long = "about 40 s on a GPU" if device == "cuda" else "a few seconds"
        say(f"calibrating this machine's {device} once ({how_long}; cached in {path}; "
            f"`trainledger bench --calibrate` to refresh)")
        profile = calibrate(device)
        save_profile(profile, path)
        if is_busy(profile):
            say(f"warning: {busy_warning(profile) or 'measured while busy'}; cached as busy and reused (with this "
                "warning) until a calibration on an idle machine replaces it")
    elif is_busy(profile):
        say(f"warning: the cached calibration {path}: {busy_warning(profile) or 'measured while busy'}; re-run "
            "`trainledger bench --calibrate` when the machine is quiet (or with --threads 1)")
    if busy is not None and is_busy(profile):
        busy.append(busy_warning(profile) or "the machine was busy while calibrating: the measured rates understate it")
    return gpu_from_profile(profile)


def _check_device(device: str) -> None:
    if device not in GRIDS:
        raise TrainledgerError(f"calibration device must be cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise TrainledgerError("--gpu cuda: no CUDA device is available here (use --gpu cpu, or a GPU name)")


# --- measurements -------------------------------------------------------------------------------------------
def seconds_per_call(fn, device: str, samples: int = 3, kernels: int = 1) -> float:
    """Seconds of one fn() call: one warm-up, then the fastest of `samples` samples of enough calls to last ≥ 2 ms.

    On CUDA the device's time (gpu_seconds_per_call) less the fixed overhead of fn's `kernels` launches (what
    account/ adds per kernel apart); elsewhere the wall clock."""
    if device == "cuda" and gpu_timed():
        total = gpu_seconds_per_call(fn, samples)
        return max(total - kernels * kernel_overhead(), 0.1 * total)
    return _wall_seconds_per_call(fn, device, samples)


def gpu_timed() -> bool:
    """Whether kernels can be timed behind a full queue here (torch.cuda._sleep, in every CUDA build of torch)."""
    return hasattr(torch.cuda, "_sleep")


def gpu_seconds_per_call(fn, samples: int = 3, max_calls: int = 512) -> float:
    """Device seconds of one fn() call on CUDA: CUDA events around calls queued behind a torch.cuda._sleep kernel,
    so that they run back to back on the GPU however long the CPU took to launch them (a sample is redone with
    a longer sleep when the launches outlasted it); the fastest of `samples`, each of enough calls for ≥ 2 ms."""
    fn()
    torch.cuda.synchronize()
    calls, sleep_s, times = 1, 0.005, []
    while len(times) < samples:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(sleep_s * _sleep_cycles_per_s()))
        start.record()
        launch = time.perf_counter()
        for _ in range(calls):
            fn()
        launch = time.perf_counter() - launch
        end.record()
        end.synchronize()
        seconds = start.elapsed_time(end) / 1000
        if launch > 0.8 * sleep_s and sleep_s < 1.0:        # the GPU may have waited for a launch: sleep longer
            sleep_s *= 2
            continue
        if seconds < MIN_SAMPLE_SECONDS and calls < max_calls:
            calls = min(max_calls, 2 * calls)
            continue
        times.append(seconds / calls)
    return min(times)


_SLEEP = {}


def _sleep_cycles_per_s() -> float:
    """Cycles of torch.cuda._sleep per second on this GPU (measured once by CUDA events)."""
    if "rate" not in _SLEEP:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1000)
        start.record()
        torch.cuda._sleep(10_000_000)
        end.record()
        end.synchronize()
        _SLEEP["rate"] = 10_000_000 / (start.elapsed_time(end) / 1000)
    return _SLEEP["rate"]


def kernel_overhead() -> float:
    """Device seconds a tiny kernel holds the GPU back to back (an add of 8 elements; cached): its launch, ramp and
    tail, the fixed term of every kernel (account/ adds it per launch)."""
    if "kernel" not in _SLEEP:
        a = torch.ones(8, device="cuda")
        c = torch.empty_like(a)
        _SLEEP["kernel"] = gpu_seconds_per_call(lambda: torch.add(a, a, out=c), samples=5)
    return _SLEEP["kernel"]


def matmul_rates(device: str, dtype: str, progress=None) -> list[list[float]]:
    """[[m, n, k, FLOP/s], ...] over the device's grid of shapes (shapes above its FLOP cap are left out)."""
    rows_m, sizes, cap, _ = GRIDS[device]
    out = []
    for m in rows_m:
        for n in sizes:
            for k in sizes:
                flops = 2.0 * m * n * k
                if flops > cap:
                    continue
                a = torch.randn(m, k, device=device, dtype=DTYPES[dtype])
                b = torch.randn(k, n, device=device, dtype=DTYPES[dtype])
                out.append([m, n, k, flops / seconds_per_call(lambda: torch.mm(a, b), device)])
                if progress:
                    progress()
    return out


def memory_rates(device: str) -> list[list[float]]:
    """[[bytes per op, bytes/s], ...] of out-of-place fp32 adds c = a + b (reads a and b, writes c: 12 B/element)."""
    out = []
    for op_bytes in MEMORY_OP_BYTES[device]:
        n = op_bytes // 12
        a, b = torch.randn(n, device=device), torch.randn(n, device=device)
        c = torch.empty_like(a)
        out.append([12 * n, 12 * n / seconds_per_call(lambda: torch.add(a, b, out=c), device)])
    return out


def elementwise_rates(device: str) -> dict:
    """{kernel name: [[bytes per op, bytes/s], ...]} of fp32 elementwise ops that are not plain streams on this
    device, bytes counted as account/time/kernels.py counts them: tanh-GELU ("gelu": read x, write y, 8 B/element),
    its backward ("gelu_backward": read x and the gradient, write the input gradient, 12 B/element), and the
    cross-entropy forward and backward (cross_entropy_rates)."""
    out = {"gelu": [], "gelu_backward": []}
    for op_bytes in MEMORY_OP_BYTES[device][1::2] or MEMORY_OP_BYTES[device]:
        n = op_bytes // 12
        x = torch.randn(n, device=device, requires_grad=True)
        grad = torch.randn(n, device=device)
        with torch.no_grad():
            fwd = seconds_per_call(lambda: torch.nn.functional.gelu(x, approximate="tanh"), device)
        y = torch.nn.functional.gelu(x, approximate="tanh")
        bwd = seconds_per_call(lambda: torch.autograd.grad(y, x, grad, retain_graph=True), device)
        out["gelu"].append([8 * n, 8 * n / fwd])
        out["gelu_backward"].append([12 * n, 12 * n / bwd])
    out.update(cross_entropy_rates(device))
    return out


def cross_entropy_rates(device: str, vocab: int = 8192) -> dict:
    """The fp32 loss over the vocabulary (F.cross_entropy: log-softmax's exp and log are arithmetic, not streams)
    as account/time/kernels.py counts it: "cross_entropy" 12 bytes per logit in 2 ops (log-softmax reads a row twice and
    writes it; NLL), "cross_entropy_backward" 20 bytes per logit in 3 ops (NLL's zeros and scatter, log-softmax's
    backward); [[bytes per op, bytes/s], ...] at 3 sizes."""
    out = {"cross_entropy": [], "cross_entropy_backward": []}
    for op_bytes in MEMORY_OP_BYTES[device][1::2] or MEMORY_OP_BYTES[device]:
        width = min(vocab, max(op_bytes // 4, 1))
        rows = max(op_bytes // 4 // width, 1)
        logits = torch.randn(rows, width, device=device, requires_grad=True)
        targets = torch.randint(0, width, (rows,), device=device)
        with torch.no_grad():
            fwd = seconds_per_call(lambda: torch.nn.functional.cross_entropy(logits, targets), device, kernels=2)
        loss = torch.nn.functional.cross_entropy(logits, targets)
        bwd = seconds_per_call(lambda: torch.autograd.grad(loss, logits, retain_graph=True), device, kernels=3)
        n = rows * width
        out["cross_entropy"].append([12 * n / 2, 12 * n / fwd])
        out["cross_entropy_backward"].append([20 * n / 3, 20 * n / bwd])
    return out


def attention_rates(device: str) -> dict:
    """Causal SDPA rates by sequence length: forward and backward FLOP/s, FLOPs as a flash kernel executes them.

    On CUDA at head sizes 64 and 128 with 16,384 tokens per call and heads × head size = 2048 (the setting of the
    FlashAttention-3 paper's benchmark: enough blocks to fill the GPU at every length); on a CPU one small batch."""
    dtype, heads, head_dim, lengths = ATTENTION[device]
    if device == "cuda":
        first, *others = (_attention_points(device, dtype, 2048 // hd, hd, lengths, 16384) for hd in (128, 64))
        return {"dtype": dtype, "head_dim": 128, "heads": 2048 // 128, "points": first, "tokens": 16384,
                "other_head_dims": [{"head_dim": 64, "points": p} for p in others]}
    return {"dtype": dtype, "head_dim": head_dim, "heads": heads,
            "points": _attention_points(device, dtype, heads, head_dim, lengths, None)}


def _attention_points(device: str, dtype: str, heads: int, head_dim: int, lengths, tokens: int | None) -> list:
    points = []
    for seq_len in lengths:
        batch = max(1, tokens // seq_len) if tokens else 1
        q, k, v = (torch.randn(batch, heads, seq_len, head_dim, device=device, dtype=DTYPES[dtype], requires_grad=True)
                   for _ in range(3))
        grad = torch.randn(batch, heads, seq_len, head_dim, device=device, dtype=DTYPES[dtype])

        def forward():
            with torch.no_grad():
                torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

        def backward():                     # the same graph again: the backward kernel alone
            torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)

        fwd = seconds_per_call(forward, device)
        bwd = seconds_per_call(backward, device)
        flops = batch * 2 * 2 * heads * seq_len * seq_len * head_dim / 2   # QKᵀ and A·V, half the square (causal)
        points.append([seq_len, flops / fwd, FLASH_BACKWARD_FLOPS_RATIO * flops / bwd])
    return points


def op_overhead_seconds(device: str, chain: int = 200) -> float:
    """Seconds per dispatched op beyond its arithmetic: a chain of `chain` multiplications of 8-element tensors
    under autograd, forward and backward (2·chain + 2 ops), per op."""
    x = torch.ones(8, device=device, requires_grad=True)

    def run():
        y = x
        for _ in range(chain):
            y = y * 1.0001
        y.sum().backward()

    return _wall_seconds_per_call(run, device) / (2 * chain + 2)


def host_op_seconds(device: str, launching_op_seconds: float, chain: int = 200) -> float:
    """CPU seconds of an op that launches nothing: a chain of views of an 8-element tensor under autograd, forward
    and backward (2·chain ops; the sum, its backward and the gradient's accumulation, three launching ops at
    `launching_op_seconds` each, are taken out)."""
    x = torch.ones(8, device=device, requires_grad=True)

    def run():
        y = x
        for i in range(chain):
            y = y.view(8) if i % 2 else y.view(2, 4)
        y.sum().backward()

    return max(_wall_seconds_per_call(run, device) - 3 * launching_op_seconds, 0.0) / (2 * chain)


def launch_seconds(device: str) -> float:
    """CPU seconds of a call that launches one kernel without autograd (a no-grad add of 8 elements): what a
    compiled graph's wrapper pays per kernel."""
    a = torch.ones(8, device=device)
    c = torch.empty_like(a)
    with torch.no_grad():
        return _wall_seconds_per_call(lambda: torch.add(a, a, out=c), device)


def optimizer_tensor_seconds(device: str, op_seconds: float, host_seconds: float, n: int = 256) -> float:
    """CPU seconds per parameter tensor of trainledger's AdamW step with clipping and zero_grad, beyond the ops
    account/ counts for it: n tensors of 8 elements, wall clock per step, less the foreach calls (one launch per
    call on a GPU, one per tensor and call on a CPU) and 3 view-like ops per tensor, divided by n."""
    from trainledger.optim import build_optimizer, clip_grad_norm_
    params = [torch.zeros(8, device=device, requires_grad=True) for _ in range(n)]
    opt = build_optimizer("adamw", params, lr=1e-3)

    def step():
        for p in params:
            p.grad = torch.ones_like(p)
        clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    grads = n * op_seconds                                 # the ones_like above: not part of a training step
    calls = 11 * (n if device == "cpu" else 1)             # clip's norm and scale, AdamW's step count and 8 passes
    counted = grads + calls * op_seconds + 3 * n * host_seconds
    return max(_wall_seconds_per_call(step, device) - counted, 0.0) / n


def _wall_seconds_per_call(fn, device: str, samples: int = 5) -> float:
    """The fastest of `samples` wall-clock samples after two warm-up calls, the second timed (the CPU's time: tiny
    tensors finish on the device before the next launch), each sample of enough calls to last ≥ 2 ms."""
    fn()                               # lazy set-up (an optimizer's state) stays out of the call count
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    calls = max(1, int(MIN_SAMPLE_SECONDS / max(time.perf_counter() - start, 1e-7)))
    times = []
    for _ in range(samples):
        synchronize(device)
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        synchronize(device)
        times.append((time.perf_counter() - start) / calls)
    return min(times)


def _memory_bytes(device: str) -> float:
    if device == "cuda":
        return float(torch.cuda.get_device_properties(0).total_memory)
    try:
        kib = re.search(r"^MemTotal:\s*(\d+)", open("/proc/meminfo").read(), re.M)
        return float(kib.group(1)) * 1024
    except (OSError, AttributeError):
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def calibrate(device: str = "cpu", progress=None) -> dict:
    """Measures this machine's `device` and returns its profile (specs/calibration.py's format). A few seconds."""
    _check_device(device)
    started = time.perf_counter()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None    # others' load, before ours adds to it
    others = OthersCpu()
    torch.manual_seed(0)
    dtypes = GRIDS[device][3]
    gemm, peaks, sources = {}, {}, []
    for dtype in dtypes:
        gemm[dtype] = matmul_rates(device, dtype, progress)
        if device == "cpu":
            peak, source = cpu_peak_flops_per_s(dtype)
        else:
            peak, source = peak_flops_per_s(device, dtype)
        best = max(row[3] for row in gemm[dtype])
        peaks[dtype] = peak if peak else best
        sources.append(f"{dtype} {source}" if peak else f"{dtype}: no stated peak, the best measured rate")
    op_seconds = op_overhead_seconds(device)
    profile = {
        "format": FORMAT, "version": VERSION, "device": device, "device_name": device_name(device),
        "host": platform.node(), "torch_version": torch.__version__,
        "threads": torch.get_num_threads() if device == "cpu" else None,
        "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "peak_flops_per_s": peaks, "peak_source": "; ".join(sources), "gemm": gemm,
        "memory": memory_rates(device), "elementwise": elementwise_rates(device), "attention": attention_rates(device),
        "op_overhead_seconds": op_seconds, "memory_bytes": _memory_bytes(device),
        "decode_op_overhead_seconds": decode_op_overhead_seconds(device, _wall_seconds_per_call),
    }
    host = host_op_seconds(device, op_seconds)
    if host > 0:
        profile["host_op_seconds"] = host
    profile["launch_seconds"] = launch_seconds(device)
    python = optimizer_tensor_seconds(device, op_seconds, host or 0.0)
    if python > 0:
        profile["optimizer_tensor_seconds"] = python
    if device == "cuda" and gpu_timed():
        profile.update(gpu_timed=True, kernel_overhead_seconds=kernel_overhead())
    profile["calibration_seconds"] = time.perf_counter() - started
    profile["load_average"] = load
    profile["others_cpus"] = others.cpus()
    profile["cpu_count"] = os.cpu_count()
    profile["busy"] = busy_warning(profile) is not None     # the flag the cache keeps (calibrated_device)
    return check_profile(profile)
