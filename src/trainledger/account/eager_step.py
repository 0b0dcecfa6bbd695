"""One training step of eager PyTorch on an accelerator as two timelines: the CPU launching, the GPU running. Pure.

account.time builds every kernel of the step (account.kernels, account.eager, account.optimizer_kernels) with
its device seconds; here the launches of one step, in the order the training loop issues them, go through the
timeline algebra of account/timeline.py:

    for each micro-batch: embedding, L × layer forward, head and loss forward and backward,
                          L × (recomputation + layer backward), embedding backward
    then the gradient accumulation (past the first micro-batch), clipping and the optimizer's foreach calls,
    then a synchronization (the loop's loss `.item()`, or the profiler's torch.cuda.synchronize()).

The step costs the CPU's launches plus the GPU's tail at the sync; the part of it the GPU spends idle, waiting
for launches, is the "overhead" of the breakdown (the other parts are device time). A CPU device runs each op
in turn instead (GPUSpec.async_launch False): its overhead is launches × per-op cost, added (account.time).
"""

from __future__ import annotations

from trainledger.account import timeline
from trainledger.specs.performance import EAGER_OP_CPU_SECONDS, HOST_OP_FRACTION

DEVICE_PARTS = ("compute", "attention", "memory_bound", "optimizer", "tp_comm", "cp_comm")


def eager_cpu_op_seconds(gpu, framework: str) -> float | None:
    """CPU seconds to launch one eager op on `gpu` (its calibration, else the reference host of
    specs/performance.py), or None where ops are not launched asynchronously by eager PyTorch: a calibrated CPU
    (each op runs in turn) and Megatron-LM's fused kernels (whose published runs are GPU-bound)."""
    if framework != "trainledger" or not gpu.async_launch:
        return None
    return gpu.op_overhead_seconds if gpu.op_overhead_seconds > 0 else EAGER_OP_CPU_SECONDS


def host_op_seconds(gpu, cpu_op: float | None) -> float:
    """CPU seconds of an op that launches nothing: measured (GPUSpec.host_op_seconds), else the fraction of a
    launching op's cost the recorded traces show (specs/performance.py HOST_OP_FRACTION)."""
    if gpu.host_op_seconds > 0:
        return gpu.host_op_seconds
    return HOST_OP_FRACTION * (cpu_op if cpu_op is not None else gpu.op_overhead_seconds)


def step_block(groups, edges: dict, per_layer_comm: dict, micro_batches: int, accumulate: dict,
               optim: dict) -> timeline.Block:
    """The whole step's launches as one timeline block (pipeline parallelism 1)."""
    comm = sum(per_layer_comm.values())
    comm_block = timeline.Block(0.0, comm, comm)          # a layer's exposed TP/CP collectives: device time only
    forward, backward = [], []
    for count, fwd, bwd, rec in groups:
        forward.append(fwd["block"].times(count))
        backward.append(rec["block"].then(bwd["block"]).then(comm_block).times(count))
    micro = timeline.sequence([edges["embedding_forward"]["block"], *forward, edges["head_forward"]["block"],
                               edges["head_backward"]["block"], *reversed(backward), edges["embedding_backward"]["block"]])
    return micro.times(micro_batches).then(accumulate["block"]).then(optim["block"])


def exposed_cpu_seconds(groups, edges: dict, per_layer_comm: dict, micro_batches: int, accumulate: dict,
                        optim: dict, breakdown: dict) -> float:
    """Seconds the device waits for the CPU in one step: the synchronized step minus the device's own time."""
    block = step_block(groups, edges, per_layer_comm, micro_batches, accumulate, optim)
    device = sum(breakdown[part] for part in DEVICE_PARTS)
    return max(0.0, block.synchronized_seconds() - device)
