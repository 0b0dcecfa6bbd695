"""GPU memory before and during a run: does the step fit in the device's free memory, and a CUDA OOM in one line.

`check_cuda_fits` runs before `train`, `profile` or `measure` allocate anything on a GPU. It compares what the
step will hold with the free memory torch.cuda.mem_get_info() reports (asking for it starts CUDA, so the context
and any other process are already out of that figure). The step's tensors peak at the predicted peak of a
training step after the first (account.memory.per_gpu.memory_per_gpu's peak_bytes: optimizer states, activations, the
loss's fp32 logits-sized buffers); PyTorch's caching allocator holds more, by an amount that depends on the order
of allocations (1.5-20 % of the peak over the configurations replayed in docs/measure.md). So:
- peak + cuBLAS workspaces > free: it cannot fit; stop;
- peak + account.memory.per_gpu.cuda_reserve_bytes (10 % for the cache) <= free: it fits;
- in between, when `replay` is given (measure.compare.check_gpu_memory gives it for one-GPU runs of trainledger's
  Transformer: the step replayed on fake tensors through measure.allocator, a few seconds), stop if the replayed
  reservation exceeds the free memory; without it, go on with a warning line.
A stop is one TrainledgerError line with the numbers and the largest batch that fits with the 10 % allowance
(exit status 2). The prediction can be wrong for a model it does not describe: TRAINLEDGER_NO_MEMORY_CHECK=1
skips the check.

`oom_message` turns a torch.OutOfMemoryError that happens anyway into one line with the numbers PyTorch
reports: asked, allocated, reserved (of which cached but unusable: fragmentation), free, total.
"""

from __future__ import annotations

import os
import re

from trainledger.errors import TrainledgerError
from trainledger.units import format_bytes

SKIP_ENV = "TRAINLEDGER_NO_MEMORY_CHECK"
_SIZE = r"([0-9.]+) (bytes|KiB|MiB|GiB|TiB|PiB)"
_SCALE = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50}


def cuda_free_bytes(mem_get_info=None) -> tuple[float, float]:
    """(free, total) bytes of the current CUDA device: torch.cuda.mem_get_info(), or `mem_get_info()` (tests)."""
    if mem_get_info is None:
        import torch
        if not torch.cuda.is_available():
            raise TrainledgerError("--device cuda: no CUDA device is available here")
        mem_get_info = torch.cuda.mem_get_info
    free, total = mem_get_info()
    return float(free), float(total)


def needed_bytes(peak_bytes: float) -> float:
    """Bytes a step whose tensors peak at `peak_bytes` needs from the free memory of a started CUDA device."""
    from trainledger.account.memory.per_gpu import cuda_reserve_bytes
    return peak_bytes + cuda_reserve_bytes(peak_bytes, context=False)["total"]


def largest_batch(peak_of_batch, free_bytes: float, below: int) -> int:
    """The largest batch size b < `below` whose needed_bytes(peak_of_batch(b)) fit in `free_bytes` (0 if none)."""
    lo, hi = 0, below            # needed(lo) fits (0: nothing), needed(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if needed_bytes(peak_of_batch(mid)) <= free_bytes else (lo, mid)
    return lo


