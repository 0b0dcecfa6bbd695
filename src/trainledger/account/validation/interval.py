"""An error bar on a predicted step: the range a run like it takes, judged as it will be used, on a new source. Pure.

The error of a published run is taken as the log of its ratio, ℓ = ln(predicted / published step): a ratio's error
is symmetric in its logarithm (a run twice as slow and one half as slow are equally far off), and a range in ℓ never
reaches a step of zero or infinity, as the signed error 1 − published/predicted does near −100 %.

"Like it": the same framework kind (Megatron-LM or eager PyTorch), the same GPU chip (published.gpu_kind) and the same
scale band (SCALE_BANDS). With fewer than MIN_ROWS such runs the match is widened step by step (drop the scale band,
then the framework kind, then the GPU chip: every published run), and the answer says how far it went. The rows are
computed at run time with the model as it is, never typed in.

A user's run is never one of the published runs, nor from one of their sources: it is a new source (another
cluster, another code base). Runs of one source share its biases, so the errors of a run's neighbours understate how
far a new source's run lands. Two parts, then (a random-effects model, as meta-analysis predicts the effect of a new
study: Higgins, Thompson & Spiegelhalter 2009, JRSS A 172:137-159, Sec. 5, the prediction interval
μ ± t · √(τ² + SE²)):
- the neighbours' errors: their mean c over n runs from P sources, and s, the spread of a source's runs about that
  source's own mean (pooled within-source standard deviation);
- how far a source's mean error lies from what the other sources predicted for it, τ: for every published source, its
  runs matched against the OTHER sources as a new run would be (leave-one-source-out) give a deviation d = its mean ℓ −
  the mean ℓ of its neighbours; τ is the root mean square of the k deviations (`source_deviations`). Deviations are
  kept apart by whether the match was close (`matched`: the same framework kind and GPU chip, and a neighbour of the
  run's software era, ERAS) or had to be widened; a widened answer takes the larger τ, a close one the close
  matches' τ (the widened one where no close match was ever seen). That is how the range widens where the asked
  run's framework, GPU generation or software era has no published neighbour: by as much as such matches missed.
The range of ℓ is c ± t(0.95, k) · √(τ² (1 + 1/P) + s² (1 + 1/n)) (the new source's own offset τ², the centre's
uncertainty τ²/P + s²/n from P sources and n runs, a run's own scatter s²; Student's t with k degrees of freedom, k
deviations about zero), never narrower than the neighbours' own errors; the step lies in step·e^(−ℓ_high) …
step·e^(−ℓ_low), and the range always holds the estimate itself (`step_interval`).

The headline is the model's estimate, not moved by the neighbours' mean: moved by it, the published sources' mean
errors held out one source at a time grow (interval_check.headline_check; docs/time.md has the table), so a
correction fitted to the neighbours would not carry to a new source. The range says where runs like this landed.

A mixture-of-experts model's answer rests on the published MoE runs (published.moe_rows), a dense model's on the dense
ones (published.published_rows): every published Megatron MoE run so far took longer than predicted.
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import mean, stdev

from trainledger.account.validation.published import framework_kind, gpu_kind, moe_rows, published_rows

MIN_ROWS = 3
SCALE_BANDS = ((8, "one node (≤ 8 GPUs)"), (256, "9-256 GPUs"), (float("inf"), "more than 256 GPUs"))
# Student's t, one-sided 0.95 quantile by degrees of freedom (any statistics table; e.g. NIST/SEMATECH e-Handbook
# of Statistical Methods, 1.3.6.7.2, "Critical Values of the Student's t Distribution"); past 30: the normal 1.645
T_95 = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015, 6: 1.943, 7: 1.895, 8: 1.860, 9: 1.833, 10: 1.812,
        11: 1.796, 12: 1.782, 13: 1.771, 14: 1.761, 15: 1.753, 16: 1.746, 17: 1.740, 18: 1.734, 19: 1.729,
        20: 1.725, 25: 1.708, 30: 1.697}
LEVELS = ("same framework kind, GPU and scale band", "same framework kind and GPU (any scale)",
          "same GPU (any framework, any scale)", "every published run (none on this GPU)")
# Software eras: the code of 2021-22 (Megatron-LM before Megatron-Core: no --overlap-grad-reduce, no overlapped
# pipeline sends, TP reductions after the Linear; PyTorch 1.x) and the code of 2023 on (Megatron-Core's overlap flags,
# PyTorch 2 and FSDP2), which the model's defaults describe (docs/time.md, "What Megatron-LM hides, by version"). A
# user's run is asked as today's code; a published row is checked as the code it ran (its software_year).
ERAS = ((2022, "2021-2022 code"), (10**4, "code of 2023 on"))
CURRENT_ERA = ERAS[-1][1]


def scale_band(num_gpus: int) -> str:
    """The band of SCALE_BANDS that `num_gpus` falls in."""
    return next(name for top, name in SCALE_BANDS if num_gpus <= top)


def era_of(year: int) -> str:
    """The software era (ERAS) of code from `year`."""
    return next(name for top, name in ERAS if year <= top)


def log_error(row: dict) -> float:
    """ℓ = ln(predicted / published step) of a published row (its signed error e: ln(1 + e))."""
    return math.log1p(row["error"])


def similar_rows(framework: str, gpu_name: str, num_gpus: int, rows=None, moe: bool = False) -> tuple[list[dict], int]:
    """(rows, level): the published rows most like this run and how far the match was widened (index of LEVELS);
    `moe`: among the published mixture-of-experts runs."""
    rows = list((moe_rows() if moe else published_rows()) if rows is None else rows)
    kind, chip, band = framework_kind(framework), gpu_kind(gpu_name), scale_band(num_gpus)
    tests = (lambda r: r["framework_kind"] == kind and r["gpu_kind"] == chip and scale_band(r["num_gpus"]) == band,
             lambda r: r["framework_kind"] == kind and r["gpu_kind"] == chip,
             lambda r: r["gpu_kind"] == chip,
             lambda r: True)
    for level, test in enumerate(tests):
        found = [r for r in rows if test(r)]
        if len(found) >= MIN_ROWS or level == len(tests) - 1:
            return found, level
    raise AssertionError("unreachable")


def match(asked: dict, rows) -> dict:
    """The neighbours of the run `asked` ({framework, gpu, num_gpus, era, moe}) among `rows`: {rows, level, matched,
    era, era_matched, centre, within, sources} (centre: the mean of their ℓ; within: its pooled within-source standard
    deviation, each source's runs about their own mean; sources: how many publications; matched: a close match, level
    ≤ 1 with a neighbour of the asked era)."""
    found, level = similar_rows(asked["framework"], asked["gpu"], asked["num_gpus"], rows, asked.get("moe", False))
    errors = [log_error(r) for r in found]
    era = asked.get("era", CURRENT_ERA)
    era_matched = any(era_of(r["software_year"]) == era for r in found)
    by_source = {}
    for r in found:
        by_source.setdefault(r["publication"], []).append(log_error(r))
    free = len(errors) - len(by_source)        # pooled within-source variance: each source about its own mean
    within = (math.sqrt(sum((e - mean(g)) ** 2 for g in by_source.values() for e in g) / free) if free > 0
              else (stdev(errors) if len(errors) > 1 else 0.0))
    return {"rows": found, "level": level, "era": era, "era_matched": era_matched,
            "matched": level <= 1 and era_matched, "centre": mean(errors), "within": within, "sources": len(by_source)}


def asked_as_row(row: dict, moe: bool) -> dict:
    """A published row asked as a new run: its framework kind (as a framework), GPU, GPU count, its own era."""
    framework = "torchtitan" if row["framework_kind"] == "pytorch" else row["framework_kind"]
    return {"framework": framework, "gpu": row["gpu"], "num_gpus": row["num_gpus"],
            "era": era_of(row["software_year"]), "moe": moe}


def source_deviations(rows, moe: bool = False) -> list[dict]:
    """For each source (publication) of `rows` and each kind of match its runs get: how far its runs' mean ℓ lies from
    the centre the OTHER sources give them, {publication, matched, deviation, rows} (module docstring)."""
    rows = list(rows)
    out = []
    for publication in dict.fromkeys(r["publication"] for r in rows):
        others = [r for r in rows if r["publication"] != publication]
        if not others:
            continue
        by_kind = {}
        for r in rows:
            if r["publication"] == publication:
                m = match(asked_as_row(r, moe), others)
                by_kind.setdefault(m["matched"], []).append(log_error(r) - m["centre"])
        out += [{"publication": publication, "matched": matched, "deviation": mean(d), "rows": len(d)}
                for matched, d in by_kind.items()]
    return out


@lru_cache(maxsize=2)
def _published_deviations(moe: bool) -> tuple[dict, ...]:
    return tuple(source_deviations(moe_rows() if moe else published_rows(), moe))


def between_sources(deviations, matched: bool) -> tuple[float, int]:
    """(τ, k): the root mean square of the deviations a close (`matched`) or widened match uses (module docstring),
    and how many there are; (nan, 0) when no deviation could be measured (a pool of one source)."""
    def rms(values):
        return (math.sqrt(mean(v * v for v in values)), len(values)) if values else None
    close = rms([d["deviation"] for d in deviations if d["matched"]])
    wide = rms([d["deviation"] for d in deviations if not d["matched"]])
    choices = [close or wide] if matched else [x for x in (close, wide) if x]
    return max(choices) if choices and choices[0] else (math.nan, 0)


def log_range(m: dict, deviations) -> dict:
    """{low, high, tau, k}: the range of ℓ a new run with neighbours `m` (match) falls in (module docstring). With no
    deviation measured (one source in the pool) τ is the root mean square of the neighbours' ℓ about zero."""
    errors = [log_error(r) for r in m["rows"]]
    tau, k = between_sources(deviations, m["matched"])
    if k == 0:
        tau, k = math.sqrt(mean(e * e for e in errors)), max(1, len(errors) - 1)
    half = t_95(k) * math.sqrt(tau ** 2 * (1 + 1 / m["sources"]) + m["within"] ** 2 * (1 + 1 / len(errors)))
    return {"low": min(m["centre"] - half, min(errors)), "high": max(m["centre"] + half, max(errors)), "tau": tau,
            "k": k}


