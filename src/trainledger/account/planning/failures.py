"""Failure-aware training time: interruptions, checkpoint interval, goodput and wall-clock time. Pure, stdlib only.

The model (Young 1974; Daly 2006) is a job of `work_seconds` of useful compute that fails as a Poisson
process with mean time between interruptions M. It writes a checkpoint (δ seconds, during which it
can fail too) after every τ seconds of compute; an interruption loses the work since the last completed
checkpoint and costs a restart of R seconds (which can itself be interrupted) before it resumes.

    M   = 86400 / (failures per GPU-day × num_gpus)            every GPU's failure stops the whole job
    δ   = checkpoint bytes / (write bandwidth per node × nodes)  all nodes write their shards at once
    τ   = sqrt(2·δ·M)                                            Young 1974 (first order, δ ≪ M)
    τ   = sqrt(2δM)·[1 + ⅓·sqrt(δ/2M) + (δ/2M)/9] − δ   (δ < 2M), else M    Daly 2006
    T_w = M·e^{R/M}·(e^{(τ+δ)/M} − 1) · work/τ                  Daly 2006 (expected wall time)
    goodput = work / T_w;  expected interruptions = T_w / M

Sources: J. W. Young, "A first order approximation to the optimum checkpoint interval", CACM 17(9), 1974;
J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps", Future
Generation Computer Systems 22(3), 2006 (its Figs. 3-5: M = 24 h, 6 h, 15 min with δ = 5 min give
τ = 117, 57 and 9.1 min). Default failure rate: Llama 3 (arXiv:2407.21783, Sec. 3.3.4), 419 unexpected
interruptions in a 54-day snapshot on 16,384 H100. Not modelled: planned interruptions (47 in that
snapshot), failures that are not independent, stragglers, and asynchronous checkpointing (which hides
most of δ; pass the blocking part of the write as a higher --checkpoint-bandwidth).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from trainledger.errors import TrainledgerError

SECONDS_PER_DAY = 86400.0
# Llama 3 (arXiv:2407.21783, Sec. 3.3.4): 419 unexpected interruptions in 54 days on 16,384 GPUs.
LLAMA3_FAILURES_PER_GPU_DAY = 419 / (54 * 16384)
# Llama 3 (arXiv:2407.21783, Sec. 3.3.1): Tectonic storage, 7 TB/s peak throughput, shared by the
# 16,384-GPU job's 2,048 eight-GPU servers when they checkpoint at once: 3.4 GB/s per node.
LLAMA3_CHECKPOINT_BYTES_PER_S_PER_NODE = 7e12 / 2048
# Daly 2006, Figs. 3-5: restart time R = 10 min (reschedule, re-initialise, read the checkpoint back).
DEFAULT_RESTART_SECONDS = 600.0
# GPUs per node that share one node's write bandwidth (DGX/HGX H100 and Meta's Grand Teton: 8).
GPUS_PER_NODE = 8
# The Monte Carlo's budget of random draws: ~1 s of pure Python on one core. Runs longer than the budget
# allows are simulated for their first segments and scaled (the process is stationary).
SIMULATION_DRAWS = 2_000_000


def _positive(value, flag: str) -> float:
    if value is None or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise TrainledgerError(f"{flag} must be a positive number, got {value!r}")
    return float(value)


def mtbf_seconds(failures_per_gpu_day: float, num_gpus: int) -> float:
    """Mean time between job interruptions, seconds: 86400 / (rate per GPU-day × num_gpus).

    Any GPU's failure stops a synchronous job, so the job's rate is the sum of the GPUs' rates.
    Llama 3's default gives 54 days / 419 = 3.09 h on 16,384 GPUs.
    """
    rate = _positive(failures_per_gpu_day, "--failures-per-gpu-day")
    return SECONDS_PER_DAY / (rate * _positive(num_gpus, "--num-gpus"))


def checkpoint_seconds(checkpoint_bytes: float, bytes_per_s_per_node: float, num_gpus: int,
                       gpus_per_node: int = GPUS_PER_NODE) -> float:
    """Seconds to write one checkpoint: bytes / (per-node bandwidth × ceil(num_gpus / gpus_per_node) nodes)."""
    _positive(checkpoint_bytes, "checkpoint bytes")
    nodes = math.ceil(_positive(num_gpus, "--num-gpus") / gpus_per_node)
    return checkpoint_bytes / (_positive(bytes_per_s_per_node, "--checkpoint-bandwidth") * nodes)


def young_interval(checkpoint_s: float, mtbf_s: float) -> float:
    """Young's optimum compute time between checkpoints, seconds: sqrt(2·δ·M) (Young 1974; first order in δ/M)."""
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def daly_interval(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly's optimum compute time between checkpoints, seconds (Daly 2006, higher-order estimate).

    τ = sqrt(2δM)·[1 + ⅓·sqrt(δ/(2M)) + (1/9)·δ/(2M)] − δ for δ < 2M, else τ = M. Approaches Young's
    sqrt(2δM) as δ/M → 0 (tests compare it with the numerical minimum of expected_wall_seconds).
    """
    if checkpoint_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = checkpoint_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * checkpoint_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - checkpoint_s


def expected_wall_seconds(work_s: float, interval_s: float, checkpoint_s: float, mtbf_s: float,
                          restart_s: float) -> float:
    """Expected wall-clock seconds to finish `work_s` of compute (Daly 2006): M·e^{R/M}·(e^{(τ+δ)/M} − 1)·work/τ.

    Each segment of τ compute + δ checkpoint restarts from its beginning after an interruption, and each
    restart (R) can be interrupted too; failures are Poisson with mean M. inf when the exponent overflows.
    """
    exponent = (interval_s + checkpoint_s) / mtbf_s
    if exponent + restart_s / mtbf_s > 700:      # e^700 ~ 1e304: the job never finishes
        return math.inf
    return mtbf_s * math.exp(restart_s / mtbf_s) * math.expm1(exponent) * work_s / interval_s


def failure_plan(work_s: float, num_gpus: int, checkpoint_bytes: float,
                 failures_per_gpu_day: float = LLAMA3_FAILURES_PER_GPU_DAY,
                 bytes_per_s_per_node: float = LLAMA3_CHECKPOINT_BYTES_PER_S_PER_NODE,
                 restart_s: float = DEFAULT_RESTART_SECONDS, gpus_per_node: int = GPUS_PER_NODE) -> dict:
    """The failure-aware figures of a run of `work_s` failure-free seconds on `num_gpus` GPUs.

    Keys: mtbf_seconds, checkpoint_bytes, checkpoint_seconds, restart_seconds, young_interval_seconds,
    checkpoint_interval_seconds (Daly's), goodput (work / expected wall time, a fraction),
    expected_interruptions (T_w / M), train_seconds_with_failures (T_w), failures_per_gpu_day,
    checkpoint_bytes_per_s_per_node, nodes.
    """
    _positive(work_s, "training time")
    if isinstance(restart_s, bool) or not math.isfinite(restart_s) or restart_s < 0:
        raise TrainledgerError(f"--restart must be a non-negative duration, got {restart_s!r}")
    mtbf = mtbf_seconds(failures_per_gpu_day, num_gpus)
    delta = checkpoint_seconds(checkpoint_bytes, bytes_per_s_per_node, num_gpus, gpus_per_node)
    tau = daly_interval(delta, mtbf)
    wall = expected_wall_seconds(work_s, tau, delta, mtbf, restart_s)
    return {
        "failures_per_gpu_day": float(failures_per_gpu_day), "mtbf_seconds": mtbf,
        "checkpoint_bytes": float(checkpoint_bytes), "checkpoint_bytes_per_s_per_node": float(bytes_per_s_per_node),
        "nodes": math.ceil(num_gpus / gpus_per_node), "checkpoint_seconds": delta, "restart_seconds": float(restart_s),
        "young_interval_seconds": young_interval(delta, mtbf), "checkpoint_interval_seconds": tau,
        "goodput": work_s / wall if math.isfinite(wall) else 0.0,
        "expected_interruptions": wall / mtbf, "train_seconds_with_failures": wall,
    }


@dataclass(frozen=True)
class FailureModel:
    """The job the failure model describes (module docstring), in seconds: `work_s` of failure-free compute, a
    checkpoint of `checkpoint_s` (δ) after every `interval_s` (τ) of compute, interruptions every `mtbf_s` (M) on
    average, each followed by a restart of `restart_s` (R)."""

    work_s: float
    interval_s: float
    checkpoint_s: float
    mtbf_s: float
    restart_s: float

    @classmethod
    def of_plan(cls, work_s: float, plan: dict) -> "FailureModel":
        """The job of `failure_plan(work_s, ...)`'s answer `plan`: its Daly interval, checkpoint, MTBF and restart."""
        return cls(work_s, plan["checkpoint_interval_seconds"], plan["checkpoint_seconds"], plan["mtbf_seconds"],
                   plan["restart_seconds"])


def simulate(job: FailureModel, trials: int = 100, seed: int = 0, max_segments: int = 10_000, progress=None) -> dict:
    """Monte Carlo of the same model: `trials` runs of `job`, each a sequence of τ-compute + δ-checkpoint segments.

    Interruptions are exponential with mean `mtbf_s` (random.Random(seed)); one lands → the segment's
    elapsed time is lost, a restart of `restart_s` follows (itself interruptible), the segment starts
    over. A run of more segments than `max_segments` (or than SIMULATION_DRAWS allows: each segment
    needs about e^((τ+δ)/M)·e^(R/M) draws) simulates its first segments and scales (the process is
    stationary); when even one segment per run is beyond the budget the job cannot finish in practice
    and goodput is reported as 0 without simulating. Returns goodput (total work / total wall), its
    standard error over trials, mean interruptions and wall seconds per run (scaled to the whole run).
    `progress(done, total)` is called after each trial.
    """
    work_s, interval_s, checkpoint_s, mtbf_s, restart_s = (job.work_s, job.interval_s, job.checkpoint_s, job.mtbf_s,
                                                           job.restart_s)
    exponent = (interval_s + checkpoint_s + restart_s) / mtbf_s
    draws_per_segment = math.exp(min(exponent, 700.0)) + 1.0
    affordable = SIMULATION_DRAWS / (trials * draws_per_segment)
    if affordable < 1:
        return {"trials": 0, "goodput": 0.0, "goodput_stderr": 0.0, "expected_interruptions": math.inf,
                "train_seconds_with_failures": math.inf, "seed": seed, "segments_per_trial": 0, "scaled": False}
    rng = random.Random(seed)
    full_segments = int(work_s // interval_s)
    last = work_s - full_segments * interval_s
    limit = max(1, min(max_segments, int(affordable)))
    segments = [interval_s] * min(full_segments, limit)
    if full_segments < limit and last > 0:
        segments.append(last)
    simulated_work = sum(segments)
    scale = work_s / simulated_work
    walls, failures = [], []
    for trial in range(trials):
        wall, count = 0.0, 0
        for compute in segments:
            need = compute + checkpoint_s
            while True:
                t = rng.expovariate(1.0 / mtbf_s)
                if t >= need:
                    wall += need
                    break
                wall += t
                count += 1
                while True:                     # restart, which an interruption can hit as well
                    t = rng.expovariate(1.0 / mtbf_s)
                    if t >= restart_s:
                        wall += restart_s
                        break
                    wall += t
                    count += 1
        walls.append(wall)
        failures.append(count)
        if progress is not None:
            progress(trial + 1, trials)
    goodputs = [simulated_work / w for w in walls]
    mean_wall = sum(walls) / trials
    mean = sum(goodputs) / trials
    variance = sum((g - mean) ** 2 for g in goodputs) / max(trials - 1, 1)
    return {"trials": trials, "seed": seed, "segments_per_trial": len(segments), "scaled": scale != 1.0,
            "goodput": simulated_work / mean_wall, "goodput_stderr": math.sqrt(variance / trials),
            "expected_interruptions": scale * sum(failures) / trials,
            "train_seconds_with_failures": scale * mean_wall}
