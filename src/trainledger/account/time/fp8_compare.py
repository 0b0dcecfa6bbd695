"""An FP8 step beside the 16-bit step it replaces, same layout: what FP8 buys, part by part. Pure.

The base of each FP8 recipe is the 16-bit recipe that keeps the same model states (specs/recipes.py): mixed-bf16
for Transformer Engine's recipes (fp8-cs, fp8-delayed, mxfp8), amp-bf16 for torchao's fp8-rowwise. "GEMM
seconds" is the step's "compute" part: the weight GEMMs of all layers and the head (the attention core is
"attention"); the casts and amax passes FP8 adds are in "memory_bound".
"""

from __future__ import annotations

from trainledger.account.time.step import step_time
from trainledger.specs.fp8 import fp8_scheme

BASE = {"fp8-cs": "mixed-bf16", "fp8-delayed": "mixed-bf16", "mxfp8": "mixed-bf16", "fp8-rowwise": "amp-bf16"}


def base_precision(precision: str) -> str | None:
    """The 16-bit recipe an FP8 recipe is compared with; None for a recipe without FP8."""
    return BASE.get(precision) if fp8_scheme(precision) is not None else None


def compare_with_base(spec, hardware, result: dict) -> dict:
    """{"base_precision", "fp8_gemm_seconds", "base_gemm_seconds", "cast_seconds_added", "step_seconds",
    "base_step_seconds", "speedup", "fp8_gemms"}: `result` (a step_time of an FP8 recipe on `hardware`) against the
    same run (its `run`) in the base recipe."""
    base = base_precision(result["precision"])
    other = step_time(spec, hardware, result["run"].with_(precision=base), with_memory=False)
    return {"base_precision": base,
            "fp8_gemm_seconds": result["breakdown"]["compute"], "base_gemm_seconds": other["breakdown"]["compute"],
            "cast_seconds_added": result["breakdown"]["memory_bound"] - other["breakdown"]["memory_bound"],
            "step_seconds": result["step_seconds"], "base_step_seconds": other["step_seconds"],
            "speedup": other["step_seconds"] / result["step_seconds"], "fp8_gemms": result.get("fp8_gemms", [])}