def step_interval(step_seconds: float, tokens_per_step: float, framework: str, gpu_name: str, num_gpus: int,
                  rows=None, moe: bool = False, era: str = CURRENT_ERA) -> dict:
    """The range of a predicted step as the published runs most like it and the spread between sources give it:
    {"step_seconds_low", "step_seconds_high", "tokens_per_s_low", "tokens_per_s_high", "interval_rows",
    "interval_sources", "interval_basis", "interval_widened", "interval_low_fraction", "interval_high_fraction",
    "interval_observed_low", "interval_observed_high", "interval_between_sources", "interval_words"}; the range holds
    `step_seconds`. `rows`: the published rows to rest on (default: all, with their deviations computed once);
    `moe`: a mixture-of-experts model's (the published MoE runs); `era`: the asked code's (ERAS; default today's)."""
    asked = {"framework": framework, "gpu": gpu_name, "num_gpus": num_gpus, "era": era, "moe": moe}
    pool = (moe_rows() if moe else published_rows()) if rows is None else rows
    deviations = _published_deviations(moe) if rows is None else source_deviations(pool, moe)
    return interval_from(step_seconds, tokens_per_step, match(asked, pool), deviations, moe)


def interval_from(step_seconds: float, tokens_per_step: float, m: dict, deviations, moe: bool = False) -> dict:
    """step_interval's answer from a match `m` and the pool's source deviations."""
    r = log_range(m, deviations)
    low = min(step_seconds, step_seconds * math.exp(-r["high"]))
    high = max(step_seconds, step_seconds * math.exp(-r["low"]))
    observed = [1 / (1 + row["error"]) - 1 for row in m["rows"]]       # published / predicted − 1
    sources = len({row["publication"] for row in m["rows"]})
    out = {"step_seconds_low": low, "step_seconds_high": high, "tokens_per_s_low": tokens_per_step / high,
           "tokens_per_s_high": tokens_per_step / low, "interval_rows": len(m["rows"]), "interval_sources": sources,
           "interval_basis": ("published MoE runs: " if moe else "") + LEVELS[m["level"]]
           + ("" if m["era_matched"] else f", none running {m['era']}"),
           "interval_widened": not m["matched"], "interval_low_fraction": low / step_seconds - 1,
           "interval_high_fraction": high / step_seconds - 1, "interval_observed_low": min(observed),
           "interval_observed_high": max(observed), "interval_between_sources": math.expm1(r["tau"])}
    out["interval_words"] = interval_words(out, m, moe)
    return out


