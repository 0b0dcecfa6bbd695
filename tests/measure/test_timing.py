"""measure.timing: medians after warm-up, derived CPU peaks, matmul benchmark, MFU."""

import pytest
import torch

from trainledger.errors import TrainledgerError
from trainledger.measure import timing


def test_time_fn_warms_up_then_takes_the_median():
    calls = []
    result = timing.time_fn(lambda: calls.append(1), warmup=3, repeats=5)
    assert len(calls) == 8
    assert len(result.times_s) == 5
    assert result.median_s == sorted(result.times_s)[2]


@pytest.mark.parametrize("flags,dtype,expected", [
    ({"avx512f", "avx2", "fma"}, "fp32", 64),      # 2 FMA units × 16 fp32 lanes × 2
    ({"avx2", "fma"}, "fp32", 32),                 # 2 × 8 × 2
    ({"avx"}, "fp32", 16),
    (set(), "fp32", 8),
    ({"avx512f", "amx_bf16"}, "bf16", 1024),       # Sapphire Rapids AMX tile: 1024 bf16 FLOPs/cycle
    ({"avx512f", "avx512_bf16"}, "bf16", 128),
    ({"avx2", "fma"}, "bf16", 32),                 # no 16-bit units: fp32 rate
])
def test_cpu_flops_per_cycle_from_flags(flags, dtype, expected):
    assert timing.cpu_flops_per_cycle(flags, dtype)[0] == expected


def test_cpu_peak_is_derived_and_labelled():
    peak, source = timing.cpu_peak_flops_per_s("fp32", threads=1)
    if peak is None:
        assert source.startswith("unknown")
    else:
        assert source.startswith("derived")
        per_cycle = timing.cpu_flops_per_cycle(timing._cpu_flags()[0], "fp32")[0]
        clock = timing._cpu_clock_hz(timing._cpu_flags()[1])[0]
        assert peak == pytest.approx(per_cycle * 1 * clock)


def test_only_a_max_clock_makes_the_cpu_peak_a_ceiling(monkeypatch):
    monkeypatch.setattr(timing, "_cpu_clock_hz", lambda model: (2.6e9, "cpu MHz"))
    assert not timing.peak_is_ceiling("cpu")
    assert "not a ceiling" in timing.cpu_peak_flops_per_s("fp32", threads=1)[1]
    monkeypatch.setattr(timing, "_cpu_clock_hz", lambda model: (3.7e9, "cpuinfo_max_freq"))
    assert timing.peak_is_ceiling("cpu")
    assert "not a ceiling" not in timing.cpu_peak_flops_per_s("fp32", threads=1)[1]
    assert timing.peak_is_ceiling("cuda")                  # a datasheet peak, no CUDA needed to say so


def test_bench_matmul_reports_consistent_numbers():
    result = timing.bench_matmul(64, "fp32", "cpu", warmup=1, repeats=3)
    assert result["flops"] == 2 * 64 ** 3
    assert result["flops_per_s"] == pytest.approx(result["flops"] / result["seconds"])
    if result["peak_flops_per_s"]:
        assert result["mfu"] == pytest.approx(result["flops_per_s"] / result["peak_flops_per_s"])


def test_bench_rejects_unknown_dtype():
    with pytest.raises(TrainledgerError, match="--dtype"):
        timing.bench_matmul(8, "fp8")


def test_mfu_and_achieved_rate():
    # PaLM App. B: MFU = achieved FLOP/s / peak; 6.3e24 FLOPs in 143.93 days on 1024 H100 at 989.5e12
    seconds = 143.93 * 86400
    assert timing.mfu(6.3e24, seconds, 1024 * 989.5e12) == pytest.approx(0.5, rel=1e-3)
    assert timing.mfu(1.0, 1.0, None) is None
    with pytest.raises(TrainledgerError):
        timing.achieved_flops_per_s(1.0, 0.0)


def test_step_timer_and_peak_memory():
    with timing.StepTimer("cpu") as timer:
        torch.ones(1000).sum()
    assert timer.seconds > 0
    assert timing.peak_memory_bytes("cpu") > 10 * 2**20          # a Python process with torch loaded


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; the CPU path is tested above")
def test_cuda_peak_from_datasheet_or_unknown():
    peak, source = timing.peak_flops_per_s("cuda", "bf16")
    assert (peak is None and "unknown" in source) or source.startswith("datasheet")
