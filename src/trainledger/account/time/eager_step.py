"""One training step of eager PyTorch on an accelerator as two timelines: the CPU launching, the GPU running. Pure.

account.time.step builds every kernel of the step (account.time.kernels, account.time.eager, account.time.optimizer_kernels) with
its device seconds; here the launches of one step, in the order the training loop issues them, go through the
timeline algebra of account/time/timeline.py:

    for each micro-batch: embedding, L × layer forward, head and loss forward and backward,
                          L × (recomputation + layer backward), embedding backward
    then the gradient accumulation (past the first micro-batch), clipping and the optimizer's foreach calls,
    with the loop's synchronizations (synchronized_step_seconds: our training loop reads the loss and the
    gradient norm back; `profile` synchronizes once at the end).

The step costs the CPU's launches plus the GPU's tail at the sync; the part of it the GPU spends idle, waiting
for launches, is the "overhead" of the breakdown (the other parts are device time). A CPU device runs each op
in turn instead (GPUSpec.async_launch False): its overhead is launches × per-op cost, added (account.time.step).
"""

from __future__ import annotations

from trainledger.account.time import timeline
from trainledger.account.time.eager import EAGER_FRAMEWORKS
from trainledger.specs.performance import (EAGER_LAUNCH_SECONDS, EAGER_OP_CPU_SECONDS, HOST_OP_FRACTION,
                                           OPTIMIZER_TENSOR_SECONDS)

DEVICE_PARTS = ("compute", "attention", "memory_bound", "optimizer", "tp_comm", "cp_comm")


def eager_cpu_op_seconds(gpu, framework: str) -> float | None:
    """CPU seconds to launch one eager op on `gpu` (its calibration, else the reference host of
    specs/performance.py), or None where ops are not launched asynchronously by eager PyTorch: a calibrated CPU
    (each op runs in turn) and Megatron-LM's fused kernels (whose published runs are GPU-bound)."""
    if framework not in EAGER_FRAMEWORKS or not gpu.async_launch:
        return None
    return gpu.op_overhead_seconds if gpu.op_overhead_seconds > 0 else EAGER_OP_CPU_SECONDS


def compiled_launch_seconds(gpu) -> float:
    """CPU seconds to launch one kernel of compiled code (account/time/compiled.py): measured, else the reference host's."""
    return gpu.launch_seconds if gpu.launch_seconds > 0 else EAGER_LAUNCH_SECONDS


def optimizer_tensor_seconds(gpu) -> float:
    """CPU (Python) seconds of the optimizer step per parameter tensor: measured, else the recorded traces'."""
    return gpu.optimizer_tensor_seconds if gpu.optimizer_tensor_seconds > 0 else OPTIMIZER_TENSOR_SECONDS


def host_op_seconds(gpu, cpu_op: float | None) -> float:
    """CPU seconds of an op that launches nothing: measured (GPUSpec.host_op_seconds), else the fraction of a
    launching op's cost the recorded traces show (specs/performance.py HOST_OP_FRACTION)."""
    if gpu.host_op_seconds > 0:
        return gpu.host_op_seconds
    return HOST_OP_FRACTION * (cpu_op if cpu_op is not None else gpu.op_overhead_seconds)


def step_block(groups, edges: dict, per_layer_comm: dict, micro_batches: int) -> timeline.Block:
    """The forward and backward launches of one step's micro-batches as one timeline block (pipeline parallelism 1)."""
    comm = sum(per_layer_comm.values())
    comm_block = timeline.Block(0.0, comm, comm)          # a layer's exposed TP/CP collectives: device time only
    forward, backward = [], []
    for count, fwd, bwd, rec in groups:
        forward.append(fwd["block"].times(count))
        backward.append(rec["block"].then(bwd["block"]).then(comm_block).times(count))
    micro = timeline.sequence([edges["embedding_forward"]["block"], *forward, edges["head_forward"]["block"],
                               edges["head_backward"]["block"], *reversed(backward), edges["embedding_backward"]["block"]])
    return micro.times(micro_batches)


from trainledger.specs.run import LOOPS  # noqa: E402,F401 (the run's vocabulary)


def synchronized_step_seconds(groups, edges: dict, per_layer_comm: dict, micro_batches: int, accumulate: dict,
                              clip_norm: dict, update: dict, loop: str = "train") -> float:
    """Seconds of one step with its synchronizations, in the steady state of `loop`:

    "train" (trainledger's training loop): the loss's float() after the backward and the gradient norm's float()
    for logging wait for the GPU, so the step is [update of the previous step, forward, backward] → sync →
    [clip norm] → sync, the update's launches exposed after the second sync;
    "profile" (`trainledger profile`, measure/profile.py): forward, backward, clipping and the update, then one
    torch.cuda.synchronize()."""
    passes = step_block(groups, edges, per_layer_comm, micro_batches).then(accumulate["block"])
    if loop == "profile":
        return passes.then(clip_norm["block"]).then(update["block"]).synchronized_seconds()
    return update["block"].then(passes).synchronized_seconds() + clip_norm["block"].synchronized_seconds()


def exposed_cpu_seconds(step_seconds: float, breakdown: dict) -> float:
    """Seconds the device waits for the CPU in one step: the synchronized step minus the device's own time."""
    device = sum(breakdown[part] for part in DEVICE_PARTS)
    return max(0.0, step_seconds - device)
