"""Calibration: this machine's matmul FLOP/s by shape, memory bandwidth by op size, SDPA rate and per-op overhead.

    calibrate(device) -> profile dict          (the format of specs/calibration.py; a few seconds on a CPU)
    profile_path(device) -> Path               $XDG_CACHE_HOME/trainledger/calibration-<key>.json (~/.cache/...)
    load_profile(path) -> dict | None          JSON only (never unpickled), validated; a bad file counts as absent
    save_profile(profile, path)                atomic: a temporary file in the same folder, then os.replace
    calibrated_device(device) -> GPUSpec       the cached profile, calibrating once on first use (a notice on stderr)

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
- the per-op overhead: a chain of multiplications of 8-element tensors under autograd, forward and backward,
  divided by the ops dispatched (Python call, dispatcher, autograd bookkeeping: what every op costs beyond its
  arithmetic); and per operator of our Transformer's KV-cache decoding step at a negligible size, in inference
  mode (module calls, views and the cache's bookkeeping included), for account/inference.py.
The profile is keyed by device, its name, the host, torch's version and its thread count: any change
re-calibrates. Numbers measured on a busy machine are slower; run `trainledger bench --calibrate` on a quiet
one to refresh the cache.
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

from trainledger.account.roofline import FLASH_BACKWARD_FLOPS_RATIO
from trainledger.errors import TrainledgerError
from trainledger.files import atomic_path
from trainledger.measure.timing import DTYPES, cpu_peak_flops_per_s, peak_flops_per_s, synchronize
from trainledger.specs.calibration import FORMAT, VERSION, calibrated_gpu, check_profile

MIN_SAMPLE_SECONDS = 0.002
DECODE_SAMPLES = 25   # decoding steps are ~1 ms: many short samples, so that one falls in an undisturbed stretch
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


def load_profile(path) -> dict | None:
    """The profile stored at `path`, or None when it is missing, unreadable or invalid (then it is re-measured)."""
    try:
        return check_profile(json.loads(Path(path).read_text()))
    except (OSError, ValueError, TrainledgerError):
        return None


def save_profile(profile: dict, path) -> Path:
    """Writes `profile` as JSON to `path` atomically (a temporary file beside it, then os.replace)."""
    path = Path(path)
    check_profile(profile)
    with atomic_path(path) as tmp, open(tmp, "w") as handle:
        json.dump(profile, handle, indent=1)
        handle.flush()
        os.fsync(handle.fileno())
    return path


def calibrated_device(device: str = "cpu", *, log=None):
    """The GPUSpec of this machine's `device` from its cached profile, calibrating first when there is none.

    `log` (default: stderr) gets one line when a calibration runs. A calibration measured while the machine was
    busy is used for this run but not cached (a later, quieter run measures again), and a cached busy one (from
    an explicit `bench --calibrate`) is named every time it is used: its rates understate the machine."""
    _check_device(device)
    say = log or (lambda line: print(line, file=sys.stderr, flush=True))
    path = profile_path(device)
    profile = load_profile(path)
    if profile is None:
        say(f"calibrating this machine's {device} once (a few seconds; cached in {path}; "
            f"`trainledger bench --calibrate` to refresh)")
        profile = calibrate(device)
        if busy_warning(profile) is None:
            save_profile(profile, path)
        else:
            say(f"warning: {busy_warning(profile)} (not cached: the next run measures again)")
    elif busy_warning(profile):
        say(f"warning: the cached calibration {path}: {busy_warning(profile)}")
    return gpu_from_profile(profile)


def gpu_from_profile(profile: dict):
    """The GPUSpec of a profile: a CPU's own; a CUDA device's datasheet entry with the measured tables."""
    base = None
    if profile["device"] == "cuda":
        from trainledger.specs.hardware import gpu_for_device_name
        base = gpu_for_device_name(profile["device_name"])
    return calibrated_gpu(profile, base)


def _check_device(device: str) -> None:
    if device not in GRIDS:
        raise TrainledgerError(f"calibration device must be cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise TrainledgerError("--gpu cuda: no CUDA device is available here (use --gpu cpu, or a GPU name)")


# --- measurements -------------------------------------------------------------------------------------------
def seconds_per_call(fn, device: str, samples: int = 3) -> float:
    """Seconds of one fn() call: one warm-up, then the fastest of `samples` samples of enough calls to last ≥ 2 ms."""
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    first = time.perf_counter() - start
    calls = max(1, int(MIN_SAMPLE_SECONDS / max(first, 1e-7)))
    times = []
    for _ in range(samples):
        synchronize(device)
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        synchronize(device)
        times.append((time.perf_counter() - start) / calls)
    return min(times)


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
    device, bytes counted as account/kernels.py counts them: tanh-GELU ("gelu": read x, write y, 8 B/element),
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
    as account/kernels.py counts it: "cross_entropy" 8 bytes per logit in 3 ops, "cross_entropy_backward" 16
    bytes per logit in 3 ops; [[bytes per op, bytes/s], ...] at 3 sizes."""
    out = {"cross_entropy": [], "cross_entropy_backward": []}
    for op_bytes in MEMORY_OP_BYTES[device][1::2] or MEMORY_OP_BYTES[device]:
        width = min(vocab, max(op_bytes // 4, 1))
        rows = max(op_bytes // 4 // width, 1)
        logits = torch.randn(rows, width, device=device, requires_grad=True)
        targets = torch.randint(0, width, (rows,), device=device)
        with torch.no_grad():
            fwd = seconds_per_call(lambda: torch.nn.functional.cross_entropy(logits, targets), device)
        loss = torch.nn.functional.cross_entropy(logits, targets)
        bwd = seconds_per_call(lambda: torch.autograd.grad(loss, logits, retain_graph=True), device)
        n = rows * width
        out["cross_entropy"].append([8 * n / 3, 8 * n / fwd])
        out["cross_entropy_backward"].append([16 * n / 3, 16 * n / bwd])
    return out


def attention_rates(device: str) -> dict:
    """Causal SDPA rates by sequence length: forward and backward FLOP/s, FLOPs as a flash kernel executes them."""
    dtype, heads, head_dim, lengths = ATTENTION[device]
    points = []
    for seq_len in lengths:
        q, k, v = (torch.randn(1, heads, seq_len, head_dim, device=device, dtype=DTYPES[dtype], requires_grad=True)
                   for _ in range(3))
        grad = torch.randn(1, heads, seq_len, head_dim, device=device, dtype=DTYPES[dtype])

        def forward():
            with torch.no_grad():
                torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

        def backward():                     # the same graph again: the backward kernel alone
            torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)

        fwd = seconds_per_call(forward, device)
        bwd = seconds_per_call(backward, device)
        flops = 2 * 2 * heads * seq_len * seq_len * head_dim / 2      # QKᵀ and A·V, half the square (causal)
        points.append([seq_len, flops / fwd, FLASH_BACKWARD_FLOPS_RATIO * flops / bwd])
    return {"dtype": dtype, "head_dim": head_dim, "heads": heads, "points": points}


def op_overhead_seconds(device: str, chain: int = 200) -> float:
    """Seconds per dispatched op beyond its arithmetic: a chain of `chain` multiplications of 8-element tensors
    under autograd, forward and backward (2·chain + 2 ops), per op."""
    x = torch.ones(8, device=device, requires_grad=True)

    def run():
        y = x
        for _ in range(chain):
            y = y * 1.0001
        y.sum().backward()

    return seconds_per_call(run, device, samples=5) / (2 * chain + 2)


def decode_op_overhead_seconds(device: str) -> float:
    """Seconds per dispatched operator of a KV-cache decoding step of our Transformer, at sizes where arithmetic is
    negligible (d_model 8, 2 layers): the Python calls, dispatcher and allocator work every operator costs in eager
    inference, beyond the tight chain of op_overhead_seconds. The mean of a GPT-2-style and a Llama-style model
    (LayerNorm/GELU/learned positions vs RMSNorm/SwiGLU/RoPE/grouped-query attention: their mixes of module calls
    and plain ops differ), each the fastest sample of steps at a fixed position, over the operators it dispatches
    (a TorchDispatchMode count)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from trainledger.models.kv_cache import KVCache
    from trainledger.models.transformer import Transformer
    from trainledger.specs.model import TransformerSpec

    class Count(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops += 1
            return func(*args, **(kwargs or {}))

    small = dict(vocab_size=16, d_model=8, n_layers=2, n_heads=2, d_ff=16, max_seq_len=64)
    specs = (TransformerSpec(name="gpt2-like", position="learned", norm="layernorm", norm_bias=True, mlp="gelu",
                             qkv_bias=True, attn_out_bias=True, mlp_bias=True, tied_embeddings=True, **small),
             TransformerSpec(name="llama-like", n_kv_heads=1, **small))
    per_op = []
    torch.manual_seed(0)
    for spec in specs:
        model = Transformer(spec, device=device).eval()
        with torch.inference_mode():
            cache = KVCache(spec, 1, 32, device=device)
            model.forward_cached(torch.zeros(1, 16, dtype=torch.long, device=device), cache)
            token = torch.zeros(1, 1, dtype=torch.long, device=device)

            def step():
                cache.length = 16                  # the same position every time: the same work
                model.forward_cached(token, cache)
            counter = Count()
            with counter:
                step()
            per_op.append(seconds_per_call(step, device, samples=DECODE_SAMPLES) / counter.ops)
    return sum(per_op) / len(per_op)


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
    profile = {
        "format": FORMAT, "version": VERSION, "device": device, "device_name": device_name(device),
        "host": platform.node(), "torch_version": torch.__version__,
        "threads": torch.get_num_threads() if device == "cpu" else None,
        "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "peak_flops_per_s": peaks, "peak_source": "; ".join(sources), "gemm": gemm,
        "memory": memory_rates(device), "elementwise": elementwise_rates(device), "attention": attention_rates(device),
        "op_overhead_seconds": op_overhead_seconds(device), "memory_bytes": _memory_bytes(device),
        "decode_op_overhead_seconds": decode_op_overhead_seconds(device),
    }
    profile["calibration_seconds"] = time.perf_counter() - started
    profile["load_average"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    profile["cpu_count"] = os.cpu_count()
    return check_profile(profile)


def busy_warning(profile: dict) -> str | None:
    """A warning when other processes kept the machine busy during calibration (1-minute load average above half
    the CPUs): the rates then understate it, and a thread descheduled inside a parallel op stalls the others."""
    load, cpus = profile.get("load_average"), profile.get("cpu_count") or 1
    if load is None or load <= cpus / 2:
        return None
    return (f"the machine was busy while calibrating (load average {load:.1f} on {cpus} CPUs): the measured rates "
            "understate it; re-run `trainledger bench --calibrate` when it is quiet")
