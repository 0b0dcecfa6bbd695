"""`trainledger bench`: JSON keys, consistency of the numbers, errors."""

import json

import pytest
import torch

from trainledger.cli.main import main


def run(capsys, *argv):
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_json_keys(capsys):
    status, out, err = run(capsys, "bench", "--size", "128", "--repeats", "2", "--json")
    assert status == 0 and err == ""
    result = json.loads(out)
    assert {"flops", "seconds", "flops_per_s", "peak_flops_per_s", "mfu", "peak_source"} <= set(result)
    assert result["flops"] == 2 * 128 ** 3
    assert result["flops_per_s"] == pytest.approx(result["flops"] / result["seconds"])


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_every_dtype_on_cpu(capsys, dtype):
    status, out, _ = run(capsys, "bench", "--size", "64", "--dtype", dtype, "--repeats", "1")
    assert status == 0 and "MFU" in out and f"64×64 {dtype} on cpu" in out
    status, out, _ = run(capsys, "bench", "--size", "32", "--dtype", dtype, "--repeats", "1", "--warmup", "0", "--json")
    result = json.loads(out)
    assert status == 0 and result["dtype"] == dtype and result["flops"] == 2 * 32 ** 3 and result["seconds"] > 0


def test_errors(capsys):
    status, _, err = run(capsys, "bench", "--dtype", "fp8")
    assert status == 2 and "--dtype" in err
    if not torch.cuda.is_available():
        status, _, err = run(capsys, "bench", "--device", "cuda")
        assert status == 2 and "cuda" in err


def test_calibrate_saves_the_profile(capsys, tmp_path, monkeypatch, one_torch_thread):
    """--calibrate measures (here on a small grid), saves the JSON profile in the cache and reports it."""
    from trainledger.measure import calibrate as cal
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setitem(cal.GRIDS, "cpu", ((64,), (32, 64), 2.0 ** 22, ("fp32",)))
    monkeypatch.setitem(cal.MEMORY_OP_BYTES, "cpu", [2 ** 14])
    monkeypatch.setitem(cal.ATTENTION, "cpu", ("fp32", 2, 16, (32,)))
    monkeypatch.setattr(cal, "MIN_SAMPLE_SECONDS", 1e-4)
    monkeypatch.setattr(cal.os, "getloadavg", lambda: (0.0, 0.0, 0.0))        # a quiet machine
    monkeypatch.setattr(cal.OthersCpu, "cpus", lambda self: 0.0)
    status, out, err = run(capsys, "bench", "--calibrate", "--json")
    assert status == 0, err
    result = json.loads(out)
    path = tmp_path / "trainledger" / result["calibration"]["path"].rsplit("/", 1)[-1]
    assert cal.load_profile(path) == result["profile"]
    assert len(result["profile"]["gemm"]["fp32"]) == 4
    status, out, _ = run(capsys, "bench", "--calibrate")
    assert status == 0 and "calibration of this machine" in out and "CPU per launching op" in out
    out_file = tmp_path / "elsewhere" / "calibration-mine.json"          # --out: a file for --calibration
    status, out, err = run(capsys, "bench", "--calibrate", "--out", str(out_file), "--json")
    assert status == 0, err
    assert cal.load_profile(out_file) == json.loads(out)["profile"]
    status, _, err = run(capsys, "step", "--model", "tiny", "--calibration", str(out_file), "--json")
    assert status == 0, err


def test_a_busy_calibration_is_refused_unless_forced(capsys, tmp_path, monkeypatch, one_torch_thread):
    """Issue 22: a calibration measured at load 5 on 2 CPUs was saved and made `step` 10× off. Now it is refused
    (exit 2, one line saying how to calibrate quietly) and saved only with --force, which says so."""
    from trainledger.measure import calibrate as cal
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(cal, "calibrate", lambda device, progress=None: synthetic_busy_profile())
    status, out, err = run(capsys, "bench", "--calibrate")
    assert status == 2 and err.count("\n") == 1 and "--threads 1" in err and "--force" in err
    assert not cal.profile_path("cpu").exists()
    status, out, err = run(capsys, "bench", "--calibrate", "--force", "--json")
    assert status == 0 and cal.profile_path("cpu").exists()
    assert "saved: --force" in json.loads(out)["warnings"][0]
    status, _, err = run(capsys, "bench", "--calibrate", "--out", "")
    assert status == 2 and "--out" in err


def synthetic_busy_profile() -> dict:
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent.parent / "measure"))
    from profile_helpers import synthetic_profile
    return synthetic_profile(load_average=5.0, cpu_count=2)


def test_calibrate_cuda_without_a_device(capsys):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    status, _, err = run(capsys, "bench", "--calibrate", "--device", "cuda")
    assert status == 2 and "cuda" in err
