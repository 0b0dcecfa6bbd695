"""The layout search (account/planning/layout.py): fastest layouts that fit, checked against the memory command and a paper."""

import json

import pytest

from runs import layouts
from runs import step as step_time
from trainledger.cli import main as cli_main
from trainledger.specs import get_model
from trainledger.specs.hardware import get_gpu

GPT3 = dict(num_gpus=64, global_batch_size=64, seq_len=2048, precision="mixed-fp16", optimizer="adam", flash=False,
            framework="megatron")


@pytest.fixture(scope="module")
def gpt3_layouts():
    return layouts(get_model("gpt3-175b"), get_gpu("a100-80gb"), top=5, **GPT3)


def test_175b_at_least_as_fast_as_the_papers_layout(gpt3_layouts):
    """Korthikanti et al. 2022 ran GPT-3 175B on 64 A100 as TP 8, PP 8, interleave 3, SP + selective recompute;
    the search's best is at least as fast under the same model (and so at least as fast as the paper's layout)."""
    paper = step_time(get_model("gpt3-175b"), get_gpu("a100-80gb"), batch_size=1, tp=8, sp=True, pp=8, interleave=3,
                      recompute="selective", with_memory=False, **{k: v for k, v in GPT3.items() if k != "flash"},
                      flash=False)
    best = gpt3_layouts["layouts"][0]
    assert best["step_seconds"] <= paper["step_seconds"]
    times = [layout["step_seconds"] for layout in gpt3_layouts["layouts"]]
    assert times == sorted(times)                      # fastest first


def test_every_returned_layout_fits_by_the_memory_command(gpt3_layouts, capsys):
    for layout in gpt3_layouts["layouts"]:
        argv = ["memory", "--model", "gpt3-175b", "--gpu", "a100-80gb", "--seq-len", str(2048 // layout["cp"]),
                "--batch-size", str(layout["batch_size"]), "--precision", "mixed-fp16", "--optimizer", "adam",
                "--zero", str(layout["zero"]), "--dp", str(layout["dp"]), "--tp", str(layout["tp"]),
                "--pp", str(layout["pp"]), "--recompute", layout["recompute"], "--no-flash", "--json",
                "--grad-accum", str(layout["micro_batches"])]
        if layout["sp"]:
            argv.append("--sp")
        assert cli_main.main(argv) == 0
        memory = json.loads(capsys.readouterr().out)
        assert memory["fits"] and memory["peak_bytes"] == pytest.approx(layout["memory_bytes"])
        assert memory["reserve_bytes"] == pytest.approx(layout["reserve_bytes"])


def test_gpt2_on_8_h100_is_data_parallel():
    found = layouts(get_model("gpt2"), get_gpu("h100"), num_gpus=8, global_batch_size=64, seq_len=1024, top=3)
    best = found["layouts"][0]
    assert (best["tp"], best["pp"], best["cp"], best["dp"]) == (1, 1, 1, 8)


def test_search_respects_a_recompute_policy():
    found = layouts(get_model("llama-2-7b"), get_gpu("h100"), num_gpus=8, global_batch_size=8, seq_len=4096,
                   recomputes=("full",), top=3)
    assert {layout["recompute"] for layout in found["layouts"]} == {"full"}
