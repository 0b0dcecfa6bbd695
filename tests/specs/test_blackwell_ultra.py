"""Blackwell Ultra entries (specs/hardware.py gb300, b300): each figure reproduces its source, and what is borrowed
from the Blackwell (GB200/B200) measurements is the same object and said so.

Sources (docs/specs.md, "Blackwell Ultra"):
- NVIDIA GB300 NVL72 product page, per rack of 72: FP4 1,080 PFLOP/s dense; FP8/FP6 720, FP16/BF16 360, TF32 180
  PFLOP/s and INT8 24 POPS with 2:4 sparsity; HBM3e 20 TB at 576 TB/s; NVLink 130 TB/s; 72 ConnectX-8 at 800 Gb/s;
- NVIDIA HGX B300, per board of 8: FP8/FP6 72, FP16/BF16 36, TF32 18 PFLOP/s and INT8 2 POPS sparse; FP32 600,
  FP64 10 TFLOP/s; up to 2.3 TB; networking 1.6 TB/s (both directions);
- NVIDIA technical blog "Inside NVIDIA Blackwell Ultra": 288 GB HBM3e and 8 TB/s per GPU, 15 PFLOP/s dense NVFP4;
- verda.com's per-GPU table: GB300 INT8 0.165 POPS, 1.4 kW; B300 1.1 kW.
"""

import pytest

from trainledger.errors import TrainledgerError
from trainledger.specs import performance as perf
from trainledger.specs.fp8 import check_gpu_supports
from trainledger.specs.hardware import get_gpu, gpu_for_device_name

PF, TF = 1e15, 1e12


@pytest.mark.parametrize("dtype, rack_sparse_pflops", [("fp8", 720), ("bf16", 360), ("fp16", 360), ("tf32", 180)])
def test_gb300_tensor_peaks_are_the_rack_figures_per_gpu_without_sparsity(dtype, rack_sparse_pflops):
    assert get_gpu("gb300").peak(dtype) == pytest.approx(rack_sparse_pflops * PF / 72 / 2)


def test_gb300_fp4_int8_memory_and_links():
    gb300 = get_gpu("gb300")
    # FP4: 1,080 PFLOP/s dense per rack = the blog's 15 PFLOP/s dense NVFP4 per GPU
    assert gb300.peak("fp4") == pytest.approx(1080 * PF / 72) == pytest.approx(15 * PF)
    # INT8: verda's 0.165 POPS per GPU; the rack's 24 POPS sparse / 72 / 2 = 166.7 TOPS agrees within 1 %
    assert gb300.peak("int8") == pytest.approx(165 * TF)
    assert gb300.peak("int8") == pytest.approx(24 * PF / 72 / 2, rel=0.01)
    assert gb300.memory_bytes == pytest.approx(288e9)
    assert gb300.memory_bandwidth_bytes_per_s == pytest.approx(576e12 / 72) == pytest.approx(8e12)
    assert gb300.tdp_w == 1400
    # one NVLink domain of 72, NVLink 5 as the GB200's (130 TB/s / 72 = 1.8 TB/s both directions = 900 GB/s each way)
    assert gb300.gpus_per_node == 72 and gb300.intra_node_link is get_gpu("gb200").intra_node_link
    assert gb300.intra_node_link.bandwidth_bytes_per_s == pytest.approx(130e12 / 72 / 2, rel=0.02)
    # ConnectX-8: 800 Gb/s = 100 GB/s per direction, at the 400G NIC's measured 47 of 50 (assumed)
    assert gb300.inter_node_link is perf.CX8_800G
    assert perf.CX8_800G.bandwidth_bytes_per_s == pytest.approx(800e9 / 8)
    assert perf.CX8_800G.effective_bytes_per_s == pytest.approx(100e9 * 47 / 50)
    assert "fp64" not in gb300.peak_flops_per_s      # no per-GPU FP64 figure found: not carried


@pytest.mark.parametrize("dtype, board_tflops, sparse", [
    ("fp8", 72000, True), ("bf16", 36000, True), ("tf32", 18000, True), ("int8", 2000, True),
    ("fp32", 600, False), ("fp64", 10, False)])
def test_b300_peaks_are_the_hgx_board_figures_per_gpu(dtype, board_tflops, sparse):
    assert get_gpu("b300").peak(dtype) == pytest.approx(board_tflops * TF / 8 / (2 if sparse else 1))


def test_b300_memory_network_and_node():
    b300 = get_gpu("b300")
    assert b300.memory_bytes == pytest.approx(2.3e12 / 8, rel=0.002)     # "up to 2.3 TB" per 8 GPUs: 288 GB
    assert b300.memory_bandwidth_bytes_per_s == pytest.approx(8e12)
    assert b300.gpus_per_node == 8 and b300.tdp_w == 1100
    # networking 1.6 TB/s per board, both directions: 100 GB/s per GPU per direction, one ConnectX-8 each
    assert b300.inter_node_link.bandwidth_bytes_per_s == pytest.approx(1.6e12 / 8 / 2)


@pytest.mark.parametrize("ultra, blackwell", [("b300", "b200"), ("gb300", "gb200")])
def test_blackwell_ultra_keeps_the_training_rates_and_cuts_int8(ultra, blackwell):
    """FP8 and BF16 tensor rates unchanged per form factor; INT8 cut from 4,500/5,000 TOPS to 125/165; more memory."""
    u, b = get_gpu(ultra), get_gpu(blackwell)
    for dtype in ("fp8", "bf16", "tf32"):
        assert u.peak(dtype) == b.peak(dtype)
    assert u.peak("int8") < b.peak("int8") / 25
    assert u.memory_bytes > 1.5 * b.memory_bytes
    if "fp64" in u.peak_flops_per_s:
        assert u.peak("fp64") < b.peak("fp64") / 30                     # 1.25 vs 40 TFLOP/s


@pytest.mark.parametrize("ultra, blackwell", [("b300", "b200"), ("gb300", "gb200")])
def test_sustained_rates_are_borrowed_and_marked_as_assumptions(ultra, blackwell):
    """No Blackwell Ultra matmul, attention or NCCL measurement is published: the GB200/B200 tables stand in, the
    very same objects, and performance_source says so."""
    u, b = get_gpu(ultra), get_gpu(blackwell)
    assert u.gemm_table("fp8") is perf.BLACKWELL_FP8 is b.gemm_table("fp8")
    assert u.gemm_table("bf16") is perf.B200_BF16 is b.gemm_table("bf16")
    assert u.attention_table() is perf.CUDNN_B200
    assert u.intra_node_link is perf.NVLINK5
    assert "assumptions" in u.performance_source and "GB200" in u.performance_source


def test_mxfp8_runs_on_blackwell_ultra():
    for name in ("b300", "gb300"):
        check_gpu_supports("mxfp8", get_gpu(name))      # no error
    with pytest.raises(TrainledgerError, match="B300, GB300"):
        check_gpu_supports("mxfp8", get_gpu("h100"))


@pytest.mark.parametrize("device_name, entry", [
    ("NVIDIA B300 SXM6 AC", "b300"), ("NVIDIA GB300", "gb300"), ("NVIDIA B200", "b200"), ("NVIDIA GB200", "gb200")])
def test_device_names_map_to_their_entries(device_name, entry):
    assert gpu_for_device_name(device_name).name == entry


@pytest.mark.parametrize("alias, entry", [("gb300-nvl72", "gb300"), ("dgx-gb300", "gb300"), ("dgx-b300", "b300"),
                                          ("hgx-b300", "b300")])
def test_aliases(alias, entry):
    assert get_gpu(alias).name == entry
