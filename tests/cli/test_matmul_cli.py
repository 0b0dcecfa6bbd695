"""`trainledger matmul`: FLOPs and roofline time per GPU and dtype; flag errors exit 2 with one line."""

import json

import pytest

from trainledger.cli.main import main


def run_json(capsys, *argv):
    assert main(["matmul", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_defaults_are_the_lecture_sizes(capsys):
    result = run_json(capsys)
    assert (result["m"], result["k"], result["n"]) == (16384, 32768, 8192)
    assert result["flops"] == 2 * 16384 * 32768 * 8192
    h100 = {r["dtype"]: r for r in result["results"] if r["gpu"] == "h100-sxm"}
    assert h100["bf16"]["ideal_time_s"] == pytest.approx(result["flops"] / 989.5e12)
    assert set(h100) == {"fp32", "bf16", "fp8-e4m3"}


def test_chosen_gpus_and_dtypes(capsys):
    result = run_json(capsys, "--m", "1", "--k", "4096", "--n", "4096", "--gpu", "h100,a100", "--dtype", "bf16",
                      "--dtype", "fp32")
    assert {(r["gpu"], r["dtype"]) for r in result["results"]} == {
        ("h100-sxm", "bf16"), ("h100-sxm", "fp32"), ("a100-80gb", "bf16"), ("a100-80gb", "fp32")}
    assert all(r["bound"] == "memory" for r in result["results"])


def test_table(capsys):
    assert main(["matmul", "--gpu", "h100"]) == 0
    out = capsys.readouterr().out
    assert "8.80e12" in out and "h100-sxm" in out and "ms" in out


@pytest.mark.parametrize("argv, fragment", [
    (["--gpu", "h1000"], "--gpu"),
    (["--dtype", "fp7"], "--dtype"),
    (["--m", "0"], "--m"),
    (["--k", "abc"], "--k"),
    (["--n", "1e400"], "--n"),
    (["--n", "-8"], "--n"),
    (["--m", "1.5"], "--m"),
    (["--gpu", "a100", "--dtype", "fp8"], "--dtype"),
    (["--gpu", ""], "--gpu"),
    (["--gpu", ","], "--gpu"),
    (["--dtype", ""], "--dtype"),
])
def test_bad_input(capsys, argv, fragment):
    assert main(["matmul", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and fragment in captured.err
