"""The parts a training step's time is grouped into, and which op or kernel goes where (pure: no torch).

    CATEGORIES       parts of a CPU step: CPU ops' own time, and "overhead" for Python, dispatch and idle
    GPU_CATEGORIES   parts of a CUDA step: kernels on the GPU timeline, and "idle" for the GPU waiting
    op_category(name) -> str | None       the part an op's own time belongs to by its name
    kernel_category(name, kind, context)  the part a GPU kernel (or memcpy/memset) belongs to

Used by measure/profile.py (live steps) and measure/trace.py (a recorded Chrome/Kineto trace), so that both
group the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CATEGORIES = ("matmul", "attention", "memory_bound", "optimizer", "communication", "data_loading", "overhead")
# On a GPU the step is the GPU timeline: kernel-busy time by part, plus the time the GPU waits (for the CPU to
# launch, for Python, for a synchronization): "idle" takes the place of the CPU's "overhead".
GPU_CATEGORIES = ("matmul", "attention", "memory_bound", "optimizer", "communication", "data_loading", "idle")
ALL_CATEGORIES = CATEGORIES + ("idle",)

# The labelled regions of a trainledger step (record_function) and the part their whole time goes to.
REGIONS = {"trainledger.data": "data_loading", "trainledger.forward_backward": None,
           "trainledger.optimizer": "optimizer"}
MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
              "aten::addmv", "aten::mv", "aten::_addmm_activation"}
METADATA_OPS = {"aten::view", "aten::reshape", "aten::_reshape_alias", "aten::_unsafe_view", "aten::transpose",
                "aten::t", "aten::permute", "aten::expand", "aten::as_strided", "aten::unsqueeze", "aten::squeeze",
                "aten::slice", "aten::select", "aten::split", "aten::split_with_sizes", "aten::chunk", "aten::unbind",
                "aten::detach", "aten::detach_", "aten::alias", "aten::empty", "aten::empty_strided",
                "aten::empty_like", "aten::resolve_conj", "aten::resolve_neg", "aten::lift_fresh", "aten::unflatten",
                "aten::flatten", "aten::expand_as", "aten::view_as", "aten::result_type", "aten::is_nonzero",
                "aten::item", "aten::_local_scalar_dense", "detach", "aten::set_", "aten::zeros"}
WORDS = {"matmul": "matrix multiplications", "attention": "attention (SDPA)",
         "memory_bound": "memory-bound ops (norms, activations, residual adds, casts, the loss)",
         "optimizer": "the optimizer step", "communication": "communication", "data_loading": "data loading",
         "overhead": "Python / dispatch overhead and idle time",
         "idle": "GPU idle time (the GPU waits for the CPU: Python, launches, synchronization)"}

# GPU kernels by name. cuBLAS/cuBLASLt (`nvjet_sm90_*`, `sm90_xmma_gemm_*`, `ampere_sgemm_*`, gemv, splitK
# reduce), CUTLASS (`cutlass_*gemm*`), cuDNN convolutions (xmma implicit GEMM) and Inductor's matmul templates.
GEMM_KERNEL = re.compile(r"gemm|gemv|nvjet|xmma|cublas|cutlass|splitkreduce|triton_tem_fused_(?:add)?b?mm")
# FlashAttention 1-3 (`flash_fwd_kernel`, `flash::...`), PyTorch's memory-efficient kernels (`fmha_cutlassF_*`),
# cuDNN's SDPA (`cudnn_generated_fort_native_sdpa_*`).
ATTENTION_KERNEL = re.compile(r"flash|fmha|sdpa|attention")
# Kernels that make an optimizer step: PyTorch's foreach and fused optimizers run multi_tensor_apply kernels.
OPTIMIZER_KERNEL = re.compile(r"multi_tensor_apply|fused_adam|fusedadam|fused_sgd")
OPTIMIZER_SPANS = ("Optimizer.step#", "Optimizer.zero_grad#", "trainledger.optimizer")
DATA_SPANS = ("trainledger.data", "enumerate(DataLoader)")


def op_category(name: str) -> str | None:
    """The category an op's own time belongs to by its name, or None (then it inherits, or is memory-bound)."""
    if name in MATMUL_OPS:
        return "matmul"
    lowered = name.lower()
    if "scaled_dot_product" in lowered or "flash_attention" in lowered or "efficient_attention" in lowered \
            or "cudnn_attention" in lowered or "scaleddotproduct" in lowered:
        return "attention"
    if "c10d" in lowered or "nccl" in lowered or "gloo" in lowered or name.startswith("record_param_comms"):
        return "communication"
    if name in METADATA_OPS or name.startswith("autograd::") or name.endswith(("Backward0", "Backward1")) \
            or name == "torch::autograd::AccumulateGrad" or name.startswith("ProfilerStep"):
        return "overhead"
    return None


@dataclass(frozen=True)
class LaunchContext:
    """What the CPU was doing when it launched a kernel: flags from the enclosing ops (any level) and the
    innermost op's name (None: the launch is not inside any recorded op, or the trace has no CPU side)."""
    optimizer: bool = False
    data: bool = False
    attention: bool = False
    op: str | None = None


def span_flags(name: str) -> tuple[bool, bool, bool]:
    """(optimizer, data, attention): what an enclosing op named `name` says about the kernels launched in it."""
    return (name.startswith(OPTIMIZER_SPANS), name.startswith(DATA_SPANS), op_category(name) == "attention")


def kernel_category(name: str, kind: str = "kernel", context: LaunchContext = LaunchContext()) -> str:
    """The part of a GPU activity: `kind` is "kernel", "memcpy" or "memset"; `context` where it was launched.

    In this order: NCCL kernels → communication; inside an optimizer step (`Optimizer.step#...`, our
    `trainledger.optimizer` region) or a multi_tensor_apply / fused-optimizer kernel → optimizer; inside the data
    region (or a DataLoader's `enumerate`), or a host-to-device copy → data_loading; other copies and memsets →
    memory_bound; attention kernels by name, or any kernel inside an SDPA op (the math path's GEMMs and softmax
    too) → attention; GEMM kernels by name → matmul; every other kernel → memory_bound.
    """
    lowered = name.lower()
    if "nccl" in lowered:
        return "communication"
    if context.optimizer or OPTIMIZER_KERNEL.search(lowered):
        return "optimizer"
    if context.data or (kind == "memcpy" and "htod" in lowered):
        return "data_loading"
    if kind != "kernel":
        return "memory_bound"
    if context.attention or ATTENTION_KERNEL.search(lowered):
        return "attention"
    if GEMM_KERNEL.search(lowered):
        return "matmul"
    return "memory_bound"
