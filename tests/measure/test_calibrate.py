"""Calibration: the profile's validation, its JSON round trip and cache, the GPUSpec it makes, the measurements' shape.

Nothing here depends on how fast this machine is: the measurements are checked for form (positive, finite, on
the asked grid), the model for what it does with given numbers.
"""

import json
import math
import os
import pickle

import pytest
import torch

from trainledger.account.time.roofline import Kernel, kernel_seconds, memory_seconds
from runs import step as step_time
from trainledger.errors import TrainledgerError
from trainledger.measure import calibrate as cal
from trainledger.specs import PRESETS
from trainledger.specs.calibration import calibrated_gpu, check_profile

from profile_helpers import synthetic_profile


def test_calibrated_gpu_holds_the_measured_fractions():
    gpu = calibrated_gpu(synthetic_profile())
    assert gpu.name == "cpu" and gpu.sm_count is None and gpu.gpus_per_node == 1
    assert gpu.peak("fp32") == 100e9                      # stated peak above every measured rate
    table = gpu.gemm_table("fp32")
    assert table.full_waves is False
    assert [p[3] for p in table.points] == pytest.approx([0.2, 0.8, 0.05])
    assert gpu.memory_bandwidth_curve == ((1e3, 10e9), (1e6, 100e9), (1e9, 10e9))    # sorted by op size
    assert gpu.memory_bandwidth_bytes_per_s == 10e9       # the largest ops: DRAM
    assert gpu.attention_table().points[1] == pytest.approx((1024, 0.4, 0.3))
    assert gpu.op_overhead_seconds == 2e-6


def test_a_rate_above_the_stated_peak_becomes_the_peak():
    gpu = calibrated_gpu(synthetic_profile(peak_flops_per_s={"fp32": 50e9}))
    assert gpu.peak("fp32") == 80e9
    assert max(p[3] for p in gpu.gemm_table("fp32").points) == 1.0


def test_memory_seconds_interpolates_the_curve_by_op_size():
    gpu = calibrated_gpu(synthetic_profile())
    assert memory_seconds(gpu, 1e3) == pytest.approx(1e3 / 10e9)
    assert memory_seconds(gpu, 1e6) == pytest.approx(1e6 / 100e9)
    # halfway in log2 between 1e3 and 1e6 bytes: the mean of the two rates
    middle = math.sqrt(1e3 * 1e6)
    assert memory_seconds(gpu, middle) == pytest.approx(middle / 55e9)
    assert memory_seconds(gpu, 10.0) == pytest.approx(10 / 10e9)            # clamped below
    # 10 kernels of 1 kB each stream at the 1 kB rate, not at the rate of 10 kB
    many = Kernel("adds", "memory_bound", "elementwise", 0.0, 1e4, (), "fp32", 10)
    assert kernel_seconds(gpu, many) == pytest.approx(1e4 / 10e9)


def test_an_op_with_its_own_curve_streams_at_its_rate():
    """tanh-GELU is measured apart (compute-bound on CPUs); other elementwise kernels use the add curve."""
    gpu = calibrated_gpu(synthetic_profile(elementwise={"gelu": [[1e3, 2e9], [1e6, 20e9]]}))
    gelu = Kernel("gelu", "memory_bound", "elementwise", 0.0, 1e6, (), "fp32", 1)
    add = Kernel("residual_mlp", "memory_bound", "elementwise", 0.0, 1e6, (), "fp32", 1)
    assert kernel_seconds(gpu, gelu) == pytest.approx(1e6 / 20e9)
    assert kernel_seconds(gpu, add) == pytest.approx(1e6 / 100e9)
    assert calibrated_gpu(synthetic_profile()).elementwise_curves == {}          # optional in a profile
    with pytest.raises(TrainledgerError, match="elementwise"):
        check_profile(synthetic_profile(elementwise={"gelu": [[1e3]]}))


def test_step_time_on_a_calibrated_cpu_adds_up():
    gpu = calibrated_gpu(synthetic_profile())
    result = step_time(PRESETS["tiny"], gpu, batch_size=4, seq_len=64, precision="fp32", zero=0, with_memory=False)
    assert sum(result["breakdown"].values()) == pytest.approx(result["step_seconds"])
    assert result["breakdown"]["overhead"] > 0 and result["breakdown"]["compute"] > 0
    with pytest.raises(TrainledgerError, match="bf16"):
        step_time(PRESETS["tiny"], gpu, batch_size=4, seq_len=64, precision="amp-bf16", with_memory=False)


