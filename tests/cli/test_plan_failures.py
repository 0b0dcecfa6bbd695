"""`trainledger plan` with failures (issue 12): MTBF, checkpoint interval, goodput, and --simulate beside them."""

import json
import math

import pytest

from trainledger.cli import main as cli_main

KEYS = ("mtbf_seconds checkpoint_seconds restart_seconds checkpoint_interval_seconds goodput expected_interruptions "
        "train_seconds_with_failures").split()
LLAMA3 = ["plan", "--params", "405B", "--tokens", "15.6T", "--gpu", "h100", "--num-gpus", "16384", "--mfu", "0.4"]


def run_json(capsys, *argv):
    assert cli_main.main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_llama3_scale_done_when(capsys):
    data = run_json(capsys, *LLAMA3, "--simulate")
    assert all(key in data for key in KEYS)
    # Llama 3 (arXiv:2407.21783): 419 unexpected interruptions in 54 days on 16,384 GPUs -> one every ~3.1 h
    assert data["mtbf_seconds"] == pytest.approx(54 * 86400 / 419, rel=1e-9)
    assert data["mtbf_seconds"] / 3600 == pytest.approx(3.1, abs=0.05)
    young = math.sqrt(2 * data["checkpoint_seconds"] * data["mtbf_seconds"])   # Young 1974
    assert data["checkpoint_interval_seconds"] == pytest.approx(young, rel=0.15)
    assert data["simulation"]["goodput"] == pytest.approx(data["goodput"], abs=0.03)
    # checkpoint = amp-bf16 weights (4 B) + AdamW's two fp32 states (8 B) per parameter
    assert data["checkpoint_bytes"] == pytest.approx(405e9 * 12)
    assert data["train_seconds_with_failures"] == pytest.approx(data["train_seconds"] / data["goodput"])
    assert data["expected_interruptions"] == pytest.approx(data["train_seconds_with_failures"] / data["mtbf_seconds"])


def test_fewer_gpus_give_a_longer_mtbf(capsys):
    big = run_json(capsys, *LLAMA3)
    small = run_json(capsys, *LLAMA3[:-4], "--num-gpus", "1024", "--mfu", "0.4")
    assert small["mtbf_seconds"] == pytest.approx(16 * big["mtbf_seconds"])


def test_overrides_change_what_they_should(capsys):
    base = run_json(capsys, *LLAMA3)
    slow = run_json(capsys, *LLAMA3, "--checkpoint-bandwidth", "100MB/s")
    assert slow["checkpoint_seconds"] == pytest.approx(405e9 * 12 / (100e6 * 2048))
    assert slow["goodput"] < base["goodput"] and slow["checkpoint_interval_seconds"] > base["checkpoint_interval_seconds"]
    rare = run_json(capsys, *LLAMA3, "--failures-per-gpu-day", "1e-5")
    assert rare["mtbf_seconds"] == pytest.approx(86400 / (1e-5 * 16384)) and rare["goodput"] > base["goodput"]
    quick = run_json(capsys, *LLAMA3, "--restart", "30s")
    assert quick["restart_seconds"] == 30 and quick["goodput"] > base["goodput"]
    mixed = run_json(capsys, *LLAMA3, "--precision", "mixed-bf16")
    assert mixed["checkpoint_bytes"] == pytest.approx(405e9 * 14)            # + the bf16 working copy


def test_model_checkpoint_comes_from_the_memory_accounting(capsys):
    plan = run_json(capsys, "plan", "--model", "llama-2-7b", "--tokens", "2T", "--num-gpus", "64")
    memory = run_json(capsys, "memory", "--model", "llama-2-7b")
    assert plan["checkpoint_bytes"] == pytest.approx(memory["params_bytes"] + memory["master_params_bytes"]
                                                     + memory["optimizer_bytes"])


@pytest.mark.parametrize("flag, value", [
    ("--failures-per-gpu-day", "0"), ("--failures-per-gpu-day", "-1e-4"), ("--failures-per-gpu-day", "abc"),
    ("--checkpoint-bandwidth", "0GB/s"), ("--checkpoint-bandwidth", "-1GB/s"), ("--restart", "-5min"),
    ("--trials", "0"),
])
def test_bad_rates_exit_2_with_one_line(capsys, flag, value):
    assert cli_main.main(["plan", flag, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1 and flag in err


def test_table_shows_the_failure_rows(capsys):
    assert cli_main.main([*LLAMA3, "--simulate", "--trials", "5"]) == 0
    out = capsys.readouterr().out
    for words in ("interruptions: one every", "3.1 h", "checkpoint every", "goodput", "time with failures", "simulated (5 runs)"):
        assert words in out
