"""The assumptions behind a `step_time` answer, one line each (printed under the title of `step`). Pure."""

from __future__ import annotations

from dataclasses import replace

from trainledger.account.time.eager import EAGER_FRAMEWORKS
from trainledger.account.time.overlap import collective_seconds
from trainledger.specs.recipes import get_recipe
from trainledger.units import format_bytes


def assumptions(gpu, result: dict, records, narrow: int | None = None) -> list[str]:
    """The modelling assumptions behind a step_time answer, one line each (printed under the title); `narrow`:
    the SMs a running TP collective leaves to the GEMMs (None: all)."""
    from trainledger.account.time.roofline import gemm_efficiency
    words = {"trainledger": "our torch Transformer in eager PyTorch",
             "torchtitan": "torchtitan's Llama in eager PyTorch (complex RoPE; torch.compile per block)",
             "megatron": "Megatron-LM's GPT (fused kernels, dropout)"}
    lines = [f"framework {result['framework']}: the kernels of " + words[result["framework"]],
             f"GEMMs: {gemm_efficiency(gpu, 4096, 4096, 4096, result['precision'] and get_recipe(result['precision']).compute_dtype)['source']}"
             + (f"; wave quantization on {gpu.sm_count} SMs" if gpu.sm_count else ""),
             f"memory-bound ops at {gpu.memory_bandwidth_fraction:.0%} of {gpu.memory_bandwidth_bytes_per_s / 1e9:g} GB/s"
             + (" (datasheet: no published achieved fraction; optimistic)" if gpu.memory_bandwidth_fraction == 1
                else " (measured STREAM bandwidth)")
             if not gpu.memory_bandwidth_curve else "memory-bound ops at the bandwidth measured for their size "
             f"({', '.join(f'{r / 1e9:.3g}' for _, r in gpu.memory_bandwidth_curve)} GB/s from "
             f"{format_bytes(gpu.memory_bandwidth_curve[0][0])} to {format_bytes(gpu.memory_bandwidth_curve[-1][0])} per op)"]
    if result["flash"]:
        table = gpu.attention_table(result.get("attention_kernel"))
        lines.append(f"attention: {table.kernel} at measured rates ({table.source})" if table else
                     "attention: no measured flash kernel for this device: the GEMM efficiency of its matmuls")
    if result.get("mla"):
        lines.append("multi-head latent attention as Megatron-Core's MLASelfAttention runs it: q and kv down-projections, "
                     "their RMSNorms, the up-projections, RoPE on the rope dims, output projection (account/time/mla.py); "
                     "the core's qk and v head sizes differ: timed at the measured rate of head size 128 (none "
                     "published for 192/128: an assumption)")
    if result.get("mtp_modules"):
        lines.append(f"{result['mtp_modules']} multi-token-prediction module(s) trained on the last pipeline stage "
                     "(a layer like the last, a 2d -> d projection, the shared head and loss again: DeepSeek-V3, "
                     "arXiv:2412.19437 Sec. 2.2, as Megatron-Core runs it), counted in the model FLOPs; --no-mtp: without")
    lines += _execution(gpu, result)
    if narrow:
        lines.append(f"a running TP collective holds {gpu.sm_count - narrow} of {gpu.sm_count} SMs (NCCL channels): "
                     "the GEMMs it overlaps run on the rest")
    seen = set()
    for c, _ in records:
        if c.name in seen:
            continue
        seen.add(c.name)
        link = gpu.intra_node_link if c.link == "intra" else gpu.inter_node_link
        seconds = collective_seconds(gpu, replace(c, count=1))
        rate = c.bytes_per_call / seconds if seconds > 0 else link.effective_bytes_per_s
        where = link.name if c.link == "intra" or c.ranks_per_node <= 1 else \
            f"{c.ranks_per_node} × {link.name} ({c.ranks_per_node} GPUs of each node in the group)"
        lines.append(f"{c.name}: {c.kind} of {format_bytes(c.payload_bytes)} over {c.group_size} on {where} "
                     f"({rate / 1e9:.3g} GB/s achieved at this size), overlap {c.overlap}")
    return lines


def _execution(gpu, result: dict) -> list[str]:
    """How the ops reach the device: eager PyTorch's two timelines, torch.compile, or a CPU running ops in turn."""
    from trainledger.account.time.eager_step import host_op_seconds, optimizer_tensor_seconds
    from trainledger.specs.performance import EAGER_OP_CPU_SOURCE
    lines = []
    op = result.get("cpu_op_seconds")
    if op is not None:
        syncs = ("the loss and gradient norm read back (trainledger's training loop)" if result["loop"] == "train"
                 else "one synchronize at the end (`profile`)")
        measured = [name for name, value in (("launching op", gpu.op_overhead_seconds), ("view", gpu.host_op_seconds),
                                             ("optimizer Python", gpu.optimizer_tensor_seconds)) if value > 0]
        source = (f"calibrated: {', '.join(measured)}; the rest from the recorded H100 traces" if measured
                  else EAGER_OP_CPU_SOURCE)
        lines.append(f"eager PyTorch: the CPU launches ops ahead of the GPU; the step is the longer of the two "
                     f"timelines between syncs ({syncs}), not their sum. CPU: {op * 1e6:.1f} µs per launching op, "
                     f"{host_op_seconds(gpu, op) * 1e6:.1f} µs per view, {optimizer_tensor_seconds(gpu) * 1e6:.1f} µs of "
                     f"optimizer Python per tensor ({source}); GPU: {gpu.kernel_overhead_seconds * 1e6:.1f} µs per kernel "
                     "(launch, ramp, tail)" + ("" if gpu.kernel_overhead_seconds else " (not measured for this GPU)"))
    elif result["framework"] in EAGER_FRAMEWORKS:
        lines.append(f"ops run one after another on this device: {gpu.op_overhead_seconds * 1e6:.1f} µs of dispatch each")
    if result.get("compiled"):
        launch = result.get("launch_seconds")
        lines.append("torch.compile (Inductor, default mode: no CUDA graphs): pointwise chains between GEMMs/attention "
                     "fused into one kernel each, 16-bit GEMM dims padded to multiples of 8, the optimizer eager"
                     + (f"; {launch * 1e6:.1f} µs per launch from the compiled wrapper" if launch else ""))
    if result.get("unaligned_vocabulary"):
        rate = (f" at {gpu.unaligned_gemm_fraction:.0%} of peak (measured on H100)" if gpu.unaligned_gemm_fraction
                else " (slowdown not measured for this GPU: not modelled)")
        lines.append("the vocabulary is not a multiple of 8: the LM head's GEMMs run cuBLAS's unaligned fallback"
                     + rate + "; pad it (nanoGPT uses 50304) or --compile")
    return lines
