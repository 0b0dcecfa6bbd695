"""How much CPU other processes took while this one measured, and whether that makes a calibration "busy".

The 1-minute load average is a poor witness: it lags by a minute (a job that just ended still counts) and it
counts this process's own threads. What a measurement needs to know is how many CPUs the *other* processes
used during it: the machine's busy time in /proc/stat (user, nice, system, irq, softirq and steal: a hypervisor
running other guests) minus this process's own CPU time (all its threads, time.process_time), over the wall
time between two samples (Linux proc(5)). Elsewhere, or when /proc/stat cannot be read, None: callers fall
back to the load average.
"""

from __future__ import annotations

import os
import time

BUSY_FIELDS = (0, 1, 2, 5, 6, 7)     # user nice system [idle iowait] irq softirq steal of the "cpu" line
TOLERANCE_CPUS = 0.25                # background noise (a shell, a polling parent) that costs a measurement nothing


def _busy_seconds() -> float | None:
    try:
        with open("/proc/stat") as handle:
            fields = handle.readline().split()
        ticks = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 9:
        return None
    return sum(int(fields[1 + i]) for i in BUSY_FIELDS) / ticks


class OthersCpu:
    """Started at construction; `cpus()` is the average number of CPUs other processes kept busy since then."""

    def __init__(self):
        self.wall, self.busy, self.own = time.monotonic(), _busy_seconds(), time.process_time()

    def cpus(self) -> float | None:
        busy = _busy_seconds()
        wall = time.monotonic() - self.wall
        if busy is None or self.busy is None or wall <= 0:
            return None
        others = (busy - self.busy) - (time.process_time() - self.own)
        return max(0.0, others / wall)


def busy_warning(profile: dict) -> str | None:
    """A warning when other processes kept the machine busy during calibration, so that fewer CPUs were free than
    its threads (one on CUDA, for the CPU side): the rates then understate the machine, and a thread descheduled
    inside a parallel op stalls the others. Measured from `others_cpus` when recorded, else from the 1-minute
    load average when the calibration started (older profiles)."""
    cpus, threads = profile.get("cpu_count") or 1, profile.get("threads") or 1
    others = profile.get("others_cpus")
    if others is not None:
        if cpus - others >= min(threads, cpus) - TOLERANCE_CPUS:
            return None
        return (f"the machine was busy while calibrating (other processes used {others:.1f} of {cpus} CPUs, "
                f"{threads} needed): the measured rates understate it")
    load = profile.get("load_average")
    if load is None or load <= max(cpus - threads, cpus / 2):
        return None
    return (f"the machine was busy while calibrating (load average {load:.1f} on {cpus} CPUs): the measured rates "
            "understate it")
