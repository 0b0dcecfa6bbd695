"""Advice that knows the set-up (account/time/advice.py): bottleneck lines never suggest what is already on, and `step`
points to a faster micro-batch (or a setting that fits) computed by the model."""

import itertools
import json

import pytest

from trainledger.account.time.advice import bottleneck_advice, hints
from trainledger.account.planning.suggest import faster_setting
from trainledger.specs.run import Hardware
from runs import step as step_time
from trainledger.cli import main as cli_main
from trainledger.specs import get_model
from trainledger.specs.hardware import get_gpu

PARTS = ("compute", "attention", "memory_bound", "overhead", "optimizer", "tp_comm", "cp_comm", "pp_comm", "dp_comm",
         "pipeline_bubble", "ep_comm")


def setups():
    """A grid over the flags the advice depends on."""
    for flash, framework, compiled, zero, dp, tp, optimizer, m, batch in itertools.product(
            (True, False), ("trainledger", "megatron"), (False, True), (0, 1, 3), (1, 8), (1, 8, 16),
            ("adamw", "adafactor"), (1, 4), (1, 8)):
        yield dict(flash=flash, framework=framework, compile=compiled, zero=zero, dp=dp, tp=tp, optimizer=optimizer,
                   micro_batches=m, batch_size=batch, pp=1, interleave=1, cp=1, gpus_per_node=8, n_layers=12,
                   hfu=0.4, step_seconds=1.0)


@pytest.mark.parametrize("setup", list(setups())[::7], ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()
                                                                             if k in ("flash", "framework", "compile", "zero", "dp", "tp", "optimizer")))
def test_no_hint_contradicts_the_flags_in_effect(setup):
    breakdown = dict.fromkeys(PARTS, 1.0)
    text = hints(breakdown, setup)
    assert set(text) == set(PARTS)
    if setup["flash"]:
        assert "use flash" not in text["attention"] and "already on" in text["attention"]
    else:
        assert "--flash" in text["attention"]
    if setup["framework"] == "megatron" or setup["compile"]:
        assert all("torch.compile" not in line for line in text.values())
    if setup["framework"] == "megatron" or setup["optimizer"] == "adafactor":
        assert "fused" not in text["optimizer"]           # Megatron's Adam is fused; adafactor is costed at least traffic
    else:
        assert "fused" in text["optimizer"]               # trainledger.optim is foreach: a fused kernel moves less
    assert "foreach" not in text["optimizer"].replace("instead of foreach", "")
    if setup["zero"] >= 1 and setup["dp"] > 1:
        assert "--zero 1+" not in text["optimizer"]
    if setup["tp"] <= setup["gpus_per_node"]:
        assert "inside a node (--tp at most" not in text["tp_comm"]
    else:
        assert "--tp at most 8" in text["tp_comm"]
    if setup["zero"] != 3:
        assert "ZeRO-3" not in text["dp_comm"]


@pytest.mark.parametrize("m, interleave, expected", [
    (6, 1, "--interleave 2"),     # 12 layers, pp 3: 6 chunks of 2 layers exist
    (4, 1, None),                 # 4 micro-batches are not a multiple of pp 3: no interleaving exists
    (6, 4, None),                 # already at the most chunks below the cap that divide 12 layers
])
def test_the_bubble_hint_suggests_only_a_valid_interleave(m, interleave, expected):
    setup = dict(pp=3, micro_batches=m, interleave=interleave, n_layers=12, batch_size=1, flash=True)
    line = hints({"pipeline_bubble": 1.0}, setup)["pipeline_bubble"]
    assert line.startswith("(p − 1)/(v·m) = ")
    assert float(line.split("= ")[1].split(" ")[0]) == pytest.approx(2 / (interleave * m), abs=5e-4)
    if expected:
        assert expected in line
    else:
        assert "--interleave" not in line


