"""The published runs in one table, their per-source errors, and the interval each time answer carries
(account/validation/published.py, account/validation/interval.py)."""

import math
import statistics

import pytest

from trainledger.account.validation.interval import (error_range, leave_one_out, scale_band, similar_rows,
                                                     step_interval, t_95)
from trainledger.account.validation.published import gpu_kind, per_source, published_rows


@pytest.fixture(scope="module")
def rows():
    return published_rows()


def test_every_source_is_in_the_table(rows):
    counts = {s: sum(r["source"] == s for r in rows) for s in ("korthikanti", "narayanan", "mt-nlg", "llama3",
                                                              "torchtitan-a100", "torchtitan-h100")}
    assert counts == {"korthikanti": 8, "narayanan": 16, "mt-nlg": 3, "llama3": 3, "torchtitan-a100": 8,
                      "torchtitan-h100": 5}
    assert len(rows) == 43 and len({r["gpu"] for r in rows}) == 3   # a100-80gb, h100-sxm, h100-hbm2e
    # the published step of a torchtitan row from its tokens/s per GPU: Llama 2 13B no AC, 2 × 64 × 4096 tokens at
    # 2,162 tokens/s per GPU on 64 GPUs = 3.789 s
    no_ac = next(r for r in rows if r["label"] == "Llama 2 13B, no AC")
    assert no_ac["published_step_seconds"] == pytest.approx(2 * 64 * 4096 / (2162 * 64))


def test_per_source_thresholds(rows):
    """Issue 27's thresholds for the wider table: ≥ 40 rows from ≥ 4 sources, ≥ 80 % within 15 %, mean signed
    error within ±5 % overall and within ±10 % for every source. Met: the row count and sources, 36 of 43 within
    15 % (84 %), the mean over all rows (−4.6 %, since the 2021 Megatron-LM's synchronous TP and DP gradient
    reductions are modelled; −6.0 % before), and the means of Korthikanti, Narayanan, Llama 3 and torchtitan A100.
    Not met, held to the honest current numbers as regression bounds (docs/time.md, "Time at scale"): the
    torchtitan H100 rows (500 W HBM2e parts, 2 of 5 within 15 %, mean −14 %) and MT-NLG (Megatron-DeepSpeed: all 3
    rows −22 … −25 %; the same layout on the same machine under Megatron-LM, Narayanan Table 2, is predicted within
    10 %)."""
    stats = per_source(rows)
    assert stats["all"]["n"] >= 40 and len(stats) - 1 >= 4
    assert stats["all"]["within"] / stats["all"]["n"] >= 0.80
    for source in ("korthikanti", "narayanan", "llama3", "torchtitan-a100"):
        assert abs(stats[source]["mean_signed_error"]) <= 0.10, source
    a100 = stats["torchtitan-a100"]
    assert a100["n"] == 8 and a100["within"] == 8 and abs(a100["mean_signed_error"]) <= 0.05
    k = stats["korthikanti"]
    assert k["within"] == k["n"] == 8 and abs(k["mean_signed_error"]) <= 0.05
    assert stats["narayanan"]["within"] == stats["narayanan"]["n"] == 16
    assert stats["llama3"]["within"] >= 2
    assert abs(stats["all"]["mean_signed_error"]) <= 0.05
    assert abs(stats["narayanan"]["mean_signed_error"]) <= 0.05
    # not met (regression bounds): the issue asks |mean| ≤ 10 % per source
    assert stats["torchtitan-h100"]["within"] >= 2 and stats["torchtitan-h100"]["mean_signed_error"] >= -0.16
    assert stats["mt-nlg"]["mean_signed_error"] >= -0.24


def test_mtnlg_against_megatron_lm_on_the_same_layout(rows):
    """MT-NLG 530B (t 8, p 35) on 2240 A100 ran 126 TFLOP/s per GPU; the same model and layout on 2240 A100 under
    Megatron-LM ran 159 (Narayanan Table 2): 1.26× in the published figures themselves, most of which the model
    misses on MT-NLG (its 1F1B bubble and synchronous TP reductions are modelled; what else Megatron-DeepSpeed
    did differently is not published)."""
    mt = next(r for r in rows if r["source"] == "mt-nlg" and r["num_gpus"] == 2240)
    same = next(r for r in rows if r["label"] == "Table 2: 529.6B, t 8 p 35, 2240 GPUs")
    assert 159 / 126 == pytest.approx(1.26, abs=0.01)
    assert abs(same["error"]) <= 0.10 and mt["error"] < -0.20
    assert mt["framework_kind"] == "deepspeed"
    assert all(r["source"] != "mt-nlg" for r in similar_rows("megatron", "a100-80gb", 2240, rows)[0])


