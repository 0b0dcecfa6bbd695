"""Accelerators as data: dense peak FLOP/s per dtype, memory and bandwidth, with the datasheet above each entry.

Peaks are dense (no 2:4 sparsity): vendor datasheets print sparse figures at 2x; those are never used here.
Units: FLOP/s, bytes (SI, as datasheets print them), bytes/s. Unknown names are errors that list what is known.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainledger.errors import TrainledgerError


@dataclass(frozen=True)
class GPUSpec:
    """One accelerator. `peak_flops_per_s` maps a dtype name (fp64, fp32, tf32, bf16, fp16, fp8, int8) to dense FLOP/s."""

    name: str
    peak_flops_per_s: dict[str, float]
    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    aliases: tuple[str, ...] = ()
    vendor: str = ""
    source: str = ""

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for `dtype`; an error listing the dtypes this device has otherwise."""
        if dtype not in self.peak_flops_per_s:
            known = ", ".join(self.peak_flops_per_s)
            raise TrainledgerError(f"{self.name} has no {dtype} peak; it has: {known}", "--dtype")
        return self.peak_flops_per_s[dtype]

    def to_dict(self) -> dict:
        return {"name": self.name, "aliases": list(self.aliases), "vendor": self.vendor,
                "peak_flops_per_s": dict(self.peak_flops_per_s), "memory_bytes": self.memory_bytes,
                "memory_bandwidth_bytes_per_s": self.memory_bandwidth_bytes_per_s, "source": self.source}


T = 1e12

# NVIDIA H100 Tensor Core GPU datasheet (SXM5 column), dense = half of the printed sparse tensor-core figures
H100_SXM = GPUSpec(
    name="h100-sxm", aliases=("h100", "h100-sxm5", "h100-80gb"), vendor="NVIDIA",
    peak_flops_per_s={"fp64": 67 * T, "fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "fp16": 989.5 * T,
                      "fp8": 1979 * T, "int8": 1979 * T},
    memory_bytes=80e9, memory_bandwidth_bytes_per_s=3.35e12,
    source="NVIDIA H100 Tensor Core GPU datasheet (SXM5), dense tensor-core peaks",
)

GPUS: list[GPUSpec] = [H100_SXM]


def get_gpu(name: str, flag: str = "--gpu") -> GPUSpec:
    """The GPUSpec named `name` or one of its aliases (case-insensitive); an error listing known names otherwise."""
    key = str(name).strip().lower()
    for gpu in GPUS:
        if key == gpu.name or key in gpu.aliases:
            return gpu
    known = ", ".join(gpu.name for gpu in GPUS)
    raise TrainledgerError(f"unknown GPU {name!r} ({flag}). Known: {known} (see `trainledger hardware`)")
