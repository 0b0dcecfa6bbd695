"""Issue 31, item 9: integer flags used to pass through a float — `infer --batch-size 99999999999999999` answered
for 100000000000000000, `train --seed 9007199254740993` trained seed ...992 (2^53 + 1 is no float), and
`infer --reserve 100GB` blamed the weights. References: Python's exact integers (int(text)), and the sizes
the command itself reports."""

from __future__ import annotations

import json
import os

import pytest

from trainledger import units
from trainledger.cli import main as cli_main
from trainledger.cli.common import nonnegative_int, positive_int


def run(argv, capsys):
    code = cli_main.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err.strip().splitlines()


@pytest.mark.parametrize("text, expected, reason", [
    ("99999999999999999", 99999999999999999, "17 nines: a float rounds it to 1e17"),
    ("9007199254740993", 2**53 + 1, "2^53 + 1: the first integer a float cannot hold"),
    ("4K", 4000, "SI suffix"),
    ("1.5K", 1500, "a fraction times a suffix, whole"),
    ("1e3", 1000, "scientific notation, whole"),
    ("1_024", 1024, "underscores"),
    ("9223372036854775807", 2**63 - 1, "the largest allowed"),
])
def test_integers_are_parsed_exactly(text, expected, reason):
    assert positive_int(text) == expected and nonnegative_int(text) == expected, reason


@pytest.mark.parametrize("text", ["1.5", "1e-3", "0.0005K", "9223372036854775808", "1e400", "1" * 500, "x", "-3"])
def test_fractions_and_huge_or_malformed_numbers_are_refused(text):
    import argparse
    with pytest.raises(argparse.ArgumentTypeError):
        positive_int(text)


def test_parse_integer_is_bounded_in_time_and_memory():
    """'1e999999999' would be a billion-digit integer: refused at once, not computed."""
    with pytest.raises(units.TrainledgerError):
        units.parse_integer("1e999999999")


def test_infer_answers_for_the_batch_size_given(capsys):
    code, out, _ = run(["infer", "--model", "llama-3-8b", "--batch-size", "99999999999999999", "--json"], capsys)
    assert code == 0 and json.loads(out)["batch_size"] == 99999999999999999


def test_train_trains_the_seed_given(token_file_small, tmp_path, capsys):
    out = tmp_path / "run"
    code, _, err = run(["train", "--data", str(token_file_small), "--steps", "1", "--seq-len", "16", "--batch-size",
                        "2", "--seed", "9007199254740993", "--out-dir", str(out), "--no-plot", "--quiet"], capsys)
    assert code == 0, err
    (manifest,) = (out / "checkpoints").glob("step_*/manifest.json")
    assert json.loads(manifest.read_text())["info"]["config"]["seed"] == 2**53 + 1


@pytest.mark.parametrize("threads", ["1000000", str(4 * (os.cpu_count() or 1) + 1)])
def test_train_threads_beyond_four_per_core_are_one_line(threads, tmp_path, capsys):
    code, _, err = run(["train", "--model", "tiny", "--threads", threads, "--out-dir", str(tmp_path)], capsys)
    assert code == 2 and len(err) == 1 and "--threads must be an integer in 1.." in err[0] and threads in err[0]


def test_infer_reserve_beyond_the_gpu_names_the_reserve(capsys):
    code, out, err = run(["infer", "--model", "llama-3-8b", "--reserve", "100GB", "--json"], capsys)
    result = json.loads(out)
    assert code == 0 and result["weights_bytes"] < 80e9 <= result["reserve_bytes"]
    (warning,) = [w for w in result["warnings"] if "--reserve" in w]
    assert "lower --reserve" in warning and "weights alone" not in warning


@pytest.fixture
def token_file_small(tmp_path):
    import numpy as np

    from trainledger.data import write_tokens
    path = tmp_path / "small.tokens"
    write_tokens(path, np.arange(4000, dtype=np.uint8) % 200, dtype="uint8")
    return path


@pytest.mark.parametrize("argv", [["generate", "RUN", "--prompt-ids", "1"], ["plan", "--simulate"], ["train"]],
                         ids=["generate", "plan", "train"])
@pytest.mark.parametrize("seed", [str(2**64), str(2**63)])
def test_a_seed_beyond_what_torch_takes_is_one_line(argv, seed, tmp_path, capsys):
    """2^64 made torch.Generator raise (exit 1); every --seed now names the range torch.manual_seed takes."""
    code, _, err = run([*argv, "--seed", seed, *(["--out-dir", str(tmp_path)] if argv == ["train"] else [])], capsys)
    assert code == 2 and len(err) == 1 and "--seed" in err[0] and "0..2^63-1" in err[0], err