def test_per_source_by_hand():
    fake = [{"source": "a", "error": 0.1}, {"source": "a", "error": -0.2}, {"source": "b", "error": 0.05}]
    stats = per_source(fake)
    assert stats["a"] == {"n": 2, "within": 1, "mean_signed_error": pytest.approx(-0.05), "worst_error": -0.2}
    assert stats["all"]["n"] == 3 and stats["all"]["within"] == 2


def test_gpu_kinds_and_bands():
    assert gpu_kind("a100-40gb") == gpu_kind("a100-80gb") == "a100"
    assert gpu_kind("h100-sxm") == gpu_kind("h100-hbm2e") == gpu_kind("h200") == "hopper"
    assert scale_band(8) != scale_band(9) == scale_band(256) != scale_band(257)


def test_error_range_by_hand():
    """Mean ± t(0.95, n−1)·sd·√(1 + 1/n): errors 0, 0.02, 0.04: mean 0.02, sd 0.02, t(2) = 2.920."""
    half = 2.920 * 0.02 * (1 + 1 / 3) ** 0.5
    assert error_range([0.0, 0.02, 0.04]) == pytest.approx((0.02 - half, 0.02 + half))
    assert error_range([0.05]) == (0.05, 0.05)
    assert t_95(1) == 6.314 and t_95(35) == 1.645 and t_95(22) == 1.725


def test_interval_of_a_torchtitan_a100_run(rows):
    """A 64-GPU torchtitan run on A100 rests on the 8 torchtitan A100 rows; the interval holds the prediction's
    shift: the model was optimistic there, so the published steps lie mostly above it. By hand (issue 41: in ℓ =
    ln(1 + e), widened by the spread between sources, holding the estimate): c ± t(0.95, k)·√(τ²(1 + 1/P) + s²(1 + 1/n)),
    τ the rms of the close matches' source deviations (Korthikanti's and Narayanan's, each against the other)."""
    found, level = similar_rows("torchtitan", "a100-80gb", 64, rows)
    assert level == 0 and len(found) == 8
    iv = step_interval(10.0, 1e6, "torchtitan", "a100-80gb", 64, rows)
    ell = [math.log(1 + r["error"]) for r in found]
    deviations = []
    for name, other in (("korthikanti", "narayanan"), ("narayanan", "korthikanti")):
        own = [r for r in rows if r["source"] == name]
        centres = [statistics.mean(math.log(1 + x["error"]) for x in
                                   similar_rows("megatron", r["gpu"], r["num_gpus"], [x for x in rows if x["source"]
                                                                                        != name])[0]) for r in own]
        assert all(x["source"] == other for r in own for x in
                   similar_rows("megatron", r["gpu"], r["num_gpus"], [x for x in rows if x["source"] != name])[0])
        deviations.append(statistics.mean(math.log(1 + r["error"]) - c for r, c in zip(own, centres)))
    tau = math.sqrt(statistics.mean(d * d for d in deviations))
    half = t_95(2) * math.sqrt(tau ** 2 * (1 + 1 / 1) + statistics.stdev(ell) ** 2 * (1 + 1 / 8))   # 1 source, 8 runs
    low, high = statistics.mean(ell) - half, statistics.mean(ell) + half
    assert iv["step_seconds_low"] == pytest.approx(min(10.0, 10.0 * math.exp(-high)))
    assert iv["step_seconds_high"] == pytest.approx(10.0 * math.exp(-low))
    assert iv["interval_between_sources"] == pytest.approx(math.expm1(tau))
    assert iv["tokens_per_s_high"] == pytest.approx(1e6 / iv["step_seconds_low"])
    assert iv["interval_rows"] == 8 and iv["step_seconds_high"] > 10.0


def test_no_published_run_near_says_so(rows):
    iv = step_interval(1.0, 1.0, "torchtitan", "b200", 64, rows)
    assert iv["interval_rows"] == len(rows)
    assert "no published run this near" in iv["interval_words"]


def test_leave_one_out_coverage_and_width(rows):
    """Issue 27: the published value inside [low, high] for ≥ 80 % of the public rows, median width ≤ 40 % of the
    step; checked honestly, each row's interval built without it."""
    checks = leave_one_out(rows)
    assert sum(c["inside"] for c in checks) / len(checks) >= 0.80
    assert statistics.median(c["width"] for c in checks) <= 0.40


