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
    status, out, err = run(capsys, "bench", "--calibrate", "--json")
    assert status == 0, err
    result = json.loads(out)
    path = tmp_path / "trainledger" / result["calibration"]["path"].rsplit("/", 1)[-1]
    assert cal.load_profile(path) == result["profile"]
    assert len(result["profile"]["gemm"]["fp32"]) == 4
    status, out, _ = run(capsys, "bench", "--calibrate")
    assert status == 0 and "calibration of this machine" in out and "per-op overhead" in out


def test_calibrate_cuda_without_a_device(capsys):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    status, _, err = run(capsys, "bench", "--calibrate", "--device", "cuda")
    assert status == 2 and "cuda" in err
