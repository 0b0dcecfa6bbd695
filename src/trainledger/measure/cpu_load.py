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


def busy_during(others_cpus: float | None, cpu_count: int, threads: int) -> bool:
    """Whether other processes left fewer CPUs idle than a measurement's `threads` needed (TOLERANCE_CPUS
    aside): its threads then waited for CPUs, and its wall times count what the others took. False when
    `others_cpus` could not be read (None)."""
    return others_cpus is not None and cpu_count - others_cpus < min(threads, cpu_count) - TOLERANCE_CPUS


def busy_warning(profile: dict) -> str | None:
    """A warning when other processes kept the machine busy during calibration, so that fewer CPUs were free than
    its threads (one on CUDA, for the CPU side): the rates then understate the machine, and a thread descheduled
    inside a parallel op stalls the others. Measured from `others_cpus` when recorded, else from the 1-minute
    load average when the calibration started (older profiles)."""
    cpus, threads = profile.get("cpu_count") or 1, profile.get("threads") or 1
    others = profile.get("others_cpus")
    if others is not None:
        if not busy_during(others, cpus, threads):
            return None
        return (f"the machine was busy while calibrating (other processes used {others:.1f} of {cpus} CPUs, "
                f"{threads} needed): the measured rates understate it")
    load = profile.get("load_average")
    if load is None or load <= max(cpus - threads, cpus / 2):
        return None
    return (f"the machine was busy while calibrating (load average {load:.1f} on {cpus} CPUs): the measured rates "
            "understate it")


def is_busy(profile: dict) -> bool:
    """Whether calibration `profile` was measured while other processes kept the machine busy: its `busy` flag
    (written by measure.calibrate.calibrate), or, for a profile from before the flag, busy_warning's reading."""
    return profile.get("busy") is True or busy_warning(profile) is not None


def machine_idle_now(profile: dict) -> bool:
    """Whether other processes now leave free the CPUs that calibration `profile` used (its threads): a reading
    over MIN_WINDOW_S (half a second); False when /proc/stat cannot be read (then a busy profile stays)."""
    meter = OthersCpu()
    time.sleep(MIN_WINDOW_S)
    others = meter.cpus()
    return others is not None and not busy_during(others, os.cpu_count() or 1, profile.get("threads") or 1)


# --- how many threads a run should take ---------------------------------------------------------------------
MIN_WINDOW_S = 0.5      # /proc/stat counts in 10 ms ticks: half a second resolves 0.02 CPU per core of 2


def pick_threads(cpu_count: int, others_cpus: float, max_threads: int) -> int:
    """Intra-op threads for the CPUs that other processes leave idle: ⌊cpu_count − others_cpus + TOLERANCE_CPUS⌋,
    at least 1 and at most `max_threads` (torch's default, one per physical core).

    A parallel op waits for its slowest thread, so a thread that has to share its CPU with another process
    stalls all the others: on 2 cores at load 3.5, 2 threads trained at 2.5K tokens/s and 1 thread at 9.5K
    (issue 31). So threads take only the CPUs that are idle, and a CPU counts as idle when others use less
    than TOLERANCE_CPUS of it."""
    idle_cpus = cpu_count - max(0.0, others_cpus)
    return max(1, min(max_threads, int(idle_cpus + TOLERANCE_CPUS)))


def choose_threads(max_threads: int, meter: OthersCpu | None = None, environ=None,
                   ranks_here: int = 1) -> tuple[int, str]:
    """(threads, the line that says why) for a run given no --threads; `ranks_here` processes of the run on this
    machine (torchrun's LOCAL_WORLD_SIZE) share the idle CPUs.

    OMP_NUM_THREADS set (torchrun sets it to 1 for each of several ranks): torch already follows it, so
    `max_threads`. Else the CPUs other processes used since `meter` started (this process's own CPU time left
    out; at least MIN_WINDOW_S, waiting out the rest), or, without /proc/stat, the 1-minute load average
    (which lags, and counts this process: a conservative stand-in)."""
    environ = os.environ if environ is None else environ
    if environ.get("OMP_NUM_THREADS"):
        return max_threads, f"threads: {max_threads} (OMP_NUM_THREADS={environ['OMP_NUM_THREADS']}; --threads N to choose)"
    cpu_count = os.cpu_count() or 1
    meter = meter or OthersCpu()
    time.sleep(max(0.0, MIN_WINDOW_S - (time.monotonic() - meter.wall)))
    others, wall = meter.cpus(), time.monotonic() - meter.wall
    if others is not None:
        how = f"other processes used {others:.1f} over the last {wall:.1f} s"
    else:
        others = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        how = f"load average {others:.1f}"
    threads = max(1, pick_threads(cpu_count, others, max_threads) // max(1, ranks_here))
    idle = max(0.0, cpu_count - others)
    shared = f", shared by {ranks_here} ranks" if ranks_here > 1 else ""
    return threads, f"threads: {threads} ({idle:.1f} of {cpu_count} CPUs idle{shared}: {how}; --threads N to choose)"


# --- --threads of the commands that run torch on this CPU (train, profile, generate, bench) ------------------
THREADS_PER_CORE = 4    # torch.set_num_threads(10**6) crashed torch (SIGSEGV); beyond a few per core only slows


def most_threads() -> int:
    """The most --threads a command takes: THREADS_PER_CORE per core of this machine."""
    return THREADS_PER_CORE * (os.cpu_count() or 1)


def check_threads(threads: int) -> int:
    """`threads` if it is in 1..most_threads(), else the one-line error naming --threads (as train's)."""
    if not 0 < threads <= most_threads():
        from trainledger.errors import TrainledgerError
        raise TrainledgerError(f"--threads must be an integer in 1..{most_threads()} ({THREADS_PER_CORE} × the "
                               f"{os.cpu_count()} cores here: more threads than cores only slow a step), got {threads}",
                               "--threads")
    return threads


def set_threads(threads: int | None, device: str = "cpu", meter: OthersCpu | None = None) -> str | None:
    """Sets torch's intra-op threads for a command that runs on `device`, as `train` does: `threads` when given
    (--threads, checked by check_threads), else choose_threads over the CPUs other processes leave idle since
    `meter` started (start it before torch is imported: the import is the window). Returns choose_threads' line
    (None when --threads was given, or on CUDA, where one thread launches the kernels and torch's are left)."""
    import torch

    if threads is not None:
        check_threads(threads)
        if device == "cpu":
            torch.set_num_threads(threads)
        return None
    if device != "cpu":
        return None
    chosen, line = choose_threads(torch.get_num_threads(), meter)
    torch.set_num_threads(chosen)
    return line
