"""`trainledger tensor`: the lecture's GPT-3 FFN matrix, views, the --torch cross-check, and one-line errors."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainledger.cli import main as cli_main


def _json(capsys, *argv):
    assert cli_main.main(["tensor", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_default_is_the_lecture_gpt3_ffn_matrix(capsys):
    result = _json(capsys)
    # CS336 Lecture 2 (facts.md): [49152, 12288] fp32 = 2,415,919,104 bytes
    assert result["shape"] == [49152, 12288] and result["dtype"] == "fp32"
    assert result["storage_bytes"] == 2_415_919_104 and result["view_bytes"] == result["bytes"] == 2_415_919_104
    assert result["stride"] == [12288, 1] and result["contiguous"] is True


def test_transpose_and_slice(capsys):
    result = _json(capsys, "--shape", "49152,12288", "--dtype", "bf16", "--transpose", "0,1", "--slice", "0:100,::2")
    assert result["expression"] == "x.transpose(0, 1)[0:100, ::2]"
    assert result["view_shape"] == [100, 24576]
    assert result["stride"] == [1, 24576] and result["stride_bytes"] == [2, 49152]
    assert result["view_bytes"] == 100 * 24576 * 2 and result["storage_bytes"] == 2_415_919_104 // 2
    assert result["contiguous"] is False and result["view_flat_possible"] is False


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_torch_confirms_the_layout(capsys, device):
    result = _json(capsys, "--shape", "3,4", "--slice", ":,1", "--torch", "--device", device)
    assert result["torch_agrees"] is True
    assert result["torch"]["stride"] == [4] and result["torch"]["storage_offset"] == 1
    assert result["torch"]["contiguous_copies"] is True and result["torch"]["reshape_copies"] is False


def test_table_output(capsys):
    assert cli_main.main(["tensor", "--shape", "2,3", "--transpose", "0,1"]) == 0
    out = capsys.readouterr().out
    assert "x.transpose(0, 1)" in out and "contiguous" in out


@pytest.mark.parametrize("argv, flag", [
    (["--shape", "3,a"], "--shape"),
    (["--transpose", "0"], "--transpose"),
    (["--shape", "2,3", "--transpose", "0,5"], "--transpose"),
    (["--slice", "::-1"], "--slice"),
    (["--slice", "1:2:3:4"], "--slice"),
    (["--dtype", "fp33"], "--dtype"),
    (["--dtype", "int4", "--torch"], "--dtype"),
    (["--torch", "--device", "cpu"], "--device meta"),                  # 2.4 GB for real: refused
    (["--shape", "3,4", "--torch", "--device", "foo"], "--device"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, flag):
    assert cli_main.main(["tensor", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1 and flag in err


VALUES = ["0", "1", "-1", "3,4", "49152,12288", "2,3,4", "0,1", "1,0", "0,5", "a", "", ":", "::2", "1:3", "::-1", "5,:",
          ":,1", "1e400", "99999999999999999999,2", "3x4", "1:2:3:4", "0,0", "-1,-2", "fp32", "bf16", "int4", "fp8", "x"]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flags=st.dictionaries(st.sampled_from(["--shape", "--dtype", "--transpose", "--slice", "--device"]),
                             st.sampled_from(VALUES + ["meta", "cpu", "cuda", "cuda:0", "mps", "auto", "foo"]), max_size=4),
       use_torch=st.booleans(), as_json=st.booleans())
def test_fuzzed_flags_exit_0_or_2_in_one_line(flags, use_torch, as_json):
    argv = ["tensor", *[part for flag, value in flags.items() for part in (flag, value)]]
    argv += ["--torch"] * use_torch + ["--json"] * as_json
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli_main.main(argv)
    assert status in (0, 2), (argv, err.getvalue())
    if status == 2:
        assert err.getvalue().startswith("error:") and err.getvalue().count("\n") == 1
