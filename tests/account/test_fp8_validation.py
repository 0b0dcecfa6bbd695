"""Published FP8 training throughput against account.time.step (account/validation/fp8.py; docs/time.md).

The issue's thresholds: of the main rows (Megatron Bridge 25.11 FP8-CS on DGX-H100/B200/GB200 and torchtitan's
Llama 3.1 8B Float8 tables), >= 80 % within 15 % of the published tokens/s per GPU and a mean signed error within
±5 %; of the rows kept aside, >= 4 of 6 within 15 %. Not met today: the Blackwell rows are predicted 10-51 % fast
(no published attention, bandwidth or kernel-overhead measurement of B200/GB200 is in specs/). The tests below
assert what holds (every Hopper row within 15 %) and bound the current state, so that a change that makes it worse
fails; the thresholds are kept as strict xfails that start passing when the model earns them.
"""

import pytest

from trainledger.account.validation import fp8

WITHIN = 0.15


@pytest.fixture(scope="module")
def main_rows():
    return fp8.main_cases()


@pytest.fixture(scope="module")
def aside_rows():
    return fp8.aside_cases()


def test_rows_reproduce_the_published_columns(main_rows):
    """Each Megatron Bridge row's GA column equals GBS / (MBS · dp) of its layout (asserted while predicting)."""
    assert len(main_rows) == len(fp8.MEGATRON_BRIDGE) + len(fp8.TORCHTITAN_FLOAT8) == 10
    assert all(r["source"] and r["published_tokens_per_s_per_gpu"] > 0 for r in main_rows)


def test_every_hopper_row_is_within_15_percent(main_rows):
    hopper = [r for r in main_rows if r["gpu"].startswith("h100")]
    assert len(hopper) == 5
    for r in hopper:
        assert abs(r["error"]) <= WITHIN, r["label"]


def test_current_state_is_a_regression_bound(main_rows, aside_rows):
    """Measured on 2026-11-27 with the at-scale mechanisms of issue 27 (the wait for the slowest GPU, interference):
    7 of 10 main rows within 15 %, mean signed error +13.5 %; aside rows none within 15 %, mean |error| 28.4 %,
    worst 55.9 % (before those mechanisms: main +18.2 %, aside 1 of 6 — torchtitan's 32K-token row, now +16.8 %)."""
    main, aside = fp8.report(main_rows), fp8.report(aside_rows)
    assert main["share_within"] >= 0.7
    assert main["mean_signed_error"] <= 0.14
    assert aside["mean_abs_error"] <= 0.29
    assert aside["worst_abs_error"] <= 0.57


@pytest.mark.xfail(strict=True, reason="Blackwell rows predicted up to 43 % fast: no measured B200/GB200 attention, "
                                       "bandwidth or kernel overhead in specs/ (docs/time.md, FP8 section)")
def test_issue_thresholds_main(main_rows):
    report = fp8.report(main_rows)
    assert report["share_within"] >= 0.8 and abs(report["mean_signed_error"]) <= 0.05


@pytest.mark.xfail(strict=True, reason="0 of 6 aside rows within 15 % today (docs/time.md, FP8 section)")
def test_issue_threshold_aside(aside_rows):
    assert sum(abs(r["error"]) <= WITHIN for r in aside_rows) >= 4


def test_nvidia_model_tflops_convention_matches_the_table(main_rows):
    """Megatron Bridge prints Model TFLOP/s/GPU beside tokens/s/GPU: 744 at 14451 for Llama 3 8B on DGX-H100. Our
    rate at the published tokens/s reproduces it (the same FLOPs per token), so only tokens/s is compared."""
    row = next(r for r in main_rows if r["label"] == "Llama 3 8B, DGX-H100")
    flops_per_token = row["model_flops_per_s_per_gpu"] / row["predicted_tokens_per_s_per_gpu"]
    assert flops_per_token * 14451 == pytest.approx(744e12, rel=0.002)
