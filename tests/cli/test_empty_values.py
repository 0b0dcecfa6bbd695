"""Issue 40, item 3: `--flag=--` and empty values refused by the shared parser; decimal commas refused.

argparse drops the `--` of `--tokens=--` and hands the flag [] without calling its type: HTTP 500 on eight API
endpoints, exit 1 "unexpected TypeError" on 18 CLI flags, and `tensor --shape=--` answered a scalar with exit 0.
A decimal comma was read as a thousands separator: `plan --tokens 1,5T` was 15T, `--memory-per-gpu 0,5` 5 bytes,
`--dp 1,5` 15, `1,,0` 10.

Reference: every option of every subcommand, from the parser itself (so a flag added later is covered).
"""

from __future__ import annotations

import argparse
import json

import pytest

from trainledger import units
from trainledger.cli.main import build_parser, main
from trainledger.errors import TrainledgerError


def _value_options():
    """(command, flag) for every option of every subcommand that takes a value."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command, subparser in sub.choices.items():
        for action in subparser._actions:
            if action.option_strings and action.nargs != 0 and not isinstance(action, argparse._HelpAction):
                yield command, next(o for o in action.option_strings if o.startswith("--"))


OPTIONS = list(_value_options())


def _one_line_exit_2(capsys, argv) -> str:
    status = main(argv)
    out, err = capsys.readouterr()
    assert status == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1, (argv, status, err)
    return err


def test_there_are_many_options_to_check():
    assert len(OPTIONS) > 200 and {"plan", "train", "tensor", "serve", "generate"} <= {c for c, _ in OPTIONS}


@pytest.mark.parametrize("command,flag", OPTIONS, ids=[f"{c} {f}" for c, f in OPTIONS])
def test_a_lone_double_dash_as_a_value_is_one_line(capsys, command, flag):
    err = _one_line_exit_2(capsys, [command, f"{flag}=--"])
    assert f"argument {flag}: expected a value, got '--'" in err


EMPTY = [option for option in OPTIONS if option != ("generate", "--prompt")]   # its own line: test_the_prompt_...


@pytest.mark.parametrize("command,flag", EMPTY, ids=[f"{c} {f}" for c, f in EMPTY])
def test_an_empty_value_is_one_line(capsys, command, flag):
    err = _one_line_exit_2(capsys, [command, f"{flag}="])
    assert flag in err and "empty" in err


def test_tensor_shape_double_dash_is_no_scalar(capsys):
    err = _one_line_exit_2(capsys, ["tensor", "--shape=--", "--json"])
    assert "--shape" in err


def test_empty_positionals_are_refused(capsys, tmp_path):
    for argv in (["tokenize", "", str(tmp_path / "x.tokens")], ["checkpoints", ""], ["export", "", str(tmp_path)]):
        err = _one_line_exit_2(capsys, argv)
        assert "must not be empty" in err
    assert not (tmp_path / "x.tokens").exists()


def test_the_prompt_keeps_its_own_message():
    """`generate --prompt ''` is refused by generate itself ("the prompt is empty": tests/train/test_generate.py)."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    prompt = next(a for a in sub.choices["generate"]._actions if "--prompt" in a.option_strings)
    assert prompt.own_empty_check and sub.choices["generate"].parse_args(["run", "--prompt", ""]).prompt == ""


def test_a_double_dash_before_positionals_still_works(capsys, tmp_path):
    """`--` still ends the flags (the web API passes positionals after it)."""
    text = tmp_path / "in.txt"
    text.write_text("hello world\n" * 10)
    assert main(["tokenize", "--json", "--", str(text), str(tmp_path / "out.tokens")]) == 0
    assert json.loads(capsys.readouterr().out)["n_tokens"] == 120


@pytest.mark.parametrize("text", ["1,5T", "0,5", "1,5", "1,,0", "1,024,5", "12,34", ",5", "1,0000"])
def test_decimal_commas_are_refused(text):
    for parse in (units.parse_count, units.parse_bytes, units.parse_seconds, units.parse_integer):
        with pytest.raises(TrainledgerError, match="comma only separates thousands"):
            parse(text, "--x")


@pytest.mark.parametrize("text,value", [("1,024", 1024), ("15,000,000", 15_000_000), ("1,000K", 1_000_000),
                                        ("1,234.5", 1234.5), ("1_000", 1000)])
def test_thousands_groups_still_parse(text, value):
    assert units.parse_count(text) == value


@pytest.mark.parametrize("argv,flag", [(["plan", "--tokens", "1,5T"], "--tokens"),
                                       (["fit", "--memory-per-gpu", "0,5"], "--memory-per-gpu"),
                                       (["memory", "--model", "gpt2", "--dp", "1,5"], "--dp"),
                                       (["plan", "--tokens", "1,,0"], "--tokens")])
def test_the_issues_commas_are_exit_2(capsys, argv, flag):
    err = _one_line_exit_2(capsys, argv)
    assert flag in err
