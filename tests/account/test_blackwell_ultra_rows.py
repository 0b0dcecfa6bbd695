"""Published rows the gb300 and b300 entries unlock, predicted and kept aside (never in the sets the issues'
thresholds are computed on): regression bounds on today's errors (predicted / published − 1), ±0.03.

- NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md at commit df0289c, DGX-GB300 FP8 rows of the 25.11 and
  26.02 containers (account/validation/fp8.py BLACKWELL_ULTRA; the summary has no GB300/B300 dense BF16 row and no
  DGX-B300 dense row; the NVFP4 rows have no recipe);
- the same summary's DGX-GB300 (25.11, 26.02) and DGX-B300 (26.02) MoE rows (moe.py BLACKWELL_ULTRA);
- arXiv:2603.07685 Table 11, the GB300 rows (moe_report.py REPORT_GB300; the 128-GPU long-context row needs
  parallel folding: not modelled).
"""

import pytest

from trainledger.account.validation import fp8, moe
from trainledger.account.validation import moe_report as R
from trainledger.errors import TrainledgerError
from trainledger.specs.recipes import get_recipe

FP8_TODAY = {   # (container, label): error
    ("25.11", "Llama 3 8B, DGX-GB300"): -0.077, ("25.11", "Llama 3 8B, DGX-GB300, MXFP8"): -0.017,
    ("25.11", "Llama 3 70B, DGX-GB300"): 0.013, ("25.11", "Llama 3.1 405B, DGX-GB300"): -0.229,
    ("26.02", "Llama 3 70B, DGX-GB300"): -0.084, ("26.02", "Llama 3 70B, DGX-GB300, MXFP8"): -0.077,
    ("26.02", "Llama 3.1 405B, DGX-GB300"): -0.237, ("26.02", "Llama 3.1 405B, DGX-GB300, MXFP8"): -0.149,
}
MOE_TODAY = {   # (container, system, model, precision): error
    ("25.11", "DGX-GB300", "deepseek-v3", "mixed-bf16"): 0.213, ("25.11", "DGX-GB300", "deepseek-v3", "mxfp8"): 0.130,
    ("25.11", "DGX-GB300", "gpt-oss-120b", "mixed-bf16"): 0.847, ("25.11", "DGX-GB300", "qwen3-30b-a3b", "mxfp8"): 0.220,
    ("25.11", "DGX-GB300", "qwen3-235b-a22b", "mixed-bf16"): 0.080,
    ("26.02", "DGX-GB300", "deepseek-v3", "mxfp8"): 0.025, ("26.02", "DGX-GB300", "gpt-oss-120b", "mixed-bf16"): 0.839,
    ("26.02", "DGX-GB300", "qwen3-30b-a3b", "mxfp8"): 0.181, ("26.02", "DGX-GB300", "qwen3-235b-a22b", "mxfp8"): 0.009,
    ("26.02", "DGX-B300", "deepseek-v3", "mxfp8"): 0.126, ("26.02", "DGX-B300", "gpt-oss-120b", "mixed-bf16"): 1.128,
    ("26.02", "DGX-B300", "qwen3-30b-a3b", "mxfp8"): 0.155, ("26.02", "DGX-B300", "qwen3-235b-a22b", "mxfp8"): 1.103,
}


def test_fp8_gb300_rows_regression_bound():
    """8 DGX-GB300 FP8 rows: 6 of 8 within 15 %, mean signed −10.7 %, all predicted too slow but one (+1.3 %);
    Llama 3.1 405B −15 … −24 % (the GB200 405B row of the main set −12.1 %; both −17 … −25 % and −16.6 % while the
    interleaved schedule's sends were exposed: Megatron Bridge overlaps them, account/time/step.py pp_overlap_default). The GA column of every row is
    reproduced (megatron_bridge_case asserts it)."""
    rows = fp8.blackwell_ultra_cases()
    assert {(r["container"], r["label"]): r["error"] for r in rows} == pytest.approx(FP8_TODAY, abs=0.03)
    assert all(r["gpu"] == "gb300" and "DGX-GB300" in r["source"] and r["container"] in r["source"] for r in rows)
    report = fp8.report(rows)
    assert report["n"] == 8 and report["share_within"] == 6 / 8
    assert report["mean_signed_error"] == pytest.approx(-0.107, abs=0.02)


def test_nvfp4_rows_are_not_modelled():
    assert [row[1][4] for row in fp8.BLACKWELL_ULTRA_NOT_MODELLED] == ["nvfp4", "nvfp4"]
    with pytest.raises(TrainledgerError):
        get_recipe("nvfp4")


