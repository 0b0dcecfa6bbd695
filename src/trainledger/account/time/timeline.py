"""Two timelines of eager PyTorch on a GPU: the CPU launching ops ahead of the GPU running their kernels. Pure.

On CUDA, torch ops return as soon as their kernel is queued (CUDA's asynchronous launch: NVIDIA, CUDA C
Programming Guide, "Asynchronous Concurrent Execution"); the GPU runs the queue in order. A kernel starts when
it has been launched AND the kernel before it has finished. A step therefore costs the longer of the two
timelines between synchronizations (the loss `.item()`, a `torch.cuda.synchronize()`), and more than the
longer when they take turns being the slower one within it (a CPU-bound forward of small ops before a GPU-bound
backward), never their sum.

The state is the lag x = (time the GPU will be done) − (time the CPU is at). A block of ops with CPU costs
c_1..c_n (launch of kernel i when the CPU has spent c_1 + … + c_i) and GPU durations d_1..d_n moves it to

    x' = max(x + D − C, K − C),    C = Σ c_i,  D = Σ d_i,  K = max_i (c_1 + … + c_i + d_i + … + d_n)

(unrolling "start_i = max(launch_i, end_{i−1})"). Functions of the form x ↦ max(x + a, b) compose into the same
form, so a block repeated L times (the layers of a model) is one closed form:
    f^L(x) = max(x + L·a, b + max(0, (L − 1)·a)).
A synchronization waits for the GPU: the step costs the CPU's time plus max(0, x) at the sync.
Not modelled: the CUDA launch queue's depth limit (the CPU blocks when ~1000 launches are pending: it cannot run
further ahead of a GPU-bound stretch, which does not change a GPU-bound step's time), launch latency (a
constant per sync), other streams.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Block:
    """A stretch of ops as the two timelines see it: cpu_seconds (C), gpu_seconds (D) and the transfer function
    x ↦ max(x + gpu − cpu, peak − cpu) of the lag, with peak = K above (seconds after the block's start at which
    the GPU finishes when it starts idle)."""

    cpu_seconds: float = 0.0
    gpu_seconds: float = 0.0
    peak_seconds: float = 0.0

    def then(self, other: "Block") -> "Block":
        """This block followed by `other`."""
        a1, b1 = self.gpu_seconds - self.cpu_seconds, self.peak_seconds - self.cpu_seconds
        a2, b2 = other.gpu_seconds - other.cpu_seconds, other.peak_seconds - other.cpu_seconds
        cpu = self.cpu_seconds + other.cpu_seconds
        b = max(b1 + a2, b2)                     # max(max(x + a1, b1) + a2, b2) = max(x + a1 + a2, b1 + a2, b2)
        return Block(cpu, self.gpu_seconds + other.gpu_seconds, b + cpu)

    def times(self, n: float) -> "Block":
        """This block repeated n times (n ≥ 0; a fractional n scales the repeated part)."""
        if n <= 0:
            return Block()
        a, b = self.gpu_seconds - self.cpu_seconds, self.peak_seconds - self.cpu_seconds
        cpu = n * self.cpu_seconds
        return Block(cpu, n * self.gpu_seconds, b + max(0.0, (n - 1) * a) + cpu)

    def lag_after(self, lag: float = 0.0) -> float:
        """The lag after this block, from `lag` before it."""
        return max(lag + self.gpu_seconds - self.cpu_seconds, self.peak_seconds - self.cpu_seconds)

    def synchronized_seconds(self, lag: float = 0.0) -> float:
        """Seconds from the block's start until a synchronization after it returns (CPU time + the GPU's tail)."""
        return self.cpu_seconds + max(0.0, self.lag_after(lag))


def op(cpu_seconds: float, gpu_seconds: float, count: float = 1) -> Block:
    """`count` identical ops, each costing `cpu_seconds` to launch and `gpu_seconds` to run.

    K of the group: its first kernel launched after one CPU cost, then the GPU-bound case (all kernels back to
    back) or the CPU-bound one (the last kernel launched after all CPU costs): max(c + n·d, n·c + d)."""
    if count <= 0:
        return Block()
    peak = max(cpu_seconds + count * gpu_seconds, count * cpu_seconds + gpu_seconds)
    return Block(count * cpu_seconds, count * gpu_seconds, peak)


def sequence(blocks) -> Block:
    """The blocks one after the other."""
    out = Block()
    for block in blocks:
        out = out.then(block)
    return out
