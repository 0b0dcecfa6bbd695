"""Extreme inputs found by fuzzing the web API: each is one line on stderr and exit status 2, never a crash."""

import pytest

from trainledger.cli import main as cli_main

LONG_NAME = "x" * 400


@pytest.mark.parametrize("argv, flag", [
    (["matmul", "--m", "1e308"], "--m"),                          # an int beyond int64 overflowed float math
    (["optimal", "--tokens-per-param", "1e308"], "--tokens-per-param"),  # N = sqrt(C / (6·r)) underflowed to 0
    (["params", "--model", LONG_NAME], "--model"),                # 'File name too long' from the file system
    (["plan", "--model", LONG_NAME], "--model"),
    (["memory", "--model", LONG_NAME], "--model"),
    (["tensor", "--shape", "9" * 400, "--json"], None),          # a 400-digit dimension
], ids=["matmul-1e308", "tokens-per-param-1e308", "params-long-name", "plan-long-name", "memory-long-name",
        "tensor-400-digits"])
def test_extreme_input_is_one_line_exit_2(argv, flag, capsys):
    assert cli_main.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1
    assert "unexpected" not in err
    if flag:
        assert flag in err


def test_tokens_per_param_inside_the_range_still_works(capsys):
    assert cli_main.main(["optimal", "--tokens-per-param", "5", "--budget-flops", "1e22", "--json"]) == 0
