"""`trainledger step`, `layout`, `plan --mfu auto`, `optimal --mfu auto`: JSON contract, defaults, one-line errors."""

import json

import pytest

from trainledger.cli import main as cli_main

STEP_KEYS = "step_seconds tokens_per_s mfu hfu model_flops_per_step hardware_flops_per_step breakdown bottleneck dp".split()
LAYOUT_KEYS = "tp sp pp interleave cp dp zero batch_size recompute step_seconds mfu memory_bytes".split()


def run_json(capsys, *argv):
    status = cli_main.main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert status == 0, err
    return json.loads(out)


def run_error(capsys, *argv):
    assert cli_main.main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1
    return err


def test_step_json_contract(capsys):
    data = run_json(capsys, "step", "--model", "gpt2", "--gpu", "h100", "--num-gpus", "8", "--global-batch-size", "64")
    assert all(key in data for key in STEP_KEYS)
    assert data["dp"] == 8 and data["micro_batches"] == 8            # micro-batch 1 per GPU, 64 sequences
    for part in ("compute", "attention", "memory_bound", "optimizer", "tp_comm", "dp_comm", "pp_comm", "cp_comm",
                 "pipeline_bubble"):
        assert part in data["breakdown"]
    assert sum(data["breakdown"].values()) == pytest.approx(data["step_seconds"])
    assert data["fits"] and data["assumptions"]


def test_step_table_prints(capsys):
    assert cli_main.main(["step", "--model", "tiny", "--gpu", "a100"]) == 0
    out = capsys.readouterr().out
    assert "step time" in out and "bottleneck" in out


def test_interconnect_flags_change_the_answer(capsys):
    argv = ["step", "--model", "llama-2-7b", "--num-gpus", "16", "--zero", "0", "--gpu", "h100"]
    base = run_json(capsys, *argv)
    slow = run_json(capsys, *argv, "--inter-node-bandwidth", "1GB/s")
    assert slow["breakdown"]["dp_comm"] > base["breakdown"]["dp_comm"]
    node16 = run_json(capsys, *argv, "--gpus-per-node", "16")
    assert all(c["link"] == "intra" for c in node16["collectives"])


@pytest.mark.parametrize("argv, flag", [
    (["step", "--model", "gpt2", "--num-gpus", "8", "--dp", "4"], "--dp"),
    (["step", "--model", "gpt2", "--num-gpus", "8", "--global-batch-size", "12"], "--global-batch-size"),
    (["step", "--model", "gpt2", "--tp", "5", "--num-gpus", "10"], "--tp"),
    (["step", "--model", "gpt2", "--attention-kernel", "magic"], "--attention-kernel"),
    (["step", "--model", "gpt2", "--gpu", "l4", "--num-gpus", "16", "--zero", "0"], "--inter-node-bandwidth"),
    (["step", "--model", "gpt2", "--intra-node-bandwidth", "fast"], "--intra-node-bandwidth"),
    (["layout", "--model", "llama-3.1-405b", "--gpu", "l4", "--num-gpus", "1"], "no layout"),
    (["plan", "--params", "7B", "--mfu", "auto"], "--mfu auto needs --model"),
    (["optimal", "--budget-flops", "1e22", "--mfu", "auto"], "--mfu auto"),
])
def test_errors_name_the_flag(capsys, argv, flag):
    assert flag in run_error(capsys, *argv)


def test_layout_json_contract(capsys):
    data = run_json(capsys, "layout", "--model", "gpt2", "--gpu", "h100", "--num-gpus", "8", "--global-batch-size", "64",
                    "--top", "3")
    assert len(data["layouts"]) == 3
    for layout in data["layouts"]:
        assert all(key in layout for key in LAYOUT_KEYS)
        assert layout["tp"] * layout["pp"] * layout["cp"] * layout["dp"] == 8
    assert [x["step_seconds"] for x in data["layouts"]] == sorted(x["step_seconds"] for x in data["layouts"])


def test_plan_mfu_auto_names_its_layout(capsys):
    data = run_json(capsys, "plan", "--model", "gpt2", "--tokens", "10B", "--num-gpus", "8", "--mfu", "auto")
    assert 0 < data["mfu"] < 1 and data["layout"]["mfu"] == data["mfu"]
    assert data["train_seconds"] == pytest.approx(data["train_flops"] / (8 * 989.5e12 * data["mfu"]))
    full = run_json(capsys, "plan", "--model", "gpt2", "--tokens", "10B", "--num-gpus", "8", "--mfu", "auto",
                    "--recompute", "full")
    assert full["layout"]["recompute"] == "full" and full["mfu"] < data["mfu"]
    assert full["hardware_flops_per_token"] > full["flops_per_token"]


def test_plan_without_flags_is_unchanged(capsys):
    data = run_json(capsys, "plan")
    assert data["mfu"] == 0.5 and "layout" not in data and data["train_days"] == pytest.approx(143.93, abs=0.005)


def test_optimal_mfu_auto(capsys):
    data = run_json(capsys, "optimal", "--num-gpus", "8", "--days", "1", "--mfu", "auto")
    assert 0 < data["mfu"] < 1 and data["layout"]["dp"] >= 1
    assert data["budget_flops"] == pytest.approx(8 * 86400 * 989.5e12 * data["mfu"])
