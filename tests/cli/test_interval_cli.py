"""Every time answer carries its error bar (issue 27): `step`, `layout`, `plan --mfu auto` print the range the most
similar published runs were off by and give it as JSON; `--framework torchtitan` reserves as torchtitan runs."""

import json

import pytest

from trainledger.account.validation.interval import step_interval
from trainledger.cli import main as cli_main

INTERVAL_KEYS = "step_seconds_low step_seconds_high tokens_per_s_low tokens_per_s_high interval_rows".split()
TORCHTITAN_13B = ["step", "--model", "llama-2-13b", "--gpu", "a100-80gb", "--num-gpus", "64", "--framework",
                  "torchtitan", "--batch-size", "2", "--global-batch-size", "128", "--seq-len", "4096",
                  "--recompute", "none"]


def run_json(capsys, *argv):
    status = cli_main.main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert status == 0, err
    return json.loads(out)


def test_step_json_interval(capsys):
    data = run_json(capsys, *TORCHTITAN_13B)
    assert all(key in data for key in INTERVAL_KEYS)
    expected = step_interval(data["step_seconds"], data["tokens_per_step"], "torchtitan", "a100-80gb", 64)
    assert data["step_seconds_low"] == pytest.approx(expected["step_seconds_low"])
    assert data["step_seconds_low"] <= data["step_seconds"] * 1.01 and data["step_seconds_high"] > data["step_seconds"]
    assert data["tokens_per_s_low"] == pytest.approx(data["tokens_per_step"] / data["step_seconds_high"])
    assert data["interval_rows"] == 8              # torchtitan's 8 A100 rows (64 GPUs, eager PyTorch)


def test_step_table_prints_interval(capsys):
    assert cli_main.main(TORCHTITAN_13B) == 0
    out = capsys.readouterr().out
    assert "runs like this one took" in out and "(8 published runs, 1 source)" in out and "expect" in out


def test_torchtitan_llama2_13b_without_ac_fits(capsys):
    """torchtitan's Llama 2 13B run without activation checkpointing (batch 2, seq 4096, 64 A100) ran: its launcher
    sets expandable_segments:True, so the reserve is the CUDA context and cuBLAS workspaces only, no allocator cache."""
    from trainledger.account.memory.per_gpu import cuda_reserve_bytes
    data = run_json(capsys, *TORCHTITAN_13B)
    assert data["reserve_bytes"] == pytest.approx(cuda_reserve_bytes(0.0, expandable_segments=True)["total"])
    assert data["fits"]
    other = run_json(capsys, *[a if a != "torchtitan" else "trainledger" for a in TORCHTITAN_13B])
    assert other["reserve_bytes"] > data["reserve_bytes"]          # the default keeps 10 % of the peak back
    explicit = run_json(capsys, *TORCHTITAN_13B, "--reserve", "2GiB")
    assert explicit["reserve_bytes"] == 2 * 2**30


def test_layout_json_interval(capsys):
    data = run_json(capsys, "layout", "--model", "gpt2", "--gpu", "h100", "--num-gpus", "16", "--top", "2")
    for layout in data["layouts"]:
        assert all(key in layout for key in INTERVAL_KEYS)
        assert layout["step_seconds_low"] < layout["step_seconds_high"]
    assert data["step_seconds_low"] == data["layouts"][0]["step_seconds_low"]


def test_plan_mfu_auto_interval(capsys):
    data = run_json(capsys, "plan", "--model", "gpt2", "--gpu", "h100", "--num-gpus", "16", "--mfu", "auto",
                    "--tokens", "1e9")
    assert all(key in data for key in INTERVAL_KEYS)
    scale = data["train_seconds"] / data["layout"]["step_seconds"]
    assert data["train_seconds_low"] == pytest.approx(data["step_seconds_low"] * scale)
    assert data["train_seconds_high"] == pytest.approx(data["step_seconds_high"] * scale)


def test_no_published_run_near_widens_and_says_so(capsys):
    data = run_json(capsys, "step", "--model", "gpt2", "--gpu", "b200", "--num-gpus", "8")
    assert "no published run this near" in data["interval_words"]
    assert data["interval_rows"] >= 20


def test_optimal_mfu_auto_interval(capsys):
    """`optimal --mfu auto` carries the error bar of its layout's step: a step s/(1 + e) runs at MFU·(1 + e), so the
    budget of the same GPUs × days and the compute-optimal size follow from each end of the step's range."""
    from trainledger.account.planning.plan import compute_optimal
    data = run_json(capsys, "optimal", "--num-gpus", "8", "--days", "1", "--mfu", "auto")
    assert all(key in data for key in INTERVAL_KEYS)
    step = data["layout"]["step_seconds"]
    expected = step_interval(step, 8 * 2048, "trainledger", data["gpu"], 8)
    assert data["step_seconds_low"] == pytest.approx(expected["step_seconds_low"])
    assert data["interval_rows"] == expected["interval_rows"]
    assert data["mfu_low"] == pytest.approx(data["mfu"] * step / data["step_seconds_high"])
    assert data["mfu_high"] == pytest.approx(data["mfu"] * step / data["step_seconds_low"])
    assert data["budget_flops_low"] == pytest.approx(data["budget_flops"] * data["mfu_low"] / data["mfu"])
    assert data["n_params_low"] == pytest.approx(compute_optimal(data["budget_flops_low"])["n_params"])
    assert data["n_params_low"] < data["n_params_high"] and data["n_tokens_low"] < data["n_tokens_high"]
    assert cli_main.main(["optimal", "--num-gpus", "8", "--days", "1", "--mfu", "auto"]) == 0
    assert "published" in capsys.readouterr().out


def test_optimal_with_a_given_mfu_has_no_interval(capsys):
    data = run_json(capsys, "optimal", "--num-gpus", "8", "--days", "1", "--mfu", "0.4")
    assert "step_seconds_low" not in data and "n_params_low" not in data


def test_an_moe_step_says_its_range_comes_from_published_moe_runs(capsys):
    """`step` for Qwen3-30B-A3B on 16 H100 (EP 16, Megatron): the range of the published MoE runs like it, which
    all took longer than predicted; a dense model on the same GPUs keeps the dense runs' range."""
    argv = ["--gpu", "h100", "--num-gpus", "16", "--global-batch-size", "64", "--seq-len", "4096", "--framework",
            "megatron", "--precision", "mixed-bf16", "--zero", "1"]
    moe = run_json(capsys, "step", "--model", "qwen3-30b-a3b", "--ep", "16", *argv)
    assert moe["interval_basis"].startswith("published MoE runs") and moe["interval_rows"] >= 3
    assert moe["step_seconds_high"] > 1.5 * moe["step_seconds"]
    dense = run_json(capsys, "step", "--model", "llama-3-8b", *argv)
    assert not dense["interval_basis"].startswith("published MoE runs")
