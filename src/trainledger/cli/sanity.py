"""Checks for absurd input that would otherwise get a confident answer: one `warning:` line, or an error (exit 2)
where no answer is meaningful. Each check says what was received and why it cannot be what the user meant.

- a compute budget that trains less than one parameter (`optimal`): an error, raised by
  account.planning.plan.compute_optimal (cli/optimal.py names --num-gpus × --days × --mfu when the budget came from them);
- ZeRO sharding over more data-parallel ranks than the model has parameters (`memory`): an error; over more
  than a million GPUs: the outlandish-GPU-count warning;
- bytes beyond any machine (`measure`, `tensor`): a warning once one device's memory would exceed
  ABSURD_DEVICE_MULTIPLE × the largest accelerator memory in specs/hardware.py (1,000 × 192 GB: more HBM than a
  thousand of the largest GPUs hold together, for what one device or one tensor would need);
- a custom --memory-per-gpu (`fit`): labelled as such rather than with the --gpu it replaced.
"""

from __future__ import annotations

from trainledger import units
from trainledger.errors import TrainledgerError

ABSURD_DEVICE_MULTIPLE = 1000


def largest_device():
    """The GPUSpec with the most memory in specs/hardware.py."""
    from trainledger.specs.hardware import GPUS
    return max(GPUS, key=lambda gpu: gpu.memory_bytes)


def absurd_bytes(n_bytes: float, what: str, fix: str) -> list[str]:
    """[one warning] when `n_bytes` is beyond ABSURD_DEVICE_MULTIPLE × the largest accelerator memory, else []."""
    gpu = largest_device()
    if not n_bytes > ABSURD_DEVICE_MULTIPLE * gpu.memory_bytes:
        return []
    return [f"{what} is {units.format_bytes(n_bytes)} ({n_bytes:.3g} B), {n_bytes / gpu.memory_bytes:.3g} × the memory of "
            f"the largest accelerator known ({gpu.name}, {units.format_bytes(gpu.memory_bytes)}): no machine holds it; {fix}"]


def check_zero_ranks(n_params: float, dp: int, zero: int) -> None:
    """Exit 2 when ZeRO shards the states over more data-parallel ranks than there are parameters."""
    if zero >= 1 and dp > n_params:
        raise TrainledgerError(f"--dp {dp:,} data-parallel ranks exceed the model's {n_params:,.0f} parameters: "
                               f"ZeRO {zero} would leave ranks holding no state; use --dp at most the parameter count "
                               "(real jobs use at most ~1e5 GPUs)")


def custom_memory_label(gpu_name: str, memory_per_gpu_bytes: float | None, gpu_flag_given: bool) -> str:
    """The name to show for the device: the --gpu name, or a custom size when --memory-per-gpu replaced its memory."""
    if memory_per_gpu_bytes is None:
        return gpu_name
    size = units.format_bytes(memory_per_gpu_bytes)
    return f"{gpu_name} at {size} (--memory-per-gpu)" if gpu_flag_given else f"custom {size} GPU (--memory-per-gpu)"
