"""Published FP8 training throughput against account.time.step (account/validation/fp8.py; docs/time.md).

The issue's thresholds: of the main rows (Megatron Bridge 25.11 FP8-CS on DGX-H100/B200/GB200 and torchtitan's
Llama 3.1 8B Float8 tables), >= 80 % within 15 % of the published tokens/s per GPU and a mean signed error within
±5 %; of the rows kept aside, >= 4 of 6 within 15 %. Since the Blackwell mechanisms (sustained FP8 cuBLASLt rates,
NVLink 5 measured bus bandwidth, cuDNN attention bounded by FlashAttention-4: tests/specs/test_blackwell.py) the
main thresholds hold (8 of 10, mean -1.0 %: the two 405B Blackwell rows are predicted 15-17 % slow); the aside
threshold does not (2 of 6) and stays a strict xfail. The bounds below are today's numbers, so that a change that
makes them worse fails.
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


def test_every_blackwell_row_is_within_17_percent(main_rows):
    """The 8B and 70B rows within 10.1 %; the 405B rows predicted 15.0 % (B200) and 16.6 % (GB200) slow."""
    blackwell = [r for r in main_rows if r["gpu"] in ("b200", "gb200")]
    assert len(blackwell) == 5
    for r in blackwell:
        assert abs(r["error"]) <= 0.17, r["label"]
    assert all(abs(r["error"]) <= 0.11 for r in blackwell if "405B" not in r["label"])


def test_current_state_is_a_regression_bound(main_rows, aside_rows):
    """Measured on 2026-11-27 with the Blackwell mechanisms: main 8 of 10 within 15 %, mean signed error -1.0 %,
    mean |error| 6.4 %; aside 2 of 6 within 15 %, mean |error| 15.0 %, worst 19.4 % (torchtitan's 405B row on H100).
    Before them: main 7 of 10, mean +13.5 %; aside 0 of 6, mean |error| 28.4 %, worst 55.9 %."""
    main, aside = fp8.report(main_rows), fp8.report(aside_rows)
    assert main["share_within"] >= 0.8
    assert main["mean_abs_error"] <= 0.065
    assert aside["mean_abs_error"] <= 0.15
    assert aside["worst_abs_error"] <= 0.195


def test_issue_thresholds_main(main_rows):
    report = fp8.report(main_rows)
    assert report["share_within"] >= 0.8 and abs(report["mean_signed_error"]) <= 0.05


@pytest.mark.xfail(strict=True, reason="2 of 6 aside rows within 15 % today: MXFP8 GB200 8B +19.1 %, torchtitan's "
                                       "H100 rows +16.8 %, -16.5 %, +19.4 % (docs/time.md, FP8 section)")
def test_issue_threshold_aside(aside_rows):
    assert sum(abs(r["error"]) <= WITHIN for r in aside_rows) >= 4


def test_nvidia_model_tflops_convention_matches_the_table(main_rows):
    """Megatron Bridge prints Model TFLOP/s/GPU beside tokens/s/GPU: 744 at 14451 for Llama 3 8B on DGX-H100. Our
    rate at the published tokens/s reproduces it (the same FLOPs per token), so only tokens/s is compared."""
    row = next(r for r in main_rows if r["label"] == "Llama 3 8B, DGX-H100")
    flops_per_token = row["model_flops_per_s_per_gpu"] / row["predicted_tokens_per_s_per_gpu"]
    assert flops_per_token * 14451 == pytest.approx(744e12, rel=0.002)
