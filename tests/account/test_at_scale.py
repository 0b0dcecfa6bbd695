"""The mechanisms of a step at scale, each checked by hand against its published figure (specs/at_scale.py)."""


import pytest

from trainledger.account.time.interference import overlap_slowdown
from trainledger.account.time.stragglers import slowest_rank_slowdown, wait_for_slowest
from runs import step as step_time
from trainledger.specs import get_model
from trainledger.specs.at_scale import GPU_SPEED_SPREAD, OVERLAP_COMPUTE_SLOWDOWN
from trainledger.specs.hardware import get_gpu


def test_published_figures():
    """arXiv:2507.03114: 18.9 % average compute slowdown under overlap; arXiv:2208.11035: 8 % spread between GPUs."""
    assert OVERLAP_COMPUTE_SLOWDOWN == 0.189
    assert GPU_SPEED_SPREAD == 0.08


@pytest.mark.parametrize("n, expected", [
    (1, 0.0),                       # one GPU waits for nobody
    (2, 0.04 * 1 / 3),              # (s/2)(N−1)/(N+1) with s = 0.08
    (8, 0.04 * 7 / 9),              # one node: 3.1 %
    (64, 0.04 * 63 / 65),           # torchtitan's A100 runs: 3.9 %
    (16384, 0.04 * 16383 / 16385),  # Llama 3 405B: → s/2 = 4 %
])
def test_slowest_rank_by_hand(n, expected):
    assert slowest_rank_slowdown(n) == pytest.approx(expected)


def test_slowest_rank_is_the_mean_of_the_largest_of_n_uniforms():
    """An independent check of the order statistic: the mean of the largest of N draws, by exhaustive quadrature
    over a fine grid of the uniform distribution on [−s/2, s/2] (P(max ≤ x) = F(x)^N)."""
    s, n, steps = 0.08, 8, 20000
    xs = [-s / 2 + s * (i + 0.5) / steps for i in range(steps)]
    # E[max] = ∫ x d(F^N) ≈ Σ x_i · (F(x_i + h/2)^N − F(x_i − h/2)^N)
    mean = sum(x * (((i + 1) / steps) ** n - (i / steps) ** n) for i, x in enumerate(xs))
    assert slowest_rank_slowdown(n, s) == pytest.approx(mean, rel=1e-4)


def test_wait_for_slowest_scales_only_kernel_parts():
    breakdown = {"compute": 1.0, "attention": 0.5, "memory_bound": 0.2, "dp_comm": 0.3, "optimizer": 0.1,
                 "pipeline_bubble": 0.4}
    fraction = wait_for_slowest(breakdown, 64)
    assert fraction == pytest.approx(0.04 * 63 / 65)
    assert breakdown["compute"] == pytest.approx(1.0 * (1 + fraction))
    assert breakdown["pipeline_bubble"] == pytest.approx(0.4 * (1 + fraction))
    assert breakdown["dp_comm"] == 0.3 and breakdown["optimizer"] == 0.1


def test_overlap_slowdown_from_channels_or_the_measured_average():
    """A100 over HDR: NCCL holds 16 of 108 SMs (NVIDIA/nccl#689): 108/92; NDR (no published channel count): 1.189."""
    a100, h100 = get_gpu("a100-80gb"), get_gpu("h100-sxm")
    assert overlap_slowdown(a100, a100.inter_node_link) == pytest.approx(108 / 92)
    assert h100.inter_node_link.sm_channels == 0
    assert overlap_slowdown(h100, h100.inter_node_link) == pytest.approx(1.189)
    assert overlap_slowdown(a100, None) == pytest.approx(1.189)


def test_step_grows_with_gpu_count_only_by_the_wait():
    """The same per-GPU work (batch 1 per GPU, DDP) on 1 and on 64 GPUs: the kernel parts differ by exactly the
    wait for the slowest of 64."""
    spec, gpu = get_model("gpt2"), get_gpu("a100-80gb")
    one = step_time(spec, gpu, batch_size=1, seq_len=1024, num_gpus=1, with_memory=False)
    many = step_time(spec, gpu, batch_size=1, seq_len=1024, num_gpus=64, with_memory=False)
    assert one["straggler_slowdown"] == 0.0
    assert many["straggler_slowdown"] == pytest.approx(0.04 * 63 / 65)
    assert many["breakdown"]["compute"] == pytest.approx(one["breakdown"]["compute"] * (1 + 0.04 * 63 / 65))
