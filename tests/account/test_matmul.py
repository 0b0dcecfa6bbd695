"""Matmul FLOPs (2·m·k·n), bytes moved and roofline time; FLOPs checked against torch's FlopCounterMode."""

import pytest
import torch

from trainledger.account.counting.matmul import (arithmetic_intensity, ideal_time_s, matmul_bytes, matmul_flops,
                                        matmul_on_gpu, matmul_table)
from trainledger.errors import TrainledgerError
from trainledger.specs import GPUS, get_gpu


@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (3, 5, 7), (64, 128, 32)])
def test_flops_equal_flop_counter(m, k, n):
    """Independent measurement: torch.utils.flop_counter counts a mm as 2·m·k·n."""
    from torch.utils.flop_counter import FlopCounterMode

    a, b = torch.empty(m, k, device="meta"), torch.empty(k, n, device="meta")
    with FlopCounterMode(display=False) as counter:
        a @ b
    assert matmul_flops(m, k, n) == counter.get_total_flops()


def test_lecture_two_layer_linear_flops():
    """CS336 Lecture 2: B=1024, D=256, K=64, x@w1 (D×D) then @w2 (D×K): forward 167,772,160 FLOPs,
    backward 2× forward = 335,544,320."""
    forward = matmul_flops(1024, 256, 256) + matmul_flops(1024, 256, 64)
    assert forward == 167_772_160
    assert 2 * forward == 335_544_320


def test_lecture_matmul_on_h100():
    """CS336 Lecture 2: x[16384, 32768] @ w[32768, 8192] is 2·B·D·K = 8.796e12 FLOPs; at H100's 989.5 TFLOP/s
    bf16 it is compute-bound and ideally takes 8.89 ms."""
    r = matmul_on_gpu(16384, 32768, 8192, "h100", "bf16")
    assert r["flops"] == 2 * 16384 * 32768 * 8192
    assert r["bound"] == "compute"
    assert r["ideal_time_s"] == pytest.approx(r["flops"] / 989.5e12)


@pytest.mark.parametrize("dtype, torch_dtype", [("fp32", torch.float32), ("bf16", torch.bfloat16),
                                                ("fp16", torch.float16), ("fp8", torch.float8_e4m3fn)])
def test_bytes_equal_tensor_sizes(dtype, torch_dtype):
    m, k, n = 12, 34, 56
    tensors = [torch.empty(m, k, dtype=torch_dtype), torch.empty(k, n, dtype=torch_dtype),
               torch.empty(m, n, dtype=torch_dtype)]
    assert matmul_bytes(m, k, n, dtype) == sum(t.numel() * t.element_size() for t in tensors)


def test_roofline_memory_bound_vector_matrix():
    """Williams et al. 2009: below the machine balance (H100 bf16: 989.5e12 / 3.35e12 ≈ 295 FLOP/B) a kernel is
    memory-bound; a vector-matrix product has intensity ≈ 1 FLOP/B in bf16."""
    r = matmul_on_gpu(1, 8192, 8192, "h100", "bf16")
    assert r["machine_balance_flops_per_byte"] == pytest.approx(989.5e12 / 3.35e12)
    assert r["arithmetic_intensity_flops_per_byte"] == pytest.approx(arithmetic_intensity(1, 8192, 8192, "bf16"))
    assert r["arithmetic_intensity_flops_per_byte"] == pytest.approx(1.0, rel=1e-3)
    assert r["bound"] == "memory"
    assert r["ideal_time_s"] == pytest.approx(matmul_bytes(1, 8192, 8192, "bf16") / 3.35e12)
    assert r["achievable_flops_per_s"] < 989.5e12 / 100


def test_ideal_time_is_the_max_of_both_bounds_everywhere():
    for r in matmul_table(4096, 4096, 4096):
        assert r["ideal_time_s"] == max(r["compute_time_s"], r["memory_time_s"])
        assert r["ideal_time_s"] == pytest.approx(ideal_time_s(4096, 4096, 4096, r["gpu"], r["dtype"]))


def test_table_covers_every_gpu_and_dtype_it_has():
    records = matmul_table(256, 256, 256)
    assert {r["gpu"] for r in records} == {g.name for g in GPUS}
    h100 = {r["dtype"] for r in records if r["gpu"] == "h100-sxm"}
    assert h100 == {"fp64", "fp32", "tf32", "bf16", "fp16", "fp8-e4m3", "int8"}
    only_fp8 = matmul_table(256, 256, 256, dtypes=["fp8"])
    assert "a100-80gb" not in {r["gpu"] for r in only_fp8} and "h100-sxm" in {r["gpu"] for r in only_fp8}


def test_errors():
    with pytest.raises(TrainledgerError, match="has no fp8 peak"):
        matmul_on_gpu(8, 8, 8, get_gpu("a100"), "fp8")
    with pytest.raises(TrainledgerError, match="unknown dtype"):
        matmul_bytes(8, 8, 8, "fp7")
