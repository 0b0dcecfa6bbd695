"""Megatron's --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split (issue 41): the embedding
and the loss count as a layer of the pipeline split each (megatron/core/transformer/transformer_block.py,
get_num_layers_to_build; transformer_config.py: n_layers + extras a multiple of pp · vp), so an interleaved layout may
have more chunks than transformer layers (Llama 3.1 405B's 126 layers over PP 16 × VP 8), timed and sized with the
first and the last stage one layer short."""

import dataclasses
import json

import pytest

from trainledger.account.counting.params import param_counts
from trainledger.account.counting.placement import params_per_gpu
from trainledger.account.memory.activations import ActivationShard, activations_bytes
from trainledger.account.time.step import layer_pass_seconds, step_time
from trainledger.cli import main as cli_main
from trainledger.errors import TrainledgerError
from trainledger.specs import get_model
from trainledger.specs.hardware import get_gpu
from trainledger.specs.run import Hardware, Run
from trainledger.specs.run_checks import pipeline_stage_layers, schedule_problem

SPLIT = ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
LLAMA_405B = ["step", "--model", "llama-3.1-405b", "--gpu", "h100", "--num-gpus", "2048", "--tp", "8", "--sp", "--pp",
              "16", "--global-batch-size", "2048", "--seq-len", "8192", "--framework", "megatron", "--precision",
              "mixed-bf16"]


def test_stage_layers_by_hand():
    """126 layers + embedding + loss = 128 units over 16 stages: 8 a stage, the first and the last 7 layers."""
    assert pipeline_stage_layers(126, 16, True, True) == {"first": 7, "middle": 8, "last": 7, "most": 8}
    assert pipeline_stage_layers(126, 16) == {"first": 8, "middle": 8, "last": 8, "most": 8}     # ceil, as before
    assert pipeline_stage_layers(127, 16, True) == {"first": 7, "middle": 8, "last": 8, "most": 8}
    assert pipeline_stage_layers(126, 1, True, True)["first"] == 126


def test_the_rules_megatron_checks():
    assert "are fewer" in schedule_problem(126, 16, 8, 32)                          # 128 chunks > 126 layers
    assert schedule_problem(126, 16, 8, 32, extras=2) is None                        # 128 units in 128 chunks
    assert schedule_problem(126, 16, 2, 32, extras=2) is None
    one = schedule_problem(126, 16, 8, 32, extras=1)                                  # 127 units: no even split
    assert "127 units" in one and "--account-for-embedding-in-pipeline-split" in one and "use --interleave (none)" in one
    assert schedule_problem(127, 16, 8, 32, extras=1) is None                        # 127 + 1 = 128 units
    assert "use --interleave 1 or 2 or 4 or 8" in schedule_problem(127, 16, 3, 48, extras=1)
    assert "--pp 2 or more" in schedule_problem(126, 1, 1, 32, extras=2)
    assert "--uneven-chunks" in schedule_problem(126, 16, 8, 32, uneven_chunks=True, extras=2)
    assert "multiple of --pp 16" in schedule_problem(126, 16, 8, 24, extras=2)


