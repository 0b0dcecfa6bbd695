"""--reserve, as `memory`, `layout`, `step` and `plan --mfu auto` take it: memory per GPU kept back besides the peak."""

from __future__ import annotations

import argparse

from trainledger import units
from trainledger.errors import TrainledgerError

HELP = ("bytes per GPU kept back besides the training step's peak, e.g. 2GiB; 'auto' (the default: on NVIDIA and AMD "
        "GPUs what a CUDA process holds besides its tensors: the CUDA context 0.49 GiB (lazy module loading) + two cuBLAS workspaces 64 MiB "
        "+ 10%% of the peak for the caching allocator's cache, account/memory/per_gpu.py; 0 on other devices); or "
        "'expandable' (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: context and workspaces only; the default "
        "with --framework torchtitan, whose launcher sets it)")
EXPANDABLE = "expandable"


def reserve_size(text: str) -> float | None:
    """An argparse type for --reserve: 'auto' (None: the device's default), 'expandable' (the context and cuBLAS
    workspaces of account.memory.per_gpu.cuda_reserve_bytes, no allocator cache) or a non-negative size like 2GiB."""
    if str(text).strip().lower() == "auto":
        return None
    if str(text).strip().lower() == EXPANDABLE:
        from trainledger.account.memory.per_gpu import cuda_reserve_bytes
        return cuda_reserve_bytes(0.0, expandable_segments=True)["total"]
    try:
        value = units.parse_bytes(text)
    except TrainledgerError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 'auto' or a non-negative size like 2GiB, got {text!r}")
    return value


def add_reserve_flag(parser) -> None:
    parser.add_argument("--reserve", type=reserve_size, default=None, help=HELP)


def reserve_of(args, gpu) -> float | None:
    """reserve_bytes for account/: --reserve when given, else the device's default (account.memory.per_gpu.default_reserve);
    with --framework torchtitan on a CUDA device, 'expandable': torchtitan's launcher (run_train.sh) sets
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, so its runs keep no caching-allocator cache."""
    from trainledger.account.memory.per_gpu import default_reserve
    value = getattr(args, "reserve", None)
    if value is not None:
        return value
    if getattr(args, "framework", None) == "torchtitan" and default_reserve(gpu) is None:
        return reserve_size(EXPANDABLE)
    return default_reserve(gpu)


def near_limit_warning(what: str, peak_bytes: float, reserve_bytes: float, memory_bytes: float) -> str | None:
    """One warning line when `what` fits but leaves less than account.planning.layout.NEAR_LIMIT_FRACTION of the memory."""
    from trainledger.account.planning.layout import NEAR_LIMIT_FRACTION
    headroom = memory_bytes - peak_bytes - reserve_bytes
    if not 0 <= headroom < NEAR_LIMIT_FRACTION * memory_bytes:
        return None
    return (f"{what} peaks at {units.format_bytes(peak_bytes)} + {units.format_bytes(reserve_bytes)} reserve of "
            f"{units.format_bytes(memory_bytes)}: {units.format_bytes(headroom)} ({100 * headroom / memory_bytes:.1f}%) "
            "to spare, within the spread of the caching allocator's cache (1.5-20% of the peak): it may run out of "
            "memory; `trainledger measure` replays this step's allocations")
