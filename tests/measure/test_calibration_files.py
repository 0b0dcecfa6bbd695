"""Calibration files as an attacker and a clumsy user hand them over (issue 23 finding 7): the cache is re-measured,
`--calibration FILE` is refused in one line naming the file and the field, nothing is unpickled, nothing recurses."""

import json
import os
import pickle

import pytest
from profile_helpers import synthetic_profile

from trainledger.cli.main import main
from trainledger.errors import TrainledgerError
from trainledger.measure import calibrate as cal
from trainledger.specs.calibration import read_profile

RECORDED = os.path.join(os.path.dirname(__file__), "..", "data", "h100_2026_11_26", "calibration-cuda-h100.json")


def write(tmp_path, content, name="calibration.json"):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    return path


@pytest.mark.parametrize("change, field", [
    ({"op_overhead_seconds": -1}, "op_overhead_seconds"),                     # gave step_seconds −899.8
    ({"op_overhead_seconds": 1e308}, "op_overhead_seconds"),                  # gave NaN
    ({"op_overhead_seconds": -1e308}, "op_overhead_seconds"),
    ({"memory": [[1e6, 5e-324]]}, "memory"),                                  # made every --gpu cpu command exit 2
    ({"gemm": {"fp32": [[128, 128, 128, 5e-324]]}}, "gemm"),
    ({"gemm": {"fp32": [[128, 128, 128, 1e308]]}}, "gemm"),
    ({"gemm": {"fp32": [[0, 128, 128, 1e9]]}}, "gemm"),
    ({"memory_bytes": 1e30}, "memory_bytes"),
    ({"attention": {"dtype": "fp32", "points": [[2**40, 1e9, 1e9]]}}, "attention"),
    ({"kernel_overhead_seconds": 0.0}, "kernel_overhead_seconds"),
    ({"gpu_timed": "yes"}, "gpu_timed"),
    ({"version": 0}, "version 0"),
    ({"version": 3}, "newer than this trainledger"),
    ({"version": True}, "version"),
], ids=lambda x: str(x)[:40])
def test_out_of_bounds_files_are_refused_naming_the_field(tmp_path, capsys, change, field):
    path = write(tmp_path, synthetic_profile(**change))
    with pytest.raises(TrainledgerError, match=field):
        read_profile(path)
    assert main(["step", "--model", "tiny", "--calibration", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and field.split()[0] in err and "Traceback" not in err


def test_nan_and_infinity_tokens_are_refused(tmp_path):
    text = json.dumps(synthetic_profile()).replace('"op_overhead_seconds": 2e-06', '"op_overhead_seconds": NaN')
    with pytest.raises(TrainledgerError, match="op_overhead_seconds"):
        read_profile(write(tmp_path, text.encode()))
    text = json.dumps(synthetic_profile()).replace('"memory_bytes": 16000000000.0', '"memory_bytes": Infinity')
    with pytest.raises(TrainledgerError, match="memory_bytes"):
        read_profile(write(tmp_path, text.encode()))


@pytest.mark.parametrize("depth", [7, 100_000])
def test_deep_nesting_is_refused_before_parsing(tmp_path, capsys, depth):
    """A JSON of 100,000 nested lists made train, step and layout exit 1 with RecursionError."""
    path = write(tmp_path, ("[" * depth + "]" * depth).encode())
    with pytest.raises(TrainledgerError, match="nested deeper"):
        read_profile(path)
    assert main(["layout", "--model", "tiny", "--calibration", str(path)]) == 2
    assert "nested deeper" in capsys.readouterr().err


def test_a_pickle_is_never_unpickled(tmp_path, monkeypatch):
    """A pickle that would run code when loaded is just bytes that are not JSON."""
    class Boom:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "pwned"),))
    path = write(tmp_path, pickle.dumps(Boom()))
    with pytest.raises(TrainledgerError, match="not UTF-8 JSON|not a JSON"):
        read_profile(path)
    assert not (tmp_path / "pwned").exists()


def test_files_that_are_not_regular_files_or_too_large(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)                                          # opening it for reading would block: never opened
    for path, reason in ((fifo, "not a regular file"), (tmp_path, "not a regular file"),
                         (tmp_path / "missing.json", "no such file"), ("/dev/zero", "not a regular file")):
        with pytest.raises(TrainledgerError, match=reason):
            read_profile(path)
    big = write(tmp_path, b" " * (4 * 2**20 + 1))
    with pytest.raises(TrainledgerError, match="larger than 4 MiB"):
        read_profile(big)


def test_the_recorded_version_1_file_loads():
    profile = read_profile(RECORDED, "cuda")
    assert profile["version"] == 1 and profile["device"] == "cuda"


def test_a_cached_file_outside_the_bounds_is_named_and_measured_again(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = cal.profile_path("cpu")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(synthetic_profile(op_overhead_seconds=-1)))
    lines, calls = [], []
    monkeypatch.setattr(cal, "calibrate", lambda device: calls.append(device) or synthetic_profile())
    gpu = cal.calibrated_device("cpu", log=lines.append)
    assert calls == ["cpu"] and str(path) in lines[0] and "op_overhead_seconds" in lines[0]
    assert gpu.op_overhead_seconds == pytest.approx(2e-6) and cal.load_profile(path) is not None


def test_a_cuda_profile_in_the_cpu_cache_is_not_a_cpu(tmp_path, monkeypatch):
    """Issue 23: a "device": "cuda" entry in the cpu file made `train` say "predicted on h100-sxm"."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = cal.profile_path("cpu")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(synthetic_profile(device="cuda", device_name="NVIDIA H100 80GB HBM3")))
    assert cal.load_profile(path) is None                      # the train loop's reading (by the file's name)
    lines = []
    monkeypatch.setattr(cal, "calibrate", lambda device: synthetic_profile())
    gpu = cal.calibrated_device("cpu", log=lines.append)
    assert gpu.name == "cpu" and "expected 'cpu'" in lines[0]


def test_calibration_on_the_web_is_refused():
    from trainledger.errors import TrainledgerError
    from trainledger.web import api
    with pytest.raises(TrainledgerError, match="command-line only") as error:      # the web's allow-list refuses it
        api.argv_for("step", [("model", "gpt2"), ("calibration", RECORDED)])
    assert error.value.flag == "--calibration"
    assert api.argv_for("step", [("model", "gpt2"), ("compile", "true")]) == ["step", "--model=gpt2", "--compile"]
