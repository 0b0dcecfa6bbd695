"""FP8 training on the roofline: the Linear GEMMs of a layer at the FP8 rate, plus the kernels FP8 adds. Pure.

`layer_kernels(kernels, precision, a)` takes the {"forward", "backward"} kernels of one transformer layer that
account.time.kernels builds for the 16-bit recipe an FP8 recipe rests on (specs/recipes.py), and returns them with
- each weight GEMM (part "compute", kind "gemm": the Linears of attention and MLP; never the attention core, the
  router or the LM head, which is an edge kernel and stays bf16) whose role is in the scheme's fp8_gemms run at the
  GPU's "fp8" peak (MXFP8 too: GPUSpec.block_scaled) and measured FP8 efficiency, its two operands read at 1 byte per element (+ the
  MX scales), its output still written in bf16;
- the quantization kernels each scheme runs (specs/fp8.py), memory-bound, counted from the GEMM shapes
  (forward C[m,n] = X[m,k]·W[k,n]: the input has m·k elements, the weight k·n; dgrad reads the output gradient, m·n):
    * Transformer Engine (fp8-cs, fp8-delayed, mxfp8): forward, the input and the weight each cast once with a
      fused cast + transpose (reads a, writes 1 + 1 bytes: the row- and column-wise copies); backward, the output
      gradient likewise; nothing is recast (saved inputs and cached weights are FP8 already). Current scaling
      (fp8-cs, mxfp8's per-block amax inside the cast is free) first reads each tensor once more for its amax.
      The weight casts are charged to every micro-batch: an upper bound, since TE casts weights on the first
      micro-batch only when told (is_first_microbatch).
    * torchao rowwise (fp8-rowwise): every operand is cast where it is used, in the axis its GEMM reduces over:
      forward the input and the weight; backward the output gradient twice (for dgrad and wgrad), the weight
      again (dgrad) and the saved bf16 input (wgrad); each an amax pass (read a) and a cast (read a, write 1).
Elementwise FLOPs are not counted (DESIGN.md); model FLOPs do not change with FP8 (NVIDIA's "Model TFLOP/s/GPU"
counts the same 6N + causal attention FLOPs whatever the precision: see `convention`).
"""

from __future__ import annotations

from dataclasses import replace

from trainledger.account.time.eager import ew
from trainledger.specs.fp8 import check_gpu_supports, fp8_scheme  # noqa: F401 (re-exported)

EXCLUDED = ("router", "shared_expert_gate", "lm_head")   # GEMMs that stay bf16 even inside an FP8 layer
TE_CASTS_PER_GEMM = {"forward": ("input", "weight"), "dgrad": ("grad_output",), "wgrad": ()}
TORCHAO_CASTS_PER_GEMM = {"forward": ("input", "weight"), "dgrad": ("grad_output", "weight"),
                          "wgrad": ("grad_output", "input")}


def _operand_elements(kernel) -> dict[str, float]:
    """Elements of each operand of a Linear's GEMM, from its shape (account.time.eager.gemm's m, n, k, batch)."""
    m, n, k, batch = kernel.shape
    if kernel.role == "forward":       # X[m,k] · W[k,n]
        return {"input": batch * m * k, "weight": batch * k * n}
    if kernel.role == "dgrad":         # dY[m,k] · W[k,n]   (k = fan_out, n = fan_in)
        return {"grad_output": batch * m * k, "weight": batch * k * n}
    return {"grad_output": batch * m * k, "input": batch * k * n}       # wgrad: dYᵀ[m,k] · X[k,n]


def _is_fp8_gemm(kernel, scheme) -> bool:
    return (kernel.kind == "gemm" and kernel.part == "compute" and not kernel.core
            and kernel.role in scheme.fp8_gemms and not kernel.name.startswith(EXCLUDED))


def gemm_in_fp8(kernel, scheme, a: int):
    """The GEMM `kernel` run in FP8: the scheme's peak key, operands at 1 byte (+ scales) instead of `a` bytes."""
    operands = sum(_operand_elements(kernel).values())
    saved = operands * (a - scheme.fp8_bytes_per_element())
    # MXFP8 runs at the FP8 rate (the datasheets print one figure); its scales are in the bytes
    return replace(kernel, dtype="fp8", bytes=max(kernel.bytes - saved, 0.0))


def quantize_kernels(kernel, scheme, a: int) -> list:
    """The casts (and amax passes) that feed one FP8 GEMM (module docstring), as memory-bound kernels."""
    torchao = scheme.weight_copies == 0
    casts = (TORCHAO_CASTS_PER_GEMM if torchao else TE_CASTS_PER_GEMM)[kernel.role]
    elements = _operand_elements(kernel)
    written = scheme.fp8_bytes_per_element() * (1 if torchao else 2)       # TE: fused cast + transpose
    out = []
    for operand in casts:
        n = elements[operand]
        name = f"{kernel.name}_{operand}_fp8_cast"
        out.append(ew(name, n * (a + written), role=kernel.role))
        if scheme.amax_pass and scheme.scale_block <= 0:      # per-tensor / per-row amax: one more read first
            out.append(ew(f"{kernel.name}_{operand}_amax", n * a, role=kernel.role))
    return out


def layer_kernels(kernels: dict, precision: str, a: int) -> dict:
    """{"forward", "backward"} kernels of one layer with the FP8 GEMMs and their casts (module docstring);
    `kernels` unchanged for a recipe without FP8. `a`: bytes of a 16-bit matmul input (2)."""
    scheme = fp8_scheme(precision)
    if scheme is None:
        return kernels
    out = {}
    for phase, ks in kernels.items():
        new = []
        for k in ks:
            if _is_fp8_gemm(k, scheme):
                new += quantize_kernels(k, scheme, a)
                new.append(gemm_in_fp8(k, scheme, a))
            else:
                new.append(k)
        out[phase] = new
    return out


def fp8_gemms(kernels: dict, precision: str) -> list[str]:
    """Names of the GEMMs that run in FP8 in a layer's kernels (for the step's notes)."""
    scheme = fp8_scheme(precision)
    if scheme is None:
        return []
    return [k.name for ks in kernels.values() for k in ks if _is_fp8_gemm(k, scheme)]


def convention(result: dict) -> dict:
    """NVIDIA's "Model TFLOP/s/GPU" of a step result: model FLOPs per step (6N + causal attention, no recompute,
    the same count in FP8 and BF16) / step seconds / GPUs, in FLOP/s, and the words that state it.

    The Megatron Bridge performance summary (NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md) divides its
    "Model TFLOP / sec / GPU" by "Tokens / sec / GPU" to the same FLOPs per token for FP8 and BF16 rows (Llama 3 8B
    at seq 8192: 744e12 / 14451 = 5.15e10, our causal count): a rate, not a fraction of any peak. MFU here stays
    against the bf16 peak (FP8 GEMMs can push it past what bf16 allows); torchtitan reports no MFU with Float8
    for that reason (pytorch/torchtitan docs/performance.md)."""
    per_gpu = result["model_flops_per_step"] / result["step_seconds"] / result["num_gpus"]
    return {"model_flops_per_s_per_gpu": per_gpu,
            "model_flops_convention": "Model TFLOP/s/GPU as NVIDIA's Megatron Bridge tables state it: model FLOPs "
                                      "(6N + causal attention, no recompute; the same in FP8 and BF16) per second "
                                      "per GPU; MFU is against the bf16 peak"}