def test_moe_gb300_b300_rows_regression_bound():
    """13 MoE rows: 8 of 13 within 20 % (Qwen3-235B on GB300 +3.1 %, +0.9 %; Qwen3-30B on GB300 26.02 +18.1 %, on
    B300 +15.5 %; DeepSeek-V3 +11.3, +3.5, −2.6 % on GB300 and +12.6 % on B300 since the step times MLA's own GEMMs
    and the MTP module: −20 … −27 % before). GPT-OSS is predicted far too fast everywhere (+84 … +113 %, as on GB200
    +126 %)."""
    rows = moe.blackwell_ultra_cases()
    got = {(r["container"], r["system"], r["model"], r["precision"]): r["error"] for r in rows}
    assert got == pytest.approx(MOE_TODAY, abs=0.03)
    report = moe.report(rows)
    assert report["n"] == 13 and report["share_within"] == pytest.approx(7 / 13)
    # DeepSeek-V3's 61 layers over PP2 x VP4 (or VP8) split unevenly: timed with their VP and uneven chunks since
    # 2026-12-01 (before: --interleave 1, +11.3, +3.5, −2.6 %), the 25.11 rows "w/o MTP" without the MTP module
    dsv3 = [r for r in rows if r["model"] == "deepseek-v3" and r["system"] == "DGX-GB300"]
    assert [(r["vp"], r["interleave_modelled"], r["uneven_chunks"]) for r in dsv3] == [(4, 4, True), (4, 4, True),
                                                                                      (8, 8, True)]
    assert [r["mtp_modules"] for r in dsv3] == [0, 0, 1]


def test_report_gb300_rows_regression_bound():
    """arXiv:2603.07685 Table 11 on GB300: DeepSeek-V3 MXFP8 +14.9 % (−22.4 % before MLA's GEMMs and the MTP module
    were in the step; GB200: +15.2 %), Qwen3-235B MXFP8 +1.3 %, and
    Qwen3-235B at sequence 131072 (CP 4, EP 32 folded over TP × CP × DP = 32 with ETP 1) −3.7 % (−9.9 % while each
    rank's attention ran at the causal rate of one square, account/time/kernels.py _attention_blocks)."""
    rows = {(r["model"], r["seq_len"]): r for r in R.cases(R.REPORT_GB300)}
    assert rows["deepseek-v3", 4096]["error"] == pytest.approx(0.149, abs=0.03)
    assert rows["qwen3-235b-a22b", 4096]["error"] == pytest.approx(0.013, abs=0.03)
    assert rows["qwen3-235b-a22b", 4096]["interleave_modelled"] == 6
    assert rows["qwen3-235b-a22b", 131072]["error"] == pytest.approx(-0.037, abs=0.03)


def test_kept_aside_rows_stay_out_of_the_threshold_sets():
    assert all(r["gpu"] not in ("gb300", "b300") for r in fp8.main_cases() + fp8.aside_cases())
    assert all(r["gpu"] not in ("gb300", "b300") for r in moe.all_cases())
    assert all(row[1] != "GB300" for row in R.REPORT_TAKEN)


def test_expert_parallel_beyond_eight_gpus_costs_the_b300_its_nic():
    """GPT-OSS 120B on 64 GPUs with EP 64, same layout on both (26.02): on GB300 the all-to-alls stay inside the
    72-GPU NVLink domain, on B300 they cross 800 Gb/s NICs. Published 19,412 vs 8,359 tokens/s per GPU (2.32x);
    predicted 2.0x, from the expert all-to-alls (ep_comm 0.41 s vs 2.55 s per step)."""
    rows = {r["system"]: r for r in moe.blackwell_ultra_cases()
            if r["model"] == "gpt-oss-120b" and r["container"] == "26.02"}
    gb300, b300 = rows["DGX-GB300"], rows["DGX-B300"]
    published = gb300["published_tokens_per_s_per_gpu"] / b300["published_tokens_per_s_per_gpu"]
    predicted = gb300["predicted_tokens_per_s_per_gpu"] / b300["predicted_tokens_per_s_per_gpu"]
    assert published == pytest.approx(2.32, abs=0.01)
    assert predicted == pytest.approx(2.0, abs=0.1)
    assert b300["breakdown"]["ep_comm"] > 5 * gb300["breakdown"]["ep_comm"]


def test_blackwell_ultra_is_faster_than_blackwell_at_the_same_layout_and_we_do_not_say_why():
    """Rows of the same layout on GB300 and GB200 (same FP8/BF16 peaks): published 1.23x and 1.22x faster on GB300
    (the dense FP8 pairs of the summary: Llama 3 8B 1.19x, 70B 1.05x in 25.11 and 1.24x in 26.02), where the model,
    with the GB200's sustained fractions borrowed, predicts 1.00x. Not fitted: the 1.4 kW (vs 1.2 kW)
    power limit, the doubled SFU and later software are candidate causes no source quantifies."""
    pairs = [  # (GB300 row, GB200 row): same model, precision, GPUs, GBS, MBS, layout
        (moe.BLACKWELL_ULTRA[6], moe.ASIDE[2]),        # 26.02 GPT-OSS 120B BF16, 64 GPUs, EP 64
        (moe.BLACKWELL_ULTRA[3], moe.FP8_TAKEN[3]),    # 25.11 Qwen3-30B MXFP8, 8 GPUs, EP 8
    ]
    for ultra_row, blackwell_row in pairs:
        assert ultra_row[5:14] == blackwell_row[5:14]
        ultra, blackwell = moe.predict(ultra_row), moe.predict(blackwell_row)
        published = ultra["published_tokens_per_s_per_gpu"] / blackwell["published_tokens_per_s_per_gpu"]
        predicted = ultra["predicted_tokens_per_s_per_gpu"] / blackwell["predicted_tokens_per_s_per_gpu"]
        assert 1.2 <= published <= 1.24
        assert predicted == pytest.approx(1.0, abs=0.01)
