"""The published runs in one table, their per-source errors, and the interval each time answer carries
(account/validation/published.py, account/validation/interval.py)."""

import statistics

import pytest

from trainledger.account.validation.interval import (error_range, leave_one_out, scale_band, similar_rows,
                                                     step_interval, t_95)
from trainledger.account.validation.published import gpu_kind, per_source, published_rows


@pytest.fixture(scope="module")
def rows():
    return published_rows()


def test_every_source_is_in_the_table(rows):
    counts = {s: sum(r["source"] == s for r in rows) for s in ("korthikanti", "llama3", "torchtitan-a100",
                                                              "torchtitan-h100")}
    assert counts == {"korthikanti": 8, "llama3": 3, "torchtitan-a100": 8, "torchtitan-h100": 5}
    # the published step of a torchtitan row from its tokens/s per GPU: Llama 2 13B no AC, 2 × 64 × 4096 tokens at
    # 2,162 tokens/s per GPU on 64 GPUs = 3.789 s
    no_ac = next(r for r in rows if r["label"] == "Llama 2 13B, no AC")
    assert no_ac["published_step_seconds"] == pytest.approx(2 * 64 * 4096 / (2162 * 64))


def test_per_source_thresholds(rows):
    """Issue 27's thresholds where they hold, the honest current numbers as regression bounds where they do not
    (docs/time.md, "Time at scale"): torchtitan A100 all within 15 % with a mean within ±5 %; Korthikanti all within
    15 %, mean within ±5 %. Not met: the torchtitan H100 rows (500 W parts, 2 of 5 within 15 %, mean −14 %) and the
    table as a whole (20 of 24 within 15 %: 83 %, mean −3.5 %)."""
    stats = per_source(rows)
    a100 = stats["torchtitan-a100"]
    assert a100["n"] == 8 and a100["within"] == 8 and abs(a100["mean_signed_error"]) <= 0.05
    k = stats["korthikanti"]
    assert k["within"] == k["n"] == 8 and abs(k["mean_signed_error"]) <= 0.05
    assert stats["all"]["within"] / stats["all"]["n"] >= 0.80
    assert abs(stats["all"]["mean_signed_error"]) <= 0.05
    assert stats["torchtitan-h100"]["within"] >= 2 and stats["torchtitan-h100"]["mean_signed_error"] >= -0.16
    assert stats["llama3"]["within"] >= 2


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
    shift: the model was optimistic there, so the published steps lie mostly above it."""
    found, level = similar_rows("torchtitan", "a100-80gb", 64, rows)
    assert level == 0 and len(found) == 8
    iv = step_interval(10.0, 1e6, "torchtitan", "a100-80gb", 64, rows)
    low, high = error_range([r["error"] for r in found])
    assert iv["step_seconds_low"] == pytest.approx(10.0 / (1 + high))
    assert iv["step_seconds_high"] == pytest.approx(10.0 / (1 + low))
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