def test_llama_405b_over_pp16_vp8(capsys):
    """The issue's example: refused without the flags, timed with them."""
    assert cli_main.main([*LLAMA_405B, "--interleave", "8"]) == 2
    assert "are fewer" in capsys.readouterr().err
    assert cli_main.main([*LLAMA_405B, "--interleave", "8", *SPLIT, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["interleave"] == 8 and not data["uneven_chunks"]
    assert data["bubble_fraction"] == pytest.approx(15 / (8 * data["micro_batches"]))     # (p − 1)/(v·m), equal chunks
    saved = data["run"]["layout"]
    assert saved["account_for_embedding_in_pipeline_split"] and saved["account_for_loss_in_pipeline_split"]


def test_the_pace_is_the_fullest_stage():
    """With both flags a middle stage's 8 layers set the pace (the head is less than a layer of the 405B): one
    micro-batch is 8 layer passes and its sends; without them the last stage's 8 layers and the head."""
    spec, gpu = get_model("llama-3.1-405b"), get_gpu("h100")
    run = Run().with_(tp=8, sp=True, pp=16, interleave=2, global_batch_size=2048, seq_len=8192, framework="megatron",
                      precision="mixed-bf16", batch_size=1)
    split = run.with_(account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)
    hw = Hardware(gpu, 2048)
    plain, balanced = step_time(spec, hw, run, with_memory=False), step_time(spec, hw, split, with_memory=False)
    one = layer_pass_seconds(spec, gpu, split)
    pp_comm = balanced["breakdown"]["pp_comm"] / balanced["micro_batches"]
    assert balanced["per_micro_batch_seconds"] == pytest.approx(8 * (one["forward"] + one["backward"]) + pp_comm,
                                                                rel=1e-9)
    assert plain["per_micro_batch_seconds"] > balanced["per_micro_batch_seconds"]
    assert balanced["step_seconds"] < plain["step_seconds"]


def test_the_memory_of_those_stages():
    """Parameters: the first stage 7 layers + the embedding, a middle one 8 layers, the last 7 + the head; the fullest
    is held. Activations (1F1B): stage 0 holds pp micro-batches of 7 layers, stage 1 pp − 1 of 8: 120 > 112 layers."""
    spec = get_model("llama-3.1-405b")
    c = param_counts(spec)["components"]
    plain, split = params_per_gpu(spec, tp=8, pp=16), params_per_gpu(spec, tp=8, pp=16, split=(True, True))
    per_layer = (plain["sharded"] - c["token_embedding"]) / 8          # the first stage's 8 layers, without the split
    assert plain["stage"] in ("first", "last") and split["layers_per_stage"] == 8
    stages = {"first": 7 * per_layer + c["token_embedding"], "middle": 8 * per_layer,
              "last": 7 * per_layer + c["lm_head"]}
    assert split["stage"] == max(stages, key=stages.get)
    assert split["sharded"] == pytest.approx(stages[split["stage"]], rel=1e-9)
    assert split["n_params_per_gpu"] < plain["n_params_per_gpu"]
    shard = ActivationShard(1, 8192, "mixed-bf16", tp=8, sp=True, pp=16)
    before = activations_bytes(spec, shard)
    after = activations_bytes(spec, ActivationShard(1, 8192, "mixed-bf16", tp=8, sp=True, pp=16, split=(True, True)))
    assert before["layers"] == pytest.approx(before["per_layer"] * 8 * 16)
    assert after["layers"] == pytest.approx(after["per_layer"] * 8 * 15)
    assert after["total"] < before["total"]


def test_no_flag_no_change():
    """Without the flags every stage is ceil(L/pp) layers as before (a 6-layer model on 2 stages: 3 each either way,
    so the flags change nothing there but let 8 chunks of one unit run)."""
    gpu = get_gpu("h100")
    small = dataclasses.replace(get_model("gpt2"), n_layers=6)
    run = Run().with_(pp=2, global_batch_size=16, seq_len=1024)
    both = run.with_(account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)
    hw = Hardware(gpu, 2)
    a, b = step_time(small, hw, run, with_memory=False), step_time(small, hw, both, with_memory=False)
    assert a["per_micro_batch_seconds"] == pytest.approx(b["per_micro_batch_seconds"], rel=1e-12)
    with pytest.raises(TrainledgerError, match="are fewer"):
        step_time(small, hw, run.with_(interleave=4), with_memory=False)
    assert step_time(small, hw, both.with_(interleave=4), with_memory=False)["interleave"] == 4


def test_train_refuses_the_flags_in_a_run_file(tmp_path):
    from trainledger.train.run_file import values_of
    path = tmp_path / "run.toml"
    path.write_text('version = 1\n[model]\nname = "tiny"\n[layout]\naccount_for_loss_in_pipeline_split = true\n')
    with pytest.raises(TrainledgerError, match="loss as a layer"):
        values_of(path)


def test_llama3_rows_with_the_split_as_docs_time_md_says():
    """docs/time.md (Llama 3 Table 4): the flags at V = 2 give +16.2, +0.5, −9.3 % (the hand-edited layout gave +16.0,
    +0.2, −9.5 %), at V = 8 +34.3, +29.9, +18.3 %; the rows themselves keep the plain layout (unchanged)."""
    from dataclasses import replace

    from trainledger.account.validation import runs
    from trainledger.account.validation.published_run import evaluate
    for interleave, expected in ((2, (0.162, 0.005, -0.093)), (8, (0.343, 0.299, 0.183))):
        for row, want in zip(runs.LLAMA3_TABLE4, expected):
            case = runs.llama3_run(row, interleave)
            case = replace(case, run=case.run.with_(account_for_embedding_in_pipeline_split=True,
                                                    account_for_loss_in_pipeline_split=True))
            assert evaluate(case, with_memory=False)["error"] == pytest.approx(want, abs=0.002), (interleave, row)
    assert [round(c["error"], 3) for c in runs.llama3_cases()] == [0.084, -0.063, -0.126]
