"""Helpers of the calibration and profile tests (importable: conftest.py puts this folder on sys.path)."""

import torch


def synthetic_profile(**changes) -> dict:
    """A valid profile with round numbers (not a measurement): 100 GFLOP/s stated peak, rates below it."""
    profile = {
        "format": "trainledger-calibration", "version": 1, "device": "cpu", "device_name": "Test CPU",
        "host": "test", "torch_version": torch.__version__, "threads": 1, "created_utc": "2026-01-01T00:00:00Z",
        "calibration_seconds": 1.0, "peak_flops_per_s": {"fp32": 100e9}, "peak_source": "fp32 stated for the test",
        "gemm": {"fp32": [[128, 128, 128, 20e9], [1024, 1024, 1024, 80e9], [1024, 32, 32, 5e9]]},
        "memory": [[1e6, 100e9], [1e3, 10e9], [1e9, 10e9]],
        "attention": {"dtype": "fp32", "head_dim": 64, "heads": 8, "points": [[128, 10e9, 5e9], [1024, 40e9, 30e9]]},
        "op_overhead_seconds": 2e-6, "memory_bytes": 16e9,
    }
    profile.update(changes)
    return profile