def test_small_gemms_are_not_called_compute_bound():
    """The tiny model on an H100 with Megatron-LM's fused kernels (few launches): GEMMs are the largest part but run
    at ~1 % of peak; the advice says so (HFU × step / GEMM time) instead of "compute-bound"."""
    r = step_time(get_model("tiny"), get_gpu("h100"), num_gpus=1, framework="megatron", with_memory=False)
    assert max(r["breakdown"], key=r["breakdown"].get) == "compute"
    work = r["breakdown"]["compute"] + r["breakdown"]["attention"]
    assert r["hfu"] * r["step_seconds"] / work < 0.05
    assert "compute-bound" not in r["bottleneck"] and "small" in r["bottleneck"]
    big = step_time(get_model("llama-2-7b"), get_gpu("h100"), num_gpus=1, batch_size=4, seq_len=1024,
                    framework="megatron", with_memory=False)
    assert max(big["breakdown"], key=big["breakdown"].get) == "compute"
    assert "compute-bound" in big["bottleneck"]


@pytest.mark.parametrize("flash", [True, False])
def test_step_attention_bottleneck_with_flash_on_and_off(flash):
    """Llama 3 8B at 32K tokens: the attention core is the largest part; "--flash" is suggested only when it is off."""
    r = step_time(get_model("llama-3-8b"), get_gpu("h100"), num_gpus=8, seq_len=32768, zero=3, recompute="full",
                  flash=flash, with_memory=False)
    assert r["bottleneck"].startswith("the attention core")
    assert ("--flash" in r["bottleneck"]) == (not flash)


def test_bottleneck_names_the_largest_part_and_its_share():
    line = bottleneck_advice({"compute": 1.0, "dp_comm": 3.0}, dict(zero=3, dp=8, micro_batches=8, batch_size=1))
    assert line.startswith("data-parallel communication: 75% of the step")
    assert "each of the 8 micro-batches" in line


GPT2 = dict(batch_size=1, seq_len=1024, num_gpus=8, global_batch_size=64, zero=3)


def test_step_points_to_the_faster_micro_batch():
    """The issue's case: gpt2 on 8 H100, global batch 64, micro-batch 1 (8 accumulation steps, ZeRO-3 re-gathering
    the weights each time). The model predicts micro-batch 8 faster; the suggestion is that step, recomputed."""
    spec, gpu = get_model("gpt2"), get_gpu("h100")
    base = step_time(spec, gpu, **GPT2)
    found = faster_setting(spec, Hardware(gpu), base)
    assert found is not None and found["why"] == "faster"
    assert found["batch_size"] == 8 and "--batch-size 8" in found["changes"]
    again = step_time(spec, gpu, **dict(GPT2, batch_size=found["batch_size"], zero=found["zero"],
                                        recompute=found["recompute"], interleave=found["interleave"]))
    assert found["step_seconds"] == pytest.approx(again["step_seconds"]) and again["fits"]
    assert found["step_seconds"] < 0.95 * base["step_seconds"]
    assert found["mfu"] == pytest.approx(base["mfu"] * base["step_seconds"] / found["step_seconds"])
    # from the best setting there is nothing faster to point to
    assert faster_setting(spec, Hardware(gpu), again) is None


def test_a_step_that_does_not_fit_gets_one_that_does():
    spec, gpu = get_model("llama-2-7b"), get_gpu("h100")
    base = step_time(spec, gpu, num_gpus=8, zero=1, framework="megatron")
    assert not base["fits"]
    found = faster_setting(spec, Hardware(gpu), base)
    assert found["why"] == "fits" and found["memory_bytes"] <= gpu.memory_bytes


def test_step_cli_prints_the_suggestion(capsys):
    argv = ["step", "--model", "gpt2", "--gpu", "h100", "--num-gpus", "8", "--global-batch-size", "64"]
    assert cli_main.main(argv + ["--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["suggestion"]["changes"] == ["--batch-size 8"]
    assert result["suggestion"]["step_seconds"] < result["step_seconds"]
    assert cli_main.main(argv + ["--batch-size", "8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["suggestion"] is None


def test_the_suggestion_search_orders_every_recompute_policy():
    # `step --recompute selective-op` crashed ("unexpected ValueError") when the order lacked torchtitan's policies
    from trainledger.account.counting.flops import RECOMPUTE
    from trainledger.account.planning.suggest import RECOMPUTE_ORDER
    assert sorted(RECOMPUTE_ORDER) == sorted(RECOMPUTE)
