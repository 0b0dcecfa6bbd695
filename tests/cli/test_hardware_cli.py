"""`trainledger hardware`: a JSON list of records in base units, and the tables."""

import json

import pytest

from trainledger.cli.main import main


def test_json_records(capsys):
    assert main(["hardware", "--json"]) == 0
    records = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    h100 = records["h100-sxm"]
    assert h100["peak_flops_per_s"]["bf16"] == pytest.approx(989.5e12)
    # the capacity CUDA reports (79.18 GiB, the recorded H100's totalGlobalMem) beside the datasheet's 80 GB
    assert h100["memory_bytes"] == 85017493504 and h100["datasheet_memory_bytes"] == 80e9
    assert "totalGlobalMem" in h100["memory_source"] and h100["memory_bandwidth_bytes_per_s"] == pytest.approx(3.35e12)
    assert "h100" in h100["aliases"] and h100["source"]
    assert "fp8" not in records["a100-80gb"]["peak_flops_per_s"]
    assert records["tpu-v4"]["memory_bytes"] == 32 * 2**30


def test_table(capsys):
    assert main(["hardware"]) == 0
    out = capsys.readouterr().out
    assert "989.5" in out and "3350 GB/s" in out and "mi300x" in out
    h100_row = next(line for line in out.splitlines() if line.strip().startswith("h100-sxm ") and "GB/s" in line)
    assert "79.2 GiB" in h100_row and "80 GB" in h100_row          # reported capacity beside the datasheet figure
