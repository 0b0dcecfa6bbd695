"""Wall-clock time of `trainledger plan` as a whole process (interpreter start, parser, answer, table), median of N runs.

The planning commands must answer in well under 0.5 s: specs/ and account/ are pure Python and no
command module imports torch at module level. Measured side by side in one run with two baselines:
a bare interpreter (`python -c pass`) and `--json` output (no rich table).
Children run with bytecode caching on (PYTHONDONTWRITEBYTECODE removed from their environment, as for an
installed package; the untimed warm-up run writes the cache); `--no-bytecode-cache` measures the
cold case where every module is compiled from source on each start.

    .venv/bin/python benchmarks/bench_plan_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

TARGET_S = 0.5


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_process(argv: list[str], runs: int, env: dict) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds) of each of `runs` executions of `argv`, after one untimed warm-up run.

    CPU time (user + system of the child) barely moves when other jobs share the machine; wall time does.
    """
    subprocess.run(argv, capture_output=True, check=True, env=env)
    wall, cpu = [], []
    for _ in range(runs):
        cpu_start, start = _children_cpu_s(), time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True, env=env)
        wall.append(time.perf_counter() - start)
        cpu.append(_children_cpu_s() - cpu_start)
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--no-bytecode-cache", action="store_true", help="compile every module on every start")
    args = parser.parse_args()
    env = dict(os.environ)
    if args.no_bytecode_cache:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    script = shutil.which("trainledger") or str(__import__("pathlib").Path(sys.executable).with_name("trainledger"))
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "trainledger plan --json": [script, "plan", "--json"],
        "trainledger plan": [script, "plan"],
        "trainledger memory --model gpt2": [script, "memory", "--model", "gpt2", "--batch-size", "8"],
    }
    print(f"{'command':34} {'wall median':>11} {'wall min':>9} {'wall max':>9} {'CPU median':>11}   ({args.runs} runs each)")
    medians, cpus = {}, {}
    for label, argv in cases.items():
        wall, cpu = time_process(argv, args.runs, env)
        medians[label], cpus[label] = statistics.median(wall), statistics.median(cpu)
        print(f"{label:34} {medians[label]:10.3f}s {min(wall):8.3f}s {max(wall):8.3f}s {cpus[label]:10.3f}s")
    plan = medians["trainledger plan"]
    print(f"trainledger plan: {plan:.3f} s wall median ({cpus['trainledger plan']:.3f} s CPU), "
          f"{plan - medians['python -c pass']:.3f} s over a bare interpreter; "
          f"target < {TARGET_S} s: {'met' if plan < TARGET_S else 'MISSED'}; bytecode cache "
          f"{'off' if args.no_bytecode_cache else 'on'}; load average {os.getloadavg()[0]:.1f}")
    return 0 if plan < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