def test_narayanan_published_step_by_their_eq3():
    """Narayanan et al. 2021, Table 1: the 1T model (l 128, h 25600) at batch 3072 on 3072 GPUs at 163 TFLOP/s per
    GPU. Eq. 3: F = 96·B·s·l·h²·(1 + s/(6h) + V/(16lh)) = 96·3072·2048·128·25600²·(1 + 2048/153600 +
    51200/52428800) = 5.139e19 FLOPs, so a step of 5.139e19 / (163e12 · 3072) = 102.6 s. The paper's aggregate,
    502 PFLOP/s, is 163 × 3072 TFLOP/s within the rounding of 163: the same convention."""
    from trainledger.account.validation.megatron_runs import eq3_flops_per_step, narayanan_cases
    flops = 96 * 3072 * 2048 * 128 * 25600 ** 2 * (1 + 2048 / (6 * 25600) + 51200 / (16 * 128 * 25600))
    assert eq3_flops_per_step(3072, 128, 25600) == pytest.approx(flops)
    assert flops == pytest.approx(5.139e19, rel=1e-3)
    one_t = next(r for r in narayanan_cases() if r["label"] == "Table 1: 1008B, t 8 p 64, 3072 GPUs")
    assert one_t["published_seconds"] == pytest.approx(flops / (163e12 * 3072))
    assert 163 * 3072 / 1000 == pytest.approx(502, rel=3e-3)   # 163 is rounded: 502 / 3072 = 163.4
    assert abs(one_t["error"]) <= 0.15


def test_a_mixture_of_experts_answer_rests_on_the_published_moe_runs():
    """Every published Megatron MoE run took longer than predicted (docs/time.md, MoE sections; DeepSeek-V3 MXFP8 on
    256 GB200 was 2.3 % shorter until its last stage held the recipe's 5 layers, not ceil(61/8)): an MoE answer's
    range comes from the MoE runs (published.moe_rows), not from the dense ones, and says so. On 16 H100 with
    Megatron the H100 Megatron MoE runs of 9-256 GPUs; the range reaches as far above the step as they were off."""
    from trainledger.account.validation.published import moe_rows
    pool = moe_rows()
    megatron = [r for r in pool if r["framework_kind"] == "megatron"]
    assert len(pool) == 34 and len(megatron) == 30
    assert sum(r["error"] < 0 for r in megatron) == 30     # all: the published step longer than ours
    found, level = similar_rows("megatron", "h100-sxm", 16, moe=True)
    assert level == 0 and found and all(r in pool for r in found)
    assert all(r["gpu_kind"] == "hopper" and 9 <= r["num_gpus"] <= 256 for r in found)
    iv = step_interval(10.0, 1e6, "megatron", "h100-sxm", 16, moe=True)
    slowest = min(r["error"] for r in found)         # the range reaches at least the slowest neighbour (issue 41: ℓ)
    assert iv["step_seconds_high"] >= 10.0 / (1 + slowest) and iv["step_seconds_high"] > 20.0
    assert iv["interval_words"].startswith("MoE runs like this") and iv["interval_basis"].startswith("published MoE")
    dense = step_interval(10.0, 1e6, "megatron", "h100-sxm", 16)
    assert dense["interval_rows"] != iv["interval_rows"] or dense["step_seconds_high"] != iv["step_seconds_high"]
    # a PyTorch MoE question rests on NeMo Automodel's 4 PyTorch MoE runs on H100 (8-1024 GPUs: too few at 9-256,
    # so any scale, said), which ran faster than, or as fast as, predicted: a range mostly below the step
    pytorch = [r for r in pool if r["framework_kind"] == "pytorch"]
    assert len(pytorch) == 4 and all(r["source"] == "moe AUTOMODEL" and r["gpu_kind"] == "hopper" for r in pytorch)
    torch_iv = step_interval(10.0, 1e6, "torchtitan", "h100-sxm", 16, moe=True)
    assert torch_iv["interval_rows"] == 4 and "same framework kind and GPU (any scale)" in torch_iv["interval_words"]
    assert torch_iv["step_seconds_low"] < 10.0 * (1 - 0.3) and torch_iv["step_seconds_high"] < iv["step_seconds_high"]


def test_moe_leave_one_out_coverage():
    """The same honest check on the MoE runs: each run's range built without it holds its published step for
    31 of 34 (91 %; each Automodel run inside the range of the other 3); the ranges are wide (median about 1.6×
    the step), as wide as the runs were off."""
    checks = leave_one_out(moe=True)
    assert len(checks) == 34 and sum(c["inside"] for c in checks) / len(checks) >= 0.80
    assert all(c["inside"] and c["rows"] == 3 for c in checks if c["source"] == "moe AUTOMODEL")
    assert statistics.median(c["width"] for c in checks) > 0.40
