"""The interval judged on sources it has never seen (issue 41, account/validation/interval.py and interval_check.py):
the spread between sources by hand, the widening where no close match exists, the estimate always inside, and the
leave-one-source-out coverage of the published runs."""

import math
import statistics

import pytest

from trainledger.account.validation.interval import (CURRENT_ERA, between_sources, era_of, log_range, match,
                                                     source_deviations, step_interval)
from trainledger.account.validation.interval_check import headline_check, leave_one_source_out
from trainledger.account.validation.published import moe_rows, published_rows


def row(publication, error, kind="pytorch", gpu="a100-80gb", num_gpus=64, year=2024, step=10.0):
    return {"source": publication, "publication": publication, "label": f"{publication} {error}", "error": error,
            "framework_kind": kind, "gpu": gpu, "gpu_kind": gpu.split("-")[0], "num_gpus": num_gpus,
            "software_year": year, "predicted_step_seconds": step, "published_step_seconds": step / (1 + error)}


def test_eras():
    assert era_of(2021) == era_of(2022) == "2021-2022 code" and era_of(2023) == era_of(2026) == CURRENT_ERA


def test_source_deviations_by_hand():
    """Three sources of eager-PyTorch A100 runs: each source's runs matched against the other two; its deviation is
    its mean ℓ minus theirs (ℓ = ln(1 + e))."""
    pool = [row("a", 0.0), row("a", 0.1), row("b", -0.1), row("b", -0.2), row("c", 0.05), row("c", 0.05)]
    ell = {p: [math.log1p(r["error"]) for r in pool if r["publication"] == p] for p in "abc"}
    got = {d["publication"]: d for d in source_deviations(pool)}
    for p, others in (("a", "bc"), ("b", "ac"), ("c", "ab")):
        expected = statistics.mean(ell[p]) - statistics.mean(ell[others[0]] + ell[others[1]])
        assert got[p]["deviation"] == pytest.approx(expected) and got[p]["matched"] and got[p]["rows"] == 2
    tau, k = between_sources(list(got.values()), matched=True)
    assert k == 3 and tau == pytest.approx(math.sqrt(statistics.mean(d["deviation"] ** 2 for d in got.values())))


def test_a_widened_answer_takes_the_larger_spread():
    deviations = [{"matched": True, "deviation": 0.03}, {"matched": True, "deviation": -0.03},
                  {"matched": False, "deviation": 0.2}, {"matched": False, "deviation": -0.2}]
    assert between_sources(deviations, matched=True) == (pytest.approx(0.03), 2)
    assert between_sources(deviations, matched=False) == (pytest.approx(0.2), 2)
    # no close match ever measured: a close answer takes the widened spread; a wide one never the narrower
    assert between_sources(deviations[2:], matched=True) == (pytest.approx(0.2), 2)
    assert between_sources([{"matched": False, "deviation": 0.01}] + deviations[:2], matched=False)[0] == \
        pytest.approx(0.03)
    assert math.isnan(between_sources([], matched=True)[0])


def test_the_range_by_hand_and_the_estimate_inside():
    """Every neighbour predicted 20-30 % fast (e < 0; they took 25-43 % longer): the range reaches that far and holds the
    estimate itself (issue 41: the printed estimate lies inside its printed range)."""
    pool = [row("a", -0.2), row("a", -0.25), row("b", -0.3), row("b", -0.22), row("c", -0.28), row("c", -0.2)]
    m = match({"framework": "torchtitan", "gpu": "a100-80gb", "num_gpus": 64}, pool)
    assert m["sources"] == 3 and m["matched"] and m["level"] == 0
    ell = [math.log1p(r["error"]) for r in pool]
    within = math.sqrt(sum((e - statistics.mean(ell[i:i + 2])) ** 2 for i in (0, 2, 4) for e in ell[i:i + 2]) / 3)
    assert m["within"] == pytest.approx(within)
    deviations = source_deviations(pool)
    tau, k = between_sources(deviations, True)
    r = log_range(m, deviations)
    half = {2: 2.920, 3: 2.353}[k] * math.sqrt(tau ** 2 * (1 + 1 / 3) + within ** 2 * (1 + 1 / 6))
    assert (r["low"], r["high"]) == (pytest.approx(min(statistics.mean(ell) - half, min(ell))),
                                     pytest.approx(max(statistics.mean(ell) + half, max(ell))))
    iv = step_interval(10.0, 1e5, "torchtitan", "a100-80gb", 64, pool)
    assert iv["step_seconds_low"] == pytest.approx(min(10.0, 10.0 * math.exp(-r["high"])))
    assert iv["step_seconds_low"] <= 10.0 <= iv["step_seconds_high"] == pytest.approx(10.0 * math.exp(-r["low"]))
    assert iv["step_seconds_high"] >= 10.0 / (1 - 0.3)             # as slow as the slowest neighbour at least
    assert iv["tokens_per_s_low"] <= 1e4 <= iv["tokens_per_s_high"]
    assert "took 25–43 % longer than this model's estimate (6 published runs, 3 sources)" in iv["interval_words"]