@pytest.mark.parametrize("change", [
    {"format": "other"}, {"version": 3}, {"device": "tpu"}, {"peak_flops_per_s": {"fp32": float("nan")}},
    {"gemm": {"fp32": [[128, 128, 128, -1.0]]}}, {"gemm": {"fp32": []}}, {"gemm": {"bf16": [[1, 1, 1, 1.0]]}},
    {"memory": [[1e6]]}, {"memory": "fast"}, {"op_overhead_seconds": None}, {"device_name": 3},
    {"attention": {"dtype": "fp64", "points": [[1, 1, 1]]}}, {"memory_bytes": True},
], ids=lambda c: next(iter(c)))
def test_invalid_profiles_are_rejected(change):
    with pytest.raises(TrainledgerError, match="calibration profile"):
        check_profile(synthetic_profile(**change))


def test_round_trip_is_json_and_atomic(tmp_path):
    path = tmp_path / "sub" / "calibration.json"
    cal.save_profile(synthetic_profile(), path)
    assert json.loads(path.read_text()) == synthetic_profile()
    assert cal.load_profile(path) == synthetic_profile()
    assert os.listdir(path.parent) == ["calibration.json"]           # no temporary file left behind


@pytest.mark.parametrize("content", [b"", b"{not json", b"[1, 2]", pickle.dumps(synthetic_profile()),
                                     json.dumps(synthetic_profile(version=0)).encode()],
                         ids=["empty", "truncated", "list", "pickle", "old-version"])
def test_a_bad_file_counts_as_absent(tmp_path, content):
    path = tmp_path / "calibration.json"
    path.write_bytes(content)
    assert cal.load_profile(path) is None
    assert cal.load_profile(tmp_path / "missing.json") is None


