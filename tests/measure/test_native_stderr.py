"""Kineto's trace-point lines are dropped from file descriptor 2; everything else written there is kept, in order."""

from __future__ import annotations

import subprocess
import sys

CHILD = r'''
import os, sys
from trainledger.measure.native_stderr import dropping_native_lines
with dropping_native_lines():
    os.write(2, b"USDT:2026-11-26 21:27:54 29763:29763 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
    os.write(2, b"warning: kept 1\n")
    print("warning: kept 2 (python)", file=sys.stderr)
    os.write(2, b"USDT:2026-11-26 21:27:54 29763:29763 SyncActivityProfilerHandler.cpp:59] profiler_stop\n")
    os.write(2, b"USDT: something else is kept\n")
os.write(2, b"after\n")
'''


def test_trace_points_dropped_the_rest_kept_in_order():
    result = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True)
    assert result.stderr.splitlines() == ["warning: kept 1", "warning: kept 2 (python)",
                                          "USDT: something else is kept", "after"]


def test_a_real_profile_prints_no_trace_points():
    code = ("import torch\nfrom trainledger.measure.native_stderr import dropping_native_lines\n"
            "with dropping_native_lines(), torch.profiler.profile():\n    torch.ones(3) + 1\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "profiler_start" not in result.stderr and "profiler_stop" not in result.stderr
