"""Memory a real measurement may use, checked before anything is allocated.

`trainledger measure --device cpu|cuda` runs a real training step. A Llama-2-7B step needs about
108 GB; started on a 24 GiB machine it would swap for minutes and die with an allocator error. So the
step's predicted peak (account/, pure arithmetic) is compared first with what the device can give:

- cpu: the smallest of MemAvailable (/proc/meminfo: free memory plus reclaimable caches, Linux'
  own estimate of what can be allocated without swapping), the cgroup's limit minus its usage
  (containers: cgroup v2 memory.max - memory.current, or v1 limit - usage) and the address-space
  limit (RLIMIT_AS, `ulimit -v`) minus the process's current size;
- cuda: free device memory from torch.cuda.mem_get_info().

When the prediction exceeds it, a TrainledgerError with both numbers suggests --device fake, which
measures the same step on fake tensors without allocating.
"""

from __future__ import annotations

import math
import os
import resource

from trainledger.errors import TrainledgerError
from trainledger.units import format_bytes

CGROUP_V2 = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current")
CGROUP_V1 = ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes")


def _read_int(path: str) -> int | None:
    try:
        with open(path) as file:
            text = file.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None      # 'max' (no limit) -> None


def _meminfo_kib(key: str, path: str = "/proc/meminfo") -> int | None:
    try:
        with open(path) as file:
            for line in file:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def available_cpu_bytes() -> tuple[float, str]:
    """(bytes this process can still allocate in RAM, where the figure comes from); inf when nothing says."""
    candidates = []
    kib = _meminfo_kib("MemAvailable")
    if kib is not None:
        candidates.append((kib * 1024.0, "MemAvailable in /proc/meminfo"))
    for limit_path, usage_path in (CGROUP_V2, CGROUP_V1):
        limit, usage = _read_int(limit_path), _read_int(usage_path)
        if limit is not None and usage is not None and limit < 2**60:
            candidates.append((float(max(limit - usage, 0)), f"cgroup limit {limit_path} minus usage"))
            break
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        size_kib = _meminfo_kib("VmSize", f"/proc/{os.getpid()}/status") or 0
        candidates.append((float(max(soft - size_kib * 1024, 0)), "RLIMIT_AS (ulimit -v) minus the process size"))
    return min(candidates) if candidates else (math.inf, "unknown")


def available_cuda_bytes() -> tuple[float, str]:
    """(free bytes on the current CUDA device, 'torch.cuda.mem_get_info')."""
    import torch
    if not torch.cuda.is_available():
        raise TrainledgerError("--device cuda: no CUDA device is available here (use fake, meta or cpu)")
    free, _total = torch.cuda.mem_get_info()
    return float(free), "free memory from torch.cuda.mem_get_info()"


def check_fits(predicted_peak_bytes: float, device: str, available=None) -> None:
    """Raise a one-line TrainledgerError when a real step on `device` ('cpu' or 'cuda') would need more than it has.

    `available` (for tests) replaces the probe: a (bytes, source) pair.
    """
    if device not in ("cpu", "cuda"):
        return
    have, source = available or (available_cpu_bytes() if device == "cpu" else available_cuda_bytes())
    if predicted_peak_bytes > have:
        raise TrainledgerError(
            f"--device {device}: this step needs about {format_bytes(predicted_peak_bytes)} "
            f"({predicted_peak_bytes:.3g} B, predicted peak) but only {format_bytes(have)} ({have:.3g} B, {source}) "
            f"is available; use --device fake to measure it without allocating, or a smaller --batch-size, "
            f"--seq-len or model", "--device")