def interval_words(out: dict, m: dict, moe: bool) -> str:
    """'runs like this one took 7–29 % longer than this model's estimate (5 published runs, 1 source); the range adds
    how far one source's runs land from another's (±4 %)', saying where the match was widened and why."""
    runs = "MoE runs" if moe else "runs"
    lead = (f"{runs} like this one" if m["level"] == 0
            else f"no published {runs[:-1]} this near: widened to {LEVELS[m['level']]}, the nearest")
    if not m["era_matched"]:
        theirs = ", ".join(sorted({era_of(r["software_year"]) for r in m["rows"]}))
        lead += f" (none runs {m['era']}: theirs is {theirs})"
    n, k = out["interval_rows"], out["interval_sources"]
    return (f"{lead} took {took(out['interval_observed_low'], out['interval_observed_high'])} than this model's "
            f"estimate ({n} published run{'s' * (n != 1)}, {k} source{'s' * (k != 1)}); the range adds how far one "
            f"source's runs land from another's (±{100 * out['interval_between_sources']:.0f} %"
            f"{', as far as widened matches missed' if not m['matched'] else ''})")


def took(low: float, high: float) -> str:
    """'7–29 % longer', '3–12 % less', '3 % less to 12 % longer' for published/predicted − 1 in [low, high]."""
    a, b = round(100 * low), round(100 * high)
    if a >= 0:
        return f"{a}–{b} % longer" if a != b else f"{a} % longer"
    if b <= 0:
        return f"{-b}–{-a} % less" if a != b else f"{-a} % less"
    return f"{-a} % less to {b} % longer"