def test_calibrated_device_uses_the_cache_and_replaces_a_bad_file(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = cal.profile_path("cpu")
    assert path.parent == tmp_path / "trainledger" and f"threads{torch.get_num_threads()}" in path.name
    calls, lines = [], []
    monkeypatch.setattr(cal, "calibrate", lambda device: calls.append(device) or synthetic_profile())
    gpu = cal.calibrated_device("cpu", log=lines.append)           # nothing cached: measures once, says so
    assert calls == ["cpu"] and len(lines) == 1 and str(path) in lines[0]
    assert cal.load_profile(path) == synthetic_profile() and gpu.peak("fp32") == 100e9
    cal.calibrated_device("cpu", log=lines.append)                 # cached: no second measurement
    assert calls == ["cpu"] and len(lines) == 1
    path.write_text("{ broken")
    cal.calibrated_device("cpu", log=lines.append)                 # a bad file is measured again and replaced
    assert calls == ["cpu", "cpu"] and cal.load_profile(path) is not None


def test_resolve_gpu_cpu_is_the_calibrated_device(tmp_path, monkeypatch):
    from trainledger.cli.common import resolve_gpu
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cal.save_profile(synthetic_profile(), cal.profile_path("cpu"))
    assert resolve_gpu("cpu").gemm_table("fp32").points[0][3] == pytest.approx(0.2)
    assert resolve_gpu("CPU").name == "cpu"
    assert resolve_gpu("h100").name == "h100-sxm"


def test_calibrate_measures_the_whole_format(monkeypatch, one_torch_thread):
    """A real calibration on a small grid: every figure is there, positive and finite, on the asked shapes."""
    monkeypatch.setitem(cal.GRIDS, "cpu", ((64, 256), (32, 128), 2.0 ** 24, ("fp32",)))
    monkeypatch.setitem(cal.MEMORY_OP_BYTES, "cpu", [2 ** 14, 2 ** 18])
    monkeypatch.setitem(cal.ATTENTION, "cpu", ("fp32", 2, 16, (32, 64)))
    monkeypatch.setattr(cal, "MIN_SAMPLE_SECONDS", 1e-4)
    timers = []
    decode = cal.decode_op_overhead_seconds
    monkeypatch.setattr(cal, "decode_op_overhead_seconds", lambda device, timer: timers.append(timer) or decode(device, timer))
    profile = check_profile(cal.calibrate("cpu"))
    # the decoding step's op cost is the CPU's: the wall clock on every device, never the GPU behind a sleep (on an
    # H200 that timer took most of a minute, tests/data/h200_2026_11_28/README.md)
    assert timers == [cal._wall_seconds_per_call]
    assert [row[:3] for row in profile["gemm"]["fp32"]] == [[m, n, k] for m in (64, 256) for n in (32, 128)
                                                             for k in (32, 128)]
    assert [row[0] for row in profile["memory"]] == [12 * (2 ** 14 // 12), 12 * (2 ** 18 // 12)]
    assert [p[0] for p in profile["attention"]["points"]] == [32, 64]
    assert [row[0] for row in profile["elementwise"]["gelu"]] == [8 * (2 ** 18 // 12)]
    assert [row[0] for row in profile["elementwise"]["gelu_backward"]] == [12 * (2 ** 18 // 12)]
    assert [row[0] for row in profile["elementwise"]["cross_entropy"]] == [pytest.approx(12 * 2 ** 16 / 2)]
    assert [row[0] for row in profile["elementwise"]["cross_entropy_backward"]] == [pytest.approx(20 * 2 ** 16 / 3)]
    assert profile["threads"] == 1 and profile["device"] == "cpu" and profile["version"] == 2
    assert 0 < profile["op_overhead_seconds"] < 1
    assert 0 <= profile.get("host_op_seconds", 0) < 1
    calibrated_gpu(profile)                                          # usable by account/


def test_cuda_without_a_device_is_a_one_line_error():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(TrainledgerError, match="--gpu cuda"):
        cal.calibrated_device("cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_calibration(monkeypatch, tmp_path):
    """Version 2 on CUDA: kernel rates timed on the GPU behind a full queue, apart from the CPU's launch costs.
    A small matmul's GPU-timed rate beats its wall-clock rate (the CPU's dispatch, which version 1 measured)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setitem(cal.GRIDS, "cuda", ((512, 2048), (128, 512, 2048), 2.0 ** 34, ("bf16",)))
    gpu = cal.calibrated_device("cuda", log=lambda line: None)
    profile = cal.load_profile(cal.profile_path("cuda"))
    assert profile["device"] == "cuda" and profile["version"] == 2 and profile["gpu_timed"]
    assert gpu.gemm_table("bf16") is not None and gpu.attention_table("sdpa").head_dim == 128
    assert [t.head_dim for t in gpu.attention_table("sdpa").at_head_dims()] == [64, 128]
    assert 0 < profile["kernel_overhead_seconds"] < profile["op_overhead_seconds"]   # the GPU outruns the CPU
    assert gpu.async_launch and gpu.kernel_overhead_seconds == profile["kernel_overhead_seconds"]
    a = torch.randn(512, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(128, 128, device="cuda", dtype=torch.bfloat16)
    wall = cal._wall_seconds_per_call(lambda: torch.mm(a, b), "cuda")
    assert cal.gpu_seconds_per_call(lambda: torch.mm(a, b)) < wall


def test_a_busy_calibration_is_cached_as_busy_and_reused_with_a_warning(tmp_path, monkeypatch):
    """Issue 41: a calibration measured while the machine was busy was never cached, so on a machine that stays
    busy every command measured it again. Now it is cached with its busy flag and reused with one warning line."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    busy = synthetic_profile(others_cpus=1.6, cpu_count=2, threads=2)
    calls, lines = [], []
    monkeypatch.setattr(cal, "calibrate", lambda device: calls.append(device) or dict(busy, busy=True))
    def still_busy(profile):
        return False

    cal.calibrated_device("cpu", log=lines.append, idle_now=still_busy)
    assert calls == ["cpu"] and json.loads(cal.profile_path("cpu").read_text())["busy"] is True
    assert "cached as busy" in lines[-1] and "other processes used 1.6 of 2 CPUs" in lines[-1]
    lines.clear()
    named: list[str] = []
    gpu = cal.calibrated_device("cpu", log=lines.append, busy=named, idle_now=still_busy)    # reused, not re-run
    assert calls == ["cpu"] and len(lines) == 1 and lines[0].startswith("warning: the cached calibration")
    assert "other processes used 1.6 of 2 CPUs" in named[0] and gpu.peak("fp32") == 100e9


def test_a_planted_busy_cache_entry_is_reused_until_an_idle_calibration_replaces_it(tmp_path, monkeypatch):
    """A busy entry in the cache (planted: a bench --calibrate --force under load) is used with a warning while
    the machine stays busy; once it is idle the next use measures again, and the idle profile replaces it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cal.save_profile(synthetic_profile(others_cpus=1.6, cpu_count=2, threads=2, busy=True), cal.profile_path("cpu"))
    idle = synthetic_profile(others_cpus=0.0, cpu_count=2, threads=2, busy=False, peak_flops_per_s={"fp32": 200e9})
    calls, lines = [], []
    monkeypatch.setattr(cal, "calibrate", lambda device: calls.append(device) or idle)
    gpu = cal.calibrated_device("cpu", log=lines.append, idle_now=lambda profile: False)
    assert calls == [] and len(lines) == 1 and "busy" in lines[0] and gpu.peak("fp32") == 100e9
    lines.clear()
    gpu = cal.calibrated_device("cpu", log=lines.append, idle_now=lambda profile: True)    # idle now: measured
    assert calls == ["cpu"] and "idle now: measuring again" in lines[0] and gpu.peak("fp32") == 200e9
    assert json.loads(cal.profile_path("cpu").read_text())["busy"] is False
    lines.clear()
    cal.calibrated_device("cpu", log=lines.append, idle_now=lambda profile: pytest.fail("asked of an idle profile"))
    assert calls == ["cpu"] and lines == []                       # the idle one is used quietly


def test_a_profile_from_before_the_flag_is_judged_by_its_readings():
    assert cal.is_busy(synthetic_profile(load_average=3.0, cpu_count=2)) is True
    assert cal.is_busy(synthetic_profile(others_cpus=0.1, cpu_count=2, threads=2)) is False
    assert cal.is_busy(synthetic_profile(busy="yes")) is False            # only a JSON true is the flag


def test_machine_idle_now_reads_the_others_cpus(monkeypatch):
    from trainledger.measure import cpu_load
    monkeypatch.setattr(cpu_load.time, "sleep", lambda s: None)
    monkeypatch.setattr(cpu_load.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(cpu_load.OthersCpu, "cpus", lambda self: 1.2)          # 0.8 CPU free: enough for one thread
    assert cpu_load.machine_idle_now({"threads": 2}) is False and cpu_load.machine_idle_now({"threads": 1}) is True
    monkeypatch.setattr(cpu_load.OthersCpu, "cpus", lambda self: 1.6)
    assert cpu_load.machine_idle_now({"threads": 1}) is False
    monkeypatch.setattr(cpu_load.OthersCpu, "cpus", lambda self: 0.1)
    assert cpu_load.machine_idle_now({"threads": 2}) is True
    monkeypatch.setattr(cpu_load.OthersCpu, "cpus", lambda self: None)         # no /proc/stat: stays as cached
    assert cpu_load.machine_idle_now({"threads": 1}) is False


def test_a_busy_machine_is_named():
    assert cal.busy_warning(synthetic_profile(load_average=0.5, cpu_count=2)) is None
    assert "load average 3.0 on 2 CPUs" in cal.busy_warning(synthetic_profile(load_average=3.0, cpu_count=2))
    assert cal.busy_warning(synthetic_profile()) is None                 # not recorded: no claim


def test_attention_rates_never_set_the_peak():
    """The matmul table sets the ceiling; an attention rate above it is capped at 1, never raising the peak."""
    profile = synthetic_profile(attention={"dtype": "fp32", "head_dim": 64, "heads": 8,
                                           "points": [[128, 500e9, 5e9]]})
    gpu = calibrated_gpu(profile)
    assert gpu.peak("fp32") == 100e9 and gpu.attention_table().points[0] == pytest.approx((128, 1.0, 0.05))


def test_busy_is_judged_by_the_cpus_other_processes_took(monkeypatch):
    """The load average lags a minute and counts our own threads; others' CPU time during the run does neither."""
    profile = synthetic_profile(load_average=1.7, cpu_count=2)         # a job that just ended still in the average
    assert cal.busy_warning(profile | {"threads": 1, "others_cpus": 0.1}) is None
    assert cal.busy_warning(profile | {"threads": 1, "others_cpus": 0.9}) is None      # one CPU free for one thread
    warning = cal.busy_warning(profile | {"threads": 1, "others_cpus": 1.3})
    assert "other processes used 1.3 of 2 CPUs" in warning
    assert cal.busy_warning(profile | {"threads": 2, "others_cpus": 0.2}) is None
    assert cal.busy_warning(profile | {"threads": 2, "others_cpus": 0.6}) is not None


def test_others_cpu_subtracts_this_process_own_time(monkeypatch):
    from trainledger.measure import cpu_load
    clock = {"wall": 100.0, "busy": 50.0, "own": 3.0}
    monkeypatch.setattr(cpu_load, "_busy_seconds", lambda: clock["busy"])
    monkeypatch.setattr(cpu_load.time, "monotonic", lambda: clock["wall"])
    monkeypatch.setattr(cpu_load.time, "process_time", lambda: clock["own"])
    meter = cpu_load.OthersCpu()
    clock.update(wall=110.0, busy=50.0 + 25.0, own=3.0 + 18.0)   # 25 CPU-s busy in 10 s, 18 of them ours
    assert meter.cpus() == pytest.approx(0.7)
    monkeypatch.setattr(cpu_load, "_busy_seconds", lambda: None)  # no /proc/stat: no claim
    assert meter.cpus() is None


def test_others_cpu_sees_a_spinning_child():
    import subprocess
    import sys
    from trainledger.measure import cpu_load
    if cpu_load._busy_seconds() is None:
        pytest.skip("no /proc/stat on this system")
    meter = cpu_load.OthersCpu()
    subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 1: pass"],
                   check=True)
    assert meter.cpus() > 0.3       # one CPU for most of the window (start-up included); other load only adds
