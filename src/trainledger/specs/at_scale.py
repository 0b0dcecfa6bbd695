"""Published measurements of what a step at scale loses beside its kernels: data, each with its source. Pure.

Used by account/time/interference.py (compute slowed by a collective it overlaps) and account/time/stragglers.py
(every step waits for the slowest of N GPUs). Nothing here is fitted to a validation row.
"""

from __future__ import annotations

# Lee et al. 2025, "Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning:
# Performance and Power Implications" (arXiv:2507.03114), abstract: "overlapping computation and communication can
# result in an average computational slowdown of 18.9%, with a maximum of 40.0% slowdown" against the same compute
# with no communication beside it; GPT and LLaMA models on 4 x A100, H100, MI250, MI210.
OVERLAP_COMPUTE_SLOWDOWN = 0.189
OVERLAP_COMPUTE_SLOWDOWN_SOURCE = ("arXiv:2507.03114 (Lee et al. 2025): compute overlapped with collectives runs 18.9% "
                                   "slower on average (max 40.0%), GPT/LLaMA on 4 x A100/H100/MI250/MI210")

# Sinha et al., "Not All GPUs Are Created Equal: Characterizing Variability in Large-Scale, Accelerator-Rich
# Systems" (SC22, arXiv:2208.11035), abstract: "8% (max 22%) average performance variation even though the GPU
# architecture and vendor SKU are identical within each cluster, with outliers up to 1.5X slower than the median
# GPU" (over 18,800 hours on Summit, Vortex, Frontera, Longhorn (V100) and Corona (MI60)). No such survey of A100
# or H100 fleets is published that we found: the same spread is assumed for every GPU.
GPU_SPEED_SPREAD = 0.08
GPU_SPEED_SPREAD_SOURCE = ("arXiv:2208.11035 (Sinha et al., SC22): 8% average performance variation between GPUs of "
                           "one SKU in a cluster (V100, MI60 fleets; assumed for every GPU)")