def check_cuda_fits(peak_of_batch, batch_size: int, *, what: str = "this training step", flag: str = "--batch-size",
                    hint: str = "", mem_get_info=None, environ=None, replay=None) -> dict:
    """Raise a one-line TrainledgerError when the step at `batch_size` does not fit the CUDA device's free memory.

    `peak_of_batch(b)` is the predicted peak bytes at batch size b (monotone in b); `replay(b)`, optional, the
    bytes the caching allocator reserves for the step (measure.allocator), asked only when the 10 % allowance
    decides nothing (module docstring). Returns {"needed_bytes", "free_bytes", "total_bytes", "checked", "how"}
    when it fits, with a "warning" line when only the allowance said it might not (checked False when
    TRAINLEDGER_NO_MEMORY_CHECK=1). `mem_get_info` and `environ` replace torch.cuda's and os.environ (tests).
    """
    from trainledger.account.memory.per_gpu import CUBLAS_HANDLES, CUBLAS_WORKSPACE_BYTES
    environ = os.environ if environ is None else environ
    if environ.get(SKIP_ENV, "") not in ("", "0"):
        return {"checked": False}
    free, total = cuda_free_bytes(mem_get_info)
    peak = peak_of_batch(batch_size)
    floor, need = peak + CUBLAS_HANDLES * CUBLAS_WORKSPACE_BYTES, needed_bytes(peak)
    result = {"needed_bytes": need, "free_bytes": free, "total_bytes": total, "checked": True, "how": "allowance"}
    if need <= free:
        return result
    if floor <= free and replay is None:
        result["warning"] = (f"{flag} {batch_size}: {what} peaks at {format_bytes(peak)}; with the caching allocator's "
                             f"usual cache it needs about {format_bytes(need)} and {format_bytes(free)} is free: "
                             f"it may run out of memory")
        return result
    reserved = replay(batch_size) if floor <= free else None
    if reserved is not None and reserved <= free:
        return {**result, "needed_bytes": reserved, "how": "replay"}
    best = largest_batch(peak_of_batch, free, batch_size)
    advice = (f"the largest that fits is {flag} {best}{hint}" if best else
              f"even {flag} 1 does not fit: a shorter --seq-len, a lighter --precision, more GPUs or a smaller model")
    needs = (f"needs about {format_bytes(need)} on the GPU (peak {format_bytes(peak)} + {format_bytes(need - peak)} "
             "for the caching allocator and cuBLAS)" if reserved is None else
             f"peaks at {format_bytes(peak)} and PyTorch's caching allocator would reserve {format_bytes(reserved)} "
             "for it (its allocations replayed on fake tensors)")
    raise TrainledgerError(f"{flag} {batch_size}: {what} {needs} but {format_bytes(free)} of {format_bytes(total)} is "
                           f"free (torch.cuda.mem_get_info); {advice} (or set {SKIP_ENV}=1 to run anyway)")


def is_cuda_oom(error: BaseException) -> bool:
    """Whether `error` is torch's CUDA out-of-memory error (torch.OutOfMemoryError), checked without importing torch."""
    return any(cls.__name__ == "OutOfMemoryError" and cls.__module__.startswith("torch") for cls in type(error).__mro__)


def _size(pattern: str, text: str) -> float | None:
    match = re.search(pattern.replace("SIZE", _SIZE), text)
    return float(match.group(1)) * _SCALE[match.group(2)] if match else None


def oom_numbers(message: str) -> dict:
    """{asked, total, free, in_use, allocated, unallocated} bytes (None where absent) from PyTorch's OutOfMemoryError
    text (c10/cuda/CUDACachingAllocator.cpp: "Tried to allocate X. GPU 0 has a total capacity of T of which F is free.
    Including non-PyTorch memory, this process has P memory in use. Of the allocated memory A is allocated by
    PyTorch, and U is reserved by PyTorch but unallocated."). P - A - U is what the process holds outside the
    caching allocator: its CUDA context (account.memory.per_gpu.CUDA_CONTEXT_BYTES)."""
    return {"asked": _size(r"Tried to allocate SIZE", message),
            "total": _size(r"total capacity of SIZE", message),
            "free": _size(r"of which SIZE is free", message),
            "in_use": _size(r"this process has SIZE memory in use", message),
            "allocated": _size(r"SIZE is allocated by PyTorch", message),
            "unallocated": _size(r"SIZE is reserved by PyTorch but unallocated", message)}