def test_no_close_neighbour_widens():
    """The asked run's framework, GPU generation or software era without a published neighbour: the range widens
    (the larger spread between sources) and the words say why."""
    rows = published_rows()
    close = step_interval(1.0, 1.0, "torchtitan", "a100-80gb", 64)
    assert not close["interval_widened"]
    for asked in (("torchtitan", "b200", 64), ("megatron", "a100-80gb", 512)):
        wide = step_interval(1.0, 1.0, *asked)
        assert wide["interval_widened"] and wide["interval_between_sources"] > close["interval_between_sources"]
        assert wide["step_seconds_high"] - wide["step_seconds_low"] > close["step_seconds_high"] - close["step_seconds_low"]
    era = step_interval(1.0, 1.0, "megatron", "a100-80gb", 512)
    assert "none runs code of 2023 on: theirs is 2021-2022 code" in era["interval_words"]
    # the same run asked as the 2021-22 code it would have run then: a close match (Korthikanti's and Narayanan's)
    then = step_interval(1.0, 1.0, "megatron", "a100-80gb", 512, rows, era="2021-2022 code")
    assert not then["interval_widened"] and then["interval_sources"] == 2
    assert "none on this GPU" in step_interval(1.0, 1.0, "torchtitan", "b200", 64)["interval_words"]


@pytest.fixture(scope="module")
def held_out():
    return {moe: leave_one_source_out(moe=moe) for moe in (False, True)}


def test_every_source_and_framework_kind_is_held_out(held_out):
    dense = {(g["by"], g["held_out"]) for g in held_out[False]}
    assert dense == {("source", s) for s in ("korthikanti", "narayanan", "mt-nlg", "llama3", "torchtitan-a100",
                                             "torchtitan-h100")} | {("framework kind", k) for k in
                                                                    ("megatron", "deepspeed", "pytorch")}
    moe = {(g["by"], g["held_out"]) for g in held_out[True]}
    assert ("source", "megatron-bridge summary") in moe and ("framework kind", "megatron") in moe
    assert sum(g["n"] for g in held_out[True] if g["by"] == "source") == len(moe_rows()) == 34


def test_a_held_out_source_is_not_its_own_evidence(held_out):
    """Moving a held-out source's published steps moves none of its intervals: nothing of it enters."""
    rows = [dict(r) for r in published_rows()]
    moved = [dict(r, published_step_seconds=r["published_step_seconds"] * 3, error=r["error"] / 3 - 2 / 3)
             if r["publication"] == "torchtitan-a100" else r for r in rows]
    before = next(g for g in held_out[False] if g["held_out"] == "torchtitan-a100")
    after = next(g for g in leave_one_source_out(moved) if g["held_out"] == "torchtitan-a100")
    assert [(c["low"], c["high"]) for c in after["checks"]] == [(c["low"], c["high"]) for c in before["checks"]]
    assert after["inside"] == 0 < before["inside"]


def test_leave_one_source_out_coverage(held_out):
    """Issue 41's goal: each source (and framework kind) with ≥ 5 rows held out, its published steps inside their
    intervals for ≥ 75 %. Met for every one, dense and MoE (docs/time.md, "Off-sample"; the MoE Megatron kind held
    out, resting on NeMo Automodel's 4 PyTorch runs alone, is the narrowest margin: 23 of 30)."""
    for moe, groups in held_out.items():
        for g in groups:
            if g["n"] >= 5:
                assert g["coverage"] >= 0.75, (moe, g["by"], g["held_out"], g["inside"], g["n"])


def test_the_headline_is_not_moved_by_the_neighbours_mean():
    """The decision of interval.py (docs/time.md): moving the estimate by its neighbours' mean error would have put
    the held-out publications' mean errors further from zero, dense and MoE alike."""
    for moe in (False, True):
        h = headline_check(moe=moe)
        assert h["moved"] > h["raw"] and h["publications"] >= 4
