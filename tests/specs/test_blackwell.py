"""Blackwell (B200, GB200) performance data beyond the datasheet, each checked by hand against its source
(specs/performance.py; docs/time.md, FP8 section: what each mechanism does to the published FP8 rows).

- FP8 GEMMs at the sustained cuBLASLt rates measured on GB200 (Azure/AI-benchmarking-guide ND_GB200_v6_results.md:
  random data, 10,000 warm-up iterations), not mamf-finder's best case of a short shape search;
- NVLink 5 collectives at the all_reduce bus bandwidth measured by message size on GB200 (same file, NCCL 2.25.1);
- cuDNN attention bounded by FlashAttention-4's published B200 rate (arXiv:2603.05451: up to 1613 TFLOP/s,
  >= 1.1x cuDNN 9.13 in the forward).
"""

import pytest

from trainledger.account.time.comm import collective_seconds
from trainledger.account.time.roofline import attention_efficiency, gemm_efficiency
from trainledger.specs import performance as perf
from trainledger.specs.hardware import get_gpu

GIB = 2 ** 30


@pytest.mark.parametrize("gpu, peak_tflops", [("gb200", 5000), ("b200", 4500)])
def test_fp8_gemm_runs_at_the_sustained_cublaslt_rate(gpu, peak_tflops):
    # 8192³ fp8 on GB200: 2876.6 TFLOP/s of 5,000 (Azure ND GB200 v6); the B200 takes the same fraction of its 4,500
    fraction = gemm_efficiency(get_gpu(gpu), 8192, 8192, 8192, "fp8")["efficiency"]
    assert fraction == pytest.approx(2876.6 / 5000)
    assert fraction * peak_tflops == pytest.approx(2876.6 * peak_tflops / 5000)


def test_sustained_fp8_is_below_the_best_case_of_a_shape_search():
    """The best sustained point (16384³, 2906.9 of 5,000 = 0.581) is 24 % below mamf-finder's B200 best case
    (3432.5 of 4,500 = 0.763) that the FP8 GEMMs used before: the missing mechanism of the Blackwell rows."""
    best_sustained = max(p[3] for p in perf.BLACKWELL_FP8.points)
    assert best_sustained == pytest.approx(2906.9 / 5000)
    assert best_sustained / perf.B200_FP8.points[0][3] == pytest.approx(0.581 / 0.763, rel=1e-3)


def test_fp8_gemm_of_an_8b_layer_lies_within_the_measured_fractions():
    """Llama 3 8B's MLP up-projection at 2 × 8192 tokens (16384 × 14336 × 4096) is between measured shapes: its
    interpolated fraction is within the range of the table's points (inverse-distance weights in log-shape)."""
    fractions = [p[3] for p in perf.BLACKWELL_FP8.points]
    f = gemm_efficiency(get_gpu("b200"), 16384, 14336, 4096, "fp8")["efficiency"]
    assert min(fractions) < f < max(fractions)
    assert f < 2906.9 / 5000


@pytest.mark.parametrize("size, busbw_gbps", [(8 * GIB, 679.61), (GIB, 646.87), (2 ** 26, 550.73)])
def test_nvlink5_all_reduce_at_the_measured_bus_bandwidth(size, busbw_gbps):
    # ring all-reduce over 8 ranks sends 2·7/8·S; at a measured size it takes that / busbw(S) (nccl-tests convention)
    link = get_gpu("gb200").intra_node_link
    assert collective_seconds("all_reduce", size, 8, link) == pytest.approx(2 * 7 / 8 * size / (busbw_gbps * 1e9))
    assert get_gpu("b200").intra_node_link is link


def test_nvlink5_between_measured_sizes_and_its_ceiling():
    link = get_gpu("b200").intra_node_link
    # 3 GiB: halfway in log2 between 2 GiB (666.63) and 4 GiB (673.06)? log2(3) − 1 = 0.585 of the way
    t = collective_seconds("reduce_scatter", 3 * GIB, 8, link)
    rate = 666.63 + (673.06 - 666.63) * 0.5849625
    assert t == pytest.approx(7 / 8 * 3 * GIB / (rate * 1e9), rel=1e-6)
    assert link.effective_bytes_per_s == pytest.approx(679.61e9)     # 0.755 of the 900 GB/s datasheet


def test_cudnn_attention_on_b200_is_bounded_by_flashattention4():
    # FA4: up to 1613 TFLOP/s, >= 1.1x cuDNN 9.13 forward -> cuDNN <= 1466.4 TFLOP/s = 0.652 of 2,250
    b200 = get_gpu("b200")
    forward = attention_efficiency(b200, 8192, backward=False, causal=False, kernel="cudnn")
    assert forward * 2250 == pytest.approx(1613 / 1.1)
    assert forward < 1613 / 2250 < gemm_efficiency(b200, 8192, 8192, 128, "bf16")["efficiency"]
    # backward / forward and causal / full: the H100 cuDNN's measured ratios (FA3 paper: 516/595 at 16k; 529/600 at 8k)
    backward = attention_efficiency(b200, 16384, backward=True, causal=False, kernel="cudnn")
    assert backward == pytest.approx(forward * 516 / 595)
    causal = attention_efficiency(b200, 8192, backward=False, causal=True, kernel="cudnn")
    assert causal == pytest.approx(forward * 529 / 600)


def test_gb200_attention_takes_the_same_fraction_of_its_higher_peak():
    b200, gb200 = get_gpu("b200"), get_gpu("gb200")
    assert gb200.attention_table() is b200.attention_table()
    assert attention_efficiency(gb200, 8192, False, True) == attention_efficiency(b200, 8192, False, True)
