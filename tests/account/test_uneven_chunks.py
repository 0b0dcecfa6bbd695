"""Uneven pipeline chunks (account/time/schedule.py, `step --uneven-chunks`): the interleaved schedule with model chunks
of unequal size, as Megatron-Core's --pipeline-model-parallel-layout and NeMo Automodel's layers_per_stage lay
DeepSeek-V3's 61 layers; and the published DGX-GB200 DeepSeek-V3 rows it unlocks (Megatron-Bridge
docs/performance-summary.md, 25.11 and 26.02 NeMo containers)."""

import json

import pytest

from trainledger.account.counting.flops import train_flops_per_token
from trainledger.account.time.schedule import (chunk_share, even_chunks, published_interleave, schedule_problem)
from runs import step as step_time
from trainledger.account.time.step import pipeline_bubble_fraction
from trainledger.account.validation import moe
from trainledger.cli import main as cli_main
from trainledger.specs import get_model
from trainledger.specs.hardware import get_gpu


@pytest.mark.parametrize("n_layers, pp, v, share, why", [
    (96, 8, 3, 1 / 3, "Korthikanti's 175B: 24 equal chunks of 4"),
    (126, 16, 2, 1 / 2, "Llama 3 405B: 32 chunks of 4 with the embedding and the loss counted as a layer each"),
    (61, 4, 1, 1.0, "one chunk per stage: 1F1B, whatever the split"),
    (61, 4, 8, 2 / 16, "Automodel's DeepSeek-V3: 32 chunks of 1-2 layers, the fullest stage 16 layers"),
    (61, 4, 4, 4 / 16, "the report's DeepSeek-V3: 16 chunks of 3-4, the largest a quarter of the 16-layer stage"),
    (61, 2, 8, 4 / 31, "GB300 26.02: 16 chunks of 3-4, the fullest stage 31 layers"),
])
def test_chunk_share_by_hand(n_layers, pp, v, share, why):
    """The largest chunk's share of its stage: 1/v for equal chunks, ceil(L/(pp·v)) / ceil(L/pp) otherwise."""
    assert chunk_share(n_layers, pp, v) == pytest.approx(share), why


def test_equal_chunks_keep_the_interleaved_bubble():
    """(p − 1)/(v·m) of Narayanan et al. 2021 where the layers split evenly, whatever the flag says."""
    assert even_chunks(96, 8, 3) and not even_chunks(61, 4, 8)
    assert pipeline_bubble_fraction(8, 64, 3, chunk_share(96, 8, 3)) == pytest.approx(7 / (3 * 64))
    assert pipeline_bubble_fraction(4, 8, 8, chunk_share(61, 4, 8)) == pytest.approx(3 * (2 / 16) / 8)


def test_which_schedules_are_valid():
    # without the flag: Megatron-LM's equal-chunk rule, and the message names the way out
    problem = schedule_problem(61, 4, 8, 8)
    assert "do not divide into equal chunks" in problem and "--uneven-chunks" in problem
    assert "use --interleave 1" in problem                     # 1F1B never needs equal chunks (was an empty list)
    # with it: every chunk needs a layer, and the micro-batches still come in whole rounds of pp
    assert schedule_problem(61, 4, 8, 8, uneven_chunks=True) is None
    assert "need a layer each" in schedule_problem(61, 4, 16, 8, uneven_chunks=True)
    assert "--interleave 15 or less" in schedule_problem(61, 4, 16, 8, uneven_chunks=True)
    assert "multiple of --pp 4" in schedule_problem(61, 4, 8, 6, uneven_chunks=True)
    # no chunk without a layer: fewer layers than chunks is refused with or without the flag
    assert schedule_problem(6, 4, 2, 8, uneven_chunks=True) is not None
    assert "--uneven-chunks" not in schedule_problem(6, 4, 2, 8)
    # a published run's VP: its own, uneven where needed, 1 only where no interleaved schedule can run it
    assert published_interleave(96, 8, 3, 64) == (3, False)
    assert published_interleave(61, 4, 8, 8) == (8, True)
    assert published_interleave(61, 4, 8, 6) == (1, False)