def oom_message(error: BaseException, live=None) -> str:
    """One line for a CUDA out-of-memory error: asked, allocated, reserved (fragmentation), free and total.

    Figures come from PyTorch's message; those it lacks from `live()` → {allocated, reserved, free, total}
    (default: torch.cuda.memory_allocated/memory_reserved/mem_get_info now).
    """
    n = oom_numbers(str(error))
    if any(n[k] is None for k in ("allocated", "unallocated", "free", "total")):
        try:
            now = live() if live is not None else _live_cuda()
        except Exception:            # no CUDA to ask (or it is broken): say what the message said
            now = {}
        n["allocated"] = n["allocated"] if n["allocated"] is not None else now.get("allocated")
        if n["unallocated"] is None and now.get("reserved") is not None and n["allocated"] is not None:
            n["unallocated"] = now["reserved"] - n["allocated"]
        n["free"] = n["free"] if n["free"] is not None else now.get("free")
        n["total"] = n["total"] if n["total"] is not None else now.get("total")

    def fmt(value):
        return format_bytes(value) if value is not None else "?"
    reserved = n["allocated"] + n["unallocated"] if n["allocated"] is not None and n["unallocated"] is not None else None
    return (f"CUDA out of memory: the step asked for {fmt(n['asked'])} more with {fmt(n['allocated'])} allocated and "
            f"{fmt(reserved)} reserved by PyTorch ({fmt(n['unallocated'])} of it cached but unusable: fragmentation), "
            f"{fmt(n['free'])} free of {fmt(n['total'])}; use a smaller --batch-size or --seq-len, --recompute, or "
            f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (`trainledger memory` and `measure` predict the peak)")


def _live_cuda() -> dict:
    import torch
    free, total = torch.cuda.mem_get_info()
    return {"allocated": float(torch.cuda.memory_allocated()), "reserved": float(torch.cuda.memory_reserved()),
            "free": float(free), "total": float(total)}


def peak_of_batch_fn(spec, seq_len: int, *, precision: str, optimizer: str, recompute: str = "none", **settings):
    """b -> the predicted peak bytes of a later training step of `spec` at batch size b (account.memory.per_gpu, one GPU)."""
    from trainledger.account.memory.per_gpu import memory_per_gpu
    from trainledger.specs.run import Run

    settings = {"zero": 0, **settings}
    grad_accum = settings.pop("grad_accum", 1)
    # ZeRO as the paper shards the states (no FSDP2 buffers), no reserve: the step's tensors (the reserve is checked
    # against what CUDA reports free)
    run = Run().with_(seq_len=seq_len, precision=precision, optimizer=optimizer, recompute=recompute, impl="paper",
                      reserve=0.0, **settings)

    def peak(batch_size: int) -> float:
        batch = run.with_(batch_size=batch_size, global_batch_size=grad_accum * (run.layout.dp or 1) * batch_size)
        return memory_per_gpu(spec, None, batch)["peak_bytes"]
    return peak


def check_before_run(spec, device, *, batch_size: int, seq_len: int, precision: str, optimizer: str,
                     recompute: str = "none", what: str = "this training step", flag: str = "--batch-size",
                     hint: str = "", mem_get_info=None, environ=None, replay=None, **sharding) -> dict | None:
    """check_cuda_fits of `spec`'s step at the micro-batch `batch_size` (account.memory.per_gpu's peak of a later step on one
    GPU; `sharding`: zero, dp, tp, pp, grad_accum of the run, as memory_per_gpu takes them). `replay(b)` is used only
    when the run is one GPU without accumulation (it replays that step). Nothing is checked off CUDA (None).
    `train`, `profile` and `measure` call it through measure.compare.check_gpu_memory, which supplies the replay."""
    if getattr(device, "type", device) != "cuda":
        return None
    peak = peak_of_batch_fn(spec, seq_len, precision=precision, optimizer=optimizer, recompute=recompute, **sharding)
    one_gpu = all(sharding.get(k, 1) == 1 for k in ("dp", "tp", "pp", "grad_accum"))
    result = check_cuda_fits(peak, batch_size, what=what, flag=flag, hint=hint, mem_get_info=mem_get_info,
                             environ=environ, replay=replay if one_gpu else None)
    if result.get("warning"):
        import sys
        sys.stderr.write(f"warning: {result['warning']}\n")
    return result
