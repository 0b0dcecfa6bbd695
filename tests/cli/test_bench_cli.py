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


def test_table_bf16(capsys):
    status, out, _ = run(capsys, "bench", "--size", "64", "--dtype", "bf16", "--repeats", "1")
    assert status == 0 and "MFU" in out


def test_errors(capsys):
    status, _, err = run(capsys, "bench", "--dtype", "fp8")
    assert status == 2 and "--dtype" in err
    if not torch.cuda.is_available():
        status, _, err = run(capsys, "bench", "--device", "cuda")
        assert status == 2 and "cuda" in err