def test_the_step_times_uneven_chunks():
    """DeepSeek-V3 on 256 H100 as NeMo Automodel laid it out (PP 4 × VP 8, 8 micro-batches, FSDP2 + EP 64): the
    bubble is 3 × (2/16) / 8 of the ideal time, an eighth of 1F1B's, and every other part is the interleaved step's."""
    spec, gpu = get_model("deepseek-v3"), get_gpu("h100-sxm")
    layout = dict(batch_size=1, seq_len=4096, global_batch_size=512, num_gpus=256, pp=4, ep=64, zero=3,
                  recompute="full", framework="torchtitan", ep_dispatcher="deepep", with_memory=False)
    uneven = step_time(spec, gpu, **layout, interleave=8, uneven_chunks=True)
    one = step_time(spec, gpu, **layout, interleave=1)
    assert uneven["uneven_chunks"] and not one["uneven_chunks"]
    assert uneven["bubble_fraction"] == pytest.approx(3 * (2 / 16) / 8)
    assert one["bubble_fraction"] == pytest.approx(3 / 8)
    ideal = uneven["breakdown"]["pipeline_bubble"] / uneven["bubble_fraction"]
    assert ideal == pytest.approx(one["breakdown"]["pipeline_bubble"] / one["bubble_fraction"], rel=0.05)
    assert uneven["step_seconds"] < one["step_seconds"]
    with pytest.raises(Exception, match="--uneven-chunks"):
        step_time(spec, gpu, **layout, interleave=8)


