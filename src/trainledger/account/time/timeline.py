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

A stretch with synchronizations inside it (`Synced`: our eager MoE asks the GPU which tokens each expert got,
torch.where → nonzero, which copies the count to the host before the expert runs) is three parts: the ops before
its first synchronization (`head`, which start from whatever lag came before), the fixed seconds from that
synchronization's return to the last one's (`mid_seconds`: every interval between two of them starts with an empty
queue, so costs `Block.synchronized_seconds(0)` plus the copy's latency), and the ops after the last (`tail`, which
hand a lag on). Such stretches compose with blocks and with each other into the same three parts.
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

    def then(self, other):
        """This block followed by `other` (a Block, or a Synced stretch)."""
        if isinstance(other, Synced):
            return Synced(self.then(other.head), other.mid_seconds, other.tail)
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


@dataclass(frozen=True)
class Synced:
    """A stretch with host synchronizations inside (module docstring): `head` before the first, `mid_seconds` from
    the first one's return to the last one's, `tail` after the last."""

    head: Block
    mid_seconds: float
    tail: Block

    def then(self, other) -> "Synced":
        """This stretch followed by `other` (a Block or a Synced stretch)."""
        if isinstance(other, Synced):
            between = self.tail.then(other.head).synchronized_seconds()
            return Synced(self.head, self.mid_seconds + between + other.mid_seconds, other.tail)
        return Synced(self.head, self.mid_seconds, self.tail.then(other))

    def times(self, n: float):
        """This stretch repeated n times (n ≥ 0; a fractional n scales the repeated part, as Block.times)."""
        if n <= 0:
            return Block()
        between = self.tail.then(self.head).synchronized_seconds()
        return Synced(self.head, n * self.mid_seconds + max(0.0, n - 1) * between, self.tail)

    def lag_after(self, lag: float = 0.0) -> float:
        """The lag after this stretch: its tail's from an empty queue, whatever came before."""
        return self.tail.lag_after(0.0)

    def synchronized_seconds(self, lag: float = 0.0) -> float:
        """Seconds from the stretch's start until a synchronization after it returns."""
        return self.head.synchronized_seconds(lag) + self.mid_seconds + self.tail.synchronized_seconds()


def synced_loop(iteration: Block, n: int, latency_seconds: float) -> Synced | Block:
    """A Python loop of n iterations, each beginning with a host synchronization (`latency_seconds`: the copy to
    the host and the CPU's wake-up after the queue empties) and then launching `iteration`."""
    if n <= 0:
        return Block()
    one = iteration.synchronized_seconds() + latency_seconds
    return Synced(Block(), latency_seconds + (n - 1) * one, iteration)


class LoopEnd:
    """Where the last op of a synchronizing loop's iteration goes (`append`): into the iteration (`loop`, a list of
    blocks), then the whole loop of n iterations (synced_loop) into `blocks`, and the iteration's list is emptied."""

    def __init__(self, loop: list, blocks: list, n: int, latency_seconds: float):
        self.loop, self.blocks, self.n, self.latency = loop, blocks, n, latency_seconds

    def append(self, block) -> None:
        self.loop.append(block)
        self.blocks.append(synced_loop(sequence(self.loop), self.n, self.latency))
        self.loop.clear()


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
