"""measure/cpu_load.py: how many threads `train` takes when --threads is not given (issue 31, item 3).

On 2 cores at load 3.5 the quick start trained at 2.5K tokens/s with torch's default 2 threads and 9.5K with
--threads 1: a parallel op waits for its slowest thread, and a thread sharing its core with another process
is the slowest. So the choice counts only the CPUs other processes leave idle."""

from __future__ import annotations

import pytest

from trainledger.measure import cpu_load


@pytest.mark.parametrize("cpu_count, others, max_threads, threads, why", [
    (2, 0.0, 2, 2, "an idle machine: torch's default"),
    (2, 0.1, 2, 2, "a shell and a polling parent are noise (under TOLERANCE_CPUS)"),
    (2, 0.5, 2, 1, "half a core taken: the second thread would wait for it"),
    (2, 1.0, 2, 1, "one core taken: one thread"),
    (2, 3.5, 2, 1, "issue 31's load 3.5 on 2 cores: still one thread, never none"),
    (16, 5.2, 8, 8, "11 idle CPUs, but never more than torch's default (physical cores)"),
    (16, 12.0, 8, 4, "4 idle CPUs of 16"),
    (2, -0.3, 2, 2, "a negative reading (counter jitter) is no load"),
])
def test_pick_threads_takes_the_idle_cpus(cpu_count, others, max_threads, threads, why):
    assert cpu_load.pick_threads(cpu_count, others, max_threads) == threads, why


def _meter(monkeypatch, others_cpus: float, wall_s: float = 2.0):
    """An OthersCpu whose window saw `others_cpus` CPUs of other processes over `wall_s` seconds."""
    clock = {"busy": 100.0, "wall": 50.0, "own": 3.0}
    monkeypatch.setattr(cpu_load, "_busy_seconds", lambda: clock["busy"])
    monkeypatch.setattr(cpu_load.time, "monotonic", lambda: clock["wall"])
    monkeypatch.setattr(cpu_load.time, "process_time", lambda: clock["own"])
    meter = cpu_load.OthersCpu()
    own = 0.4                                  # this process's own CPU time is never counted as others'
    clock.update(busy=100.0 + others_cpus * wall_s + own, wall=50.0 + wall_s, own=3.0 + own)
    return meter


def test_choose_threads_reads_the_others_cpu_time_and_says_why(monkeypatch):
    monkeypatch.setattr(cpu_load.os, "cpu_count", lambda: 2)
    threads, line = cpu_load.choose_threads(2, _meter(monkeypatch, 1.6), environ={})
    assert threads == 1
    assert line.startswith("threads: 1 (0.4 of 2 CPUs idle: other processes used 1.6 over the last 2.0 s")
    assert "--threads N" in line
    threads, line = cpu_load.choose_threads(2, _meter(monkeypatch, 0.1), environ={})
    assert threads == 2 and line.startswith("threads: 2 (1.9 of 2 CPUs idle")   # noise: both cores
    # two ranks of one run on this machine share the idle CPUs
    monkeypatch.setattr(cpu_load.os, "cpu_count", lambda: 8)
    threads, line = cpu_load.choose_threads(8, _meter(monkeypatch, 0.0), environ={}, ranks_here=2)
    assert threads == 4 and "shared by 2 ranks" in line


def test_choose_threads_follows_omp_num_threads(monkeypatch):
    threads, line = cpu_load.choose_threads(3, _meter(monkeypatch, 2.0), environ={"OMP_NUM_THREADS": "3"})
    assert threads == 3 and line.startswith("threads: 3 (OMP_NUM_THREADS=3")


def test_choose_threads_falls_back_on_the_load_average(monkeypatch):
    monkeypatch.setattr(cpu_load.os, "cpu_count", lambda: 2)
    meter = _meter(monkeypatch, 0.0)
    monkeypatch.setattr(cpu_load, "_busy_seconds", lambda: None)          # no /proc/stat
    monkeypatch.setattr(cpu_load.os, "getloadavg", lambda: (1.3, 0.5, 0.2))
    threads, line = cpu_load.choose_threads(2, meter, environ={})
    assert threads == 1 and "load average 1.3" in line


def test_choose_threads_waits_out_a_short_window(monkeypatch):
    """A window shorter than MIN_WINDOW_S is too coarse for /proc/stat's 10 ms ticks: it sleeps the rest."""
    slept = []
    monkeypatch.setattr(cpu_load.time, "sleep", slept.append)
    meter = _meter(monkeypatch, 0.0, wall_s=0.1)
    cpu_load.choose_threads(2, meter, environ={})
    assert slept == [pytest.approx(cpu_load.MIN_WINDOW_S - 0.1)]


def test_others_cpus_on_this_machine_is_a_real_reading():
    """/proc/stat read twice around a busy loop of this process: its own time is left out (others ≥ 0)."""
    if cpu_load._busy_seconds() is None:
        pytest.skip("no /proc/stat here (not Linux)")
    import os
    import time
    meter = cpu_load.OthersCpu()
    end = time.monotonic() + 0.3
    while time.monotonic() < end:
        pass
    others = meter.cpus()
    assert others is not None and 0.0 <= others <= (os.cpu_count() or 1) + 0.5