def _cli(capsys, *args):
    status = cli_main.main(["step", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_step_cli_uneven_chunks(capsys):
    base = ["--model", "deepseek-v3", "--gpu", "h100-sxm", "--num-gpus", "256", "--pp", "4", "--ep", "64",
            "--batch-size", "1", "--global-batch-size", "512", "--seq-len", "4096", "--framework", "torchtitan",
            "--zero", "3", "--recompute", "full", "--ep-dispatcher", "deepep"]
    status, _, err = _cli(capsys, *base, "--interleave", "8")
    assert status == 2 and err.startswith("error:") and err.count("\n") == 1 and "--uneven-chunks" in err
    status, out, err = _cli(capsys, *base, "--interleave", "8", "--uneven-chunks")
    assert status == 0, err
    assert "uneven chunks: 61 layers in 32 chunks of 1-2" in out
    status, out, _ = _cli(capsys, *base, "--interleave", "8", "--uneven-chunks", "--json")
    answer = json.loads(out)
    assert answer["uneven_chunks"] is True and answer["bubble_fraction"] == pytest.approx(3 * (2 / 16) / 8)
    status, _, err = _cli(capsys, *base, "--interleave", "16", "--uneven-chunks")
    assert status == 2 and "need a layer each" in err and err.count("\n") == 1


GB200_DEEPSEEK = [row for row in moe.TAKEN + moe.FP8_TAKEN + moe.FP8_ASIDE
                  if row[1] == "DGX-GB200" and row[2] == "deepseek-v3"]
# Model TFLOP/s per GPU as printed beside each row's tokens/s (the same summary): 25.11 BF16 782, FP8-MX 1003;
# 26.02 FP8-MX 1028
PUBLISHED_TFLOPS = {("25.11", "mixed-bf16"): 782e12, ("25.11", "mxfp8"): 1003e12, ("26.02", "mxfp8"): 1028e12}


def test_gb200_deepseek_rows_flop_convention():
    """The 25.11 rows print "(w/o MTP)": their FLOPs per token (TFLOP/s ÷ tokens/s) are our causal count without
    the MTP module, within 1 %; the 26.02 row's are the count with it, as the DGX-B200 "(w/ MTP)" rows' are."""
    spec = get_model("deepseek-v3")
    assert len(GB200_DEEPSEEK) == 3
    for row in GB200_DEEPSEEK:
        container, precision, published = row[0], row[4], row[-1]
        counted = PUBLISHED_TFLOPS[container, precision] / published
        trained_mtp = (container, row[1], row[2]) not in moe.WITHOUT_MTP
        ours = train_flops_per_token(spec, 4096, "causal", mtp=trained_mtp)
        assert counted == pytest.approx(ours, rel=0.01), row
        assert trained_mtp == (container == "26.02")


def test_gb200_deepseek_rows_regression_bound():
    """The three DGX-GB200 DeepSeek-V3 rows, new with uneven chunks: 25.11 BF16 (PP 4 × VP 4, EP 64) +39.6 %,
    25.11 FP8-MX (PP 8 × VP 4, EP 32) +9.7 %, 26.02 FP8-MX (PP 4 × VP 4, EP 64, MTP trained) +12.5 %. The 25.11
    rows ("w/o MTP") keep the recipe's layout without the MTP (its last stage 13 or 5 layers and the loss: +31.7
    and −2.3 % while it held ceil(61/pp) layers). With the sends overlapped as Megatron runs VP: +45.0, +18.5,
    +16.9 %. Bounds hold today's numbers; they are not a pass mark."""
    got = {(r["container"], r["precision"]): r for r in moe.cases(GB200_DEEPSEEK)}
    expected = {("25.11", "mixed-bf16"): 0.450, ("25.11", "mxfp8"): 0.185, ("26.02", "mxfp8"): 0.169}
    for key, error in expected.items():
        assert got[key]["error"] == pytest.approx(error, abs=0.03), key
        assert got[key]["uneven_chunks"] and got[key]["interleave_modelled"] == 4
        assert got[key]["micro_batches"] == dict(zip(((r[0], r[4]) for r in GB200_DEEPSEEK),
                                                     (r[13] for r in GB200_DEEPSEEK)))[key]   # GA as printed
    assert [got[k]["mtp_modules"] for k in expected] == [0, 0, 1]


def test_tokendrop_rows_and_their_dropless_pairs():
    """The 25.09 token-drop rows (kept aside, a diagnosis): still predicted too fast (+31 … +115 %), so dropless
    routing's host synchronization is not the whole of what the Megatron MoE step lacks; but where a later
    dropless run has the same layout, GPUs and micro-batch, on H100 and B200 it ran half as fast (published 5,275
    against 10,494 and 9,299 against 18,066 tokens/s per GPU), on GB200 as fast (23,766 against 22,775), while our
    step, which has no host time for Megatron, predicts the pair alike (within the FP8 recipe's difference)."""
    rows = {(r["system"], r["model"]): r for r in moe.tokendrop_cases()}
    assert len(rows) == 6 and all(r["error"] > 0.2 for r in rows.values())
    # +23.7 % and +110 % while the interleaved schedule's sends (PP 2 × VP 24; PP 8 × VP 4) were exposed
    assert rows[("DGX-H100", "qwen3-30b-a3b")]["error"] == pytest.approx(0.366, abs=0.03)
    assert rows[("DGX-H100", "qwen3-235b-a22b")]["error"] == pytest.approx(1.15, abs=0.1)
    ratios = {}
    for drop, dropless in moe.DROPLESS_PAIRS:
        assert drop[5:9] == dropless[5:9] and drop[9:13] == dropless[9:13]     # GPUs, batch, seq, layout
        published = dropless[-1] / drop[-1]
        predicted = (moe.predict(dropless)["predicted_tokens_per_s_per_gpu"]
                     / moe.predict(drop)["predicted_tokens_per_s_per_gpu"])
        ratios[drop[1]] = (published, predicted)
    assert ratios["DGX-H100"][0] == pytest.approx(0.503, abs=0.005)
    assert ratios["DGX-B200"][0] == pytest.approx(0.515, abs=0.005)
    assert ratios["DGX-GB200"][0] == pytest.approx(1.044, abs=0.005)
    assert all(0.95 < predicted < 1.1 for _, predicted in ratios.values())
