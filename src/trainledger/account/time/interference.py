"""How much slower compute runs while a collective overlaps it on the same GPU. Pure, no torch.

Overlap is not free: NCCL's kernels hold SMs (one CTA per channel) and share memory bandwidth and power with the
GEMMs they run beside. Where the link's channel count is published (specs/performance.py `Link.sm_channels`) the
compute runs on the SMs left: SMs / (SMs − channels) slower. Where it is not, the measured average slowdown of
compute overlapped with collectives is used (specs/at_scale.py: 18.9 %, arXiv:2507.03114), never zero.
"""

from __future__ import annotations

from trainledger.specs.at_scale import OVERLAP_COMPUTE_SLOWDOWN, OVERLAP_COMPUTE_SLOWDOWN_SOURCE


def overlap_slowdown(gpu, link) -> float:
    """Factor (≥ 1) by which compute that overlaps a collective on `link` is slowed while the collective runs:
    gpu.sm_count / (gpu.sm_count − link.sm_channels) with a published channel count, else 1 + 0.189 (measured)."""
    channels = getattr(link, "sm_channels", 0) if link is not None else 0
    sms = getattr(gpu, "sm_count", 0)
    if channels and sms and sms > channels:
        return sms / (sms - channels)
    return 1.0 + OVERLAP_COMPUTE_SLOWDOWN


def overlap_source(gpu, link) -> str:
    """Where overlap_slowdown's figure for `link` comes from, in words."""
    channels = getattr(link, "sm_channels", 0) if link is not None else 0
    if channels and getattr(gpu, "sm_count", 0) > channels:
        return f"{channels} of {gpu.sm_count} SMs held by NCCL ({link.name})"
    return OVERLAP_COMPUTE_SLOWDOWN_SOURCE
