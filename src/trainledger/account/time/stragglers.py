"""The wait for the slowest of N GPUs: each step of synchronous training ends in collectives that every rank
joins, so the step runs at the pace of its slowest GPU. Pure, no torch.

GPUs of one SKU differ in speed under the same load (manufacturing variability and power management): Sinha et
al. (SC22, arXiv:2208.11035) measured an 8 % average spread between the GPUs of a cluster (specs/at_scale.py).
Model: each GPU's slowdown against the median is uniform over [−s/2, +s/2] (s the spread); the benchmark and
datasheet rates describe the median GPU; the slowest of N independent GPUs is, in expectation,
    E[max of N] = −s/2 + s·N/(N + 1) = (s/2)·(N − 1)/(N + 1)
(the k-th order statistic of N uniforms has mean k/(N + 1)). One GPU: 0; 8 GPUs: 0.78·s/2; → s/2 as N grows.
Applied to the GPU's kernel time (compute, attention, memory-bound, and the pipeline bubble that scales with it).
Not modelled: outliers (the paper's up to 1.5× slower GPUs, which operators drain), step-to-step jitter of one GPU.
"""

from __future__ import annotations

from trainledger.specs.at_scale import GPU_SPEED_SPREAD

SLOWED_PARTS = ("compute", "attention", "memory_bound", "pipeline_bubble")


def slowest_rank_slowdown(n_gpus: int, spread: float = GPU_SPEED_SPREAD) -> float:
    """Expected fraction by which the slowest of `n_gpus` GPUs is slower than the median one: (s/2)·(N−1)/(N+1)."""
    if n_gpus <= 1:
        return 0.0
    return spread / 2 * (n_gpus - 1) / (n_gpus + 1)


def wait_for_slowest(breakdown: dict, n_gpus: int, spread: float = GPU_SPEED_SPREAD) -> float:
    """Scales the kernel parts of `breakdown` (seconds by part, changed in place) by 1 + slowest_rank_slowdown;
    returns the fraction applied."""
    fraction = slowest_rank_slowdown(n_gpus, spread)
    for part in SLOWED_PARTS:
        if part in breakdown:
            breakdown[part] *= 1.0 + fraction
    return fraction