def t_95(df: int) -> float:
    """Student's t one-sided 0.95 quantile for `df` degrees of freedom (T_95; between tabulated values the next
    lower df, which is wider)."""
    if df > 30:
        return 1.645
    return T_95[max(k for k in T_95 if k <= max(1, df))]


def error_range(errors: list[float]) -> tuple[float, float]:
    """(low, high) errors a next run like these falls in: mean ± t(0.95, n−1)·sd·√(1 + 1/n), widened to include
    every observed error (one error: that error alone). The neighbours' part of the range without the spread between
    sources (log_range adds it)."""
    lo, hi = min(errors), max(errors)
    if len(errors) < 2:
        return lo, hi
    half = t_95(len(errors) - 1) * stdev(errors) * (1 + 1 / len(errors)) ** 0.5
    return min(lo, mean(errors) - half), max(hi, mean(errors) + half)


def leave_one_out(rows=None, moe: bool = False) -> list[dict]:
    """For each published row, the interval built from the OTHER rows (as step_interval would give it for that run,
    asked as the code it ran), whether the published step lies inside it, and its width as a fraction of the predicted
    step: a row is never its own evidence (its source's other rows are: interval_check.leave_one_source_out is the
    honest check). Each {source, label, inside, rows, low, high, width} (low, high: the interval's step seconds)."""
    rows = list((moe_rows() if moe else published_rows()) if rows is None else rows)
    return [check_row(r, rows[:i] + rows[i + 1:], source_deviations(rows[:i] + rows[i + 1:], moe), moe)
            for i, r in enumerate(rows)]


def check_row(row: dict, pool, deviations, moe: bool) -> dict:
    """{source, label, inside, rows, low, high, width} of `row`'s interval built from `pool` (which lacks it)."""
    step = row["predicted_step_seconds"]
    iv = interval_from(step, 1.0, match(asked_as_row(row, moe), pool), deviations, moe)
    low, high = iv["step_seconds_low"], iv["step_seconds_high"]
    return {"source": row["source"], "label": row["label"], "inside": low <= row["published_step_seconds"] <= high,
            "rows": iv["interval_rows"], "low": low, "high": high, "width": (high - low) / step,
            "widened": iv["interval_widened"]}
