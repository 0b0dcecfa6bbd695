"""`profile`, `bench` and `generate` pick their CPU threads as `train` does (issue 41, item 5): with no --threads,
the cores other processes leave idle (measure/cpu_load.py choose_threads; OMP_NUM_THREADS kept), printed and in
the JSON (`threads`, `threads_choice`); --threads as train takes it (1 .. 4 per core). On a busy 2-core machine
`profile` with torch's two threads reported attention +621 % (a parallel op waits for its slowest thread).
`generate`'s case is in tests/train/test_generate.py (it needs a run)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from trainledger.cli.main import main


@pytest.fixture
def busy_two_cores(monkeypatch, tmp_path):
    """A 2-core machine where other processes keep 1.6 CPUs busy; torch's default is 2 threads. The threads each
    command sets are recorded (not applied); the calibration is a synthetic one (never measured)."""
    import torch

    sys.path.insert(0, str(Path(__file__).parent.parent / "measure"))       # as test_bench_cli.py imports it
    from profile_helpers import synthetic_profile

    from trainledger.measure import calibrate as cal
    from trainledger.measure import cpu_load
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cpu_load.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(cpu_load.OthersCpu, "cpus", lambda self: 1.6)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    calls: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(cal, "calibrate", lambda device, progress=None: synthetic_profile())
    return calls


def _json(capsys, *argv):
    capsys.readouterr()
    status = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert status == 0, err
    return json.loads(out)


def test_bench_takes_the_idle_core_and_says_so(busy_two_cores, capsys):
    result = _json(capsys, "bench", "--size", "32", "--repeats", "1", "--warmup", "0")
    assert busy_two_cores == [1]
    assert result["threads_choice"].startswith("threads: 1 (0.4 of 2 CPUs idle: other processes used 1.6")
    assert main(["bench", "--size", "32", "--repeats", "1", "--warmup", "0"]) == 0      # the table prints it first
    assert capsys.readouterr().out.splitlines()[0].startswith("threads: 1 (0.4 of 2 CPUs idle")
    result = _json(capsys, "bench", "--size", "32", "--repeats", "1", "--threads", "2")   # given: kept
    assert busy_two_cores == [1, 1, 2] and result["threads_choice"] is None


def test_bench_calibrate_picks_before_it_measures(busy_two_cores, capsys):
    result = _json(capsys, "bench", "--calibrate", "--force")
    assert busy_two_cores == [1] and result["threads_choice"].startswith("threads: 1 (")


def test_omp_num_threads_is_kept(busy_two_cores, capsys, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    result = _json(capsys, "bench", "--size", "32", "--repeats", "1")
    assert busy_two_cores == [2] and result["threads_choice"].startswith("threads: 2 (OMP_NUM_THREADS=2")


def test_profile_takes_the_idle_core_and_says_so(busy_two_cores, capsys):
    shape = ("profile", "--model", "tiny", "--batch-size", "1", "--seq-len", "8", "--steps", "1", "--warmup", "0",
             "--device", "cpu")
    result = _json(capsys, *shape)
    assert busy_two_cores == [1]
    assert result["threads_choice"].startswith("threads: 1 (0.4 of 2 CPUs idle: other processes used 1.6")
    assert main(list(shape)) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("threads: 1 (0.4 of 2 CPUs idle")
    result = _json(capsys, *shape, "--threads", "2")
    assert busy_two_cores == [1, 1, 2] and result["threads_choice"] is None


@pytest.mark.parametrize("argv", [
    ["bench", "--size", "32"],
    ["profile", "--model", "tiny", "--batch-size", "1", "--seq-len", "8", "--device", "cpu"],
])
def test_threads_beyond_four_per_core_are_refused_as_train_refuses_them(busy_two_cores, capsys, argv):
    status = main([*argv, "--threads", "9"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "--threads must be an integer in 1..8" in err
    assert busy_two_cores == []              # refused before anything ran
