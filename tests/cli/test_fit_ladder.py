"""`fit --model M --gpu G --seq-len T --batch-size B`: the fine-tuning ladder (account/planning/ladder.py).

Each rung's `run` is a run file document: `memory --config` and `step --config` of it answer the rung's own numbers.
The issue-38 target (full bf16 AdamW does not fit one RTX 4090 at batch 2 × 2048; some rung does) needs the
fine-tuning memory accounting (account/memory: LoRA's frozen base, NF4, the levers) and fails before it is in.
"""

import json

import pytest

from trainledger.cli import main as cli_main

LADDER = ["fit", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--seq-len", "2048", "--batch-size", "2"]
ORDER = ["full", "checkpointing", "chunked_loss", "optimizer_in_backward", "activation_offload", "adamw_8bit",
         "lora", "qlora"]


def run_json(capsys, *argv):
    assert cli_main.main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def ladder_4090():
    from trainledger.cli.common import json_ready
    return json.loads(json.dumps(json_ready(cli_main.compute(LADDER))))


def test_ladder_rungs_in_order_on_the_gpu_you_have(ladder_4090):
    """One GPU unless --num-gpus is given; the rungs in torchtune's order, each priced or refused with a reason."""
    result = ladder_4090
    assert [r["key"] for r in result["ladder"]] == ORDER
    assert result["num_gpus"] == 1 and result["ladder_num_gpus"] == 1
    for rung in result["ladder"]:
        if rung["error"] is None:
            assert rung["peak_bytes"] > 0 and rung["tokens_per_s"] > 0
            assert rung["required_bytes"] == pytest.approx(rung["peak_bytes"] + rung["reserve_bytes"])
            assert rung["fits"] == (rung["required_bytes"] <= result["memory_per_gpu_bytes"])
    settings = {r["key"]: r["settings"] for r in result["ladder"]}
    assert settings["full"]["precision"] == "bf16" and settings["full"]["optimizer"] == "adamw"
    assert settings["chunked_loss"]["chunked_loss"] == 8 and settings["chunked_loss"]["recompute"] == "full"
    assert settings["adamw_8bit"]["optimizer_in_backward"] and settings["adamw_8bit"]["activation_offload"]
    assert settings["lora"]["method"] == "lora" and not settings["lora"]["optimizer_in_backward"]
    assert settings["lora"]["lora_targets"] == "q,v,o,gate,up,down" and settings["lora"]["lora_rank"] == 8
    assert settings["qlora"]["method"] == "qlora"


def test_fastest_fitting_is_the_fastest_of_those_that_fit(ladder_4090):
    fitting = [r for r in ladder_4090["ladder"] if r["fits"]]
    if fitting:
        assert ladder_4090["fastest_fitting"] == max(fitting, key=lambda r: r["tokens_per_s"])["key"]
    else:
        assert ladder_4090["fastest_fitting"] is None


@pytest.mark.parametrize("key", ["full", "adamw_8bit", "qlora"])
def test_each_rung_run_is_what_memory_and_step_config_answer(ladder_4090, key, tmp_path, capsys):
    rung = next(r for r in ladder_4090["ladder"] if r["key"] == key)
    path = tmp_path / "rung.json"
    path.write_text(json.dumps(rung["run"]))
    memory = run_json(capsys, "memory", "--config", str(path))
    assert memory["peak_bytes"] == pytest.approx(rung["peak_bytes"], rel=1e-9)
    step = run_json(capsys, "step", "--config", str(path))
    assert step["tokens_per_s"] == pytest.approx(rung["tokens_per_s"], rel=1e-9)


def test_issue_38_target_full_bf16_does_not_fit_a_4090_and_a_rung_does(ladder_4090):
    """Issue 38, done when: full bf16 with AdamW does not fit one RTX 4090 at batch 2 × 2048; the ladder names a
    rung that fits (torchtune runs LoRA at 16.2 GiB and QLoRA at 7.4 GiB peak there, README "Memory and training
    speed"). Needs the fine-tuning memory accounting."""
    by_key = {r["key"]: r for r in ladder_4090["ladder"]}
    assert by_key["full"]["fits"] is False
    assert ladder_4090["fastest_fitting"] is not None
    assert by_key["qlora"]["fits"] is True and by_key["lora"]["fits"] is True
    assert by_key["qlora"]["peak_bytes"] < by_key["lora"]["peak_bytes"] < by_key["full"]["peak_bytes"]


def test_multi_gpu_rungs_and_lora_flags(capsys):
    data = run_json(capsys, "fit", "--model", "llama-3.2-1b", "--gpu", "a100", "--seq-len", "1024", "--batch-size",
                    "1", "--num-gpus", "4", "--lora-rank", "16")
    keys = [r["key"] for r in data["ladder"]]
    assert keys == ORDER + ["fsdp", "fsdp_cpu_offload", "fsdp_lora", "fsdp_qlora"]
    rungs = {r["key"]: r for r in data["ladder"]}
    assert rungs["fsdp"]["settings"]["zero"] == 3 and rungs["fsdp"]["settings"]["dp"] == 4
    assert rungs["full"]["settings"]["zero"] == 0 and rungs["fsdp_cpu_offload"]["settings"]["cpu_offload"] == "params"
    assert rungs["lora"]["settings"]["lora_rank"] == 16 and rungs["fsdp_qlora"]["settings"]["lora_rank"] == 16
    assert rungs["fsdp"]["run"]["hardware"]["num_gpus"] == 4


def test_no_ladder_without_batch_size_keeps_the_old_answer(capsys):
    data = run_json(capsys, "fit", "--model", "gpt2", "--seq-len", "256")
    assert "ladder" not in data and data["num_gpus"] == 8 and data["max_batch_size"] > 0


def test_human_table_names_the_rungs(capsys):
    assert cli_main.main(LADDER) == 0
    out = capsys.readouterr().out
    assert "What it takes to fit" in out and "QLoRA" in out and "+ 8-bit AdamW" in out
