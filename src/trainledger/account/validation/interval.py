"""An error bar on a predicted step: the range the published runs most like it were off by. Pure.

"Like it": the same framework kind (Megatron-LM or eager PyTorch), the same GPU chip (account/validation/published.py
gpu_kind) and the same scale band (SCALE_BANDS). With fewer than MIN_ROWS such runs the match is widened step by
step (drop the scale band, then the framework kind, then the GPU chip: every published run), and the answer says
how far it went. The errors are computed from the published rows at run time with the model as it is, never typed
in. The errors e = predicted/published − 1 of those n runs give the range of the next one: the 90 % prediction
interval of a normal sample, mean ± t(0.95, n − 1) · sd · √(1 + 1/n) (Student's t; e.g. Hahn & Meeker,
"Statistical Intervals", 1991, Sec. 4.7), and never narrower than [e_min, e_max] itself. A run like these takes
    step / (1 + e_high) … step / (1 + e_low)
i.e. the published steps were off from ours by 1/(1 + e) − 1 (printed as "−3 … +12 %").
A mixture-of-experts model's answer rests on the published MoE runs (published.moe_rows), a dense model's on the
dense ones (published.published_rows): every published MoE run so far took longer than predicted, so a dense run's
range would hide that.
"""

from __future__ import annotations

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


def scale_band(num_gpus: int) -> str:
    """The band of SCALE_BANDS that `num_gpus` falls in."""
    return next(name for top, name in SCALE_BANDS if num_gpus <= top)


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


def step_interval(step_seconds: float, tokens_per_step: float, framework: str, gpu_name: str, num_gpus: int,
                  rows=None, moe: bool = False) -> dict:
    """{"step_seconds_low", "step_seconds_high", "tokens_per_s_low", "tokens_per_s_high", "interval_rows",
    "interval_basis", "interval_low_fraction", "interval_high_fraction", "interval_words"} for a predicted step
    (`moe`: of a mixture-of-experts model, from the published MoE runs)."""
    found, level = similar_rows(framework, gpu_name, num_gpus, rows, moe)
    e_low, e_high = error_range([r["error"] for r in found])
    low, high = step_seconds / (1 + e_high), step_seconds / (1 + e_low)
    low_fraction, high_fraction = low / step_seconds - 1, high / step_seconds - 1
    runs = "MoE runs" if moe else "runs"
    what = f"{runs} like this" if level == 0 else f"no published {runs[:-1]} this near: widened to {LEVELS[level]}"
    words = f"{what}: {_percent(low_fraction)} … {_percent(high_fraction)} %, {len(found)} published"
    return {"step_seconds_low": low, "step_seconds_high": high, "tokens_per_s_low": tokens_per_step / high,
            "tokens_per_s_high": tokens_per_step / low, "interval_rows": len(found),
            "interval_basis": ("published MoE runs: " if moe else "") + LEVELS[level],
            "interval_low_fraction": low_fraction, "interval_high_fraction": high_fraction,
            "interval_words": words.replace("-", "−")}


def _percent(fraction: float) -> str:
    """A signed whole percent without a negative zero: +10, −3, 0."""
    value = round(100 * fraction)
    return f"{value:+d}" if value else "0"


def t_95(df: int) -> float:
    """Student's t one-sided 0.95 quantile for `df` degrees of freedom (T_95; between tabulated values the next
    lower df, which is wider)."""
    if df > 30:
        return 1.645
    return T_95[max(k for k in T_95 if k <= df)]


def error_range(errors: list[float]) -> tuple[float, float]:
    """(low, high) signed errors a next run like these falls in: mean ± t(0.95, n−1)·sd·√(1 + 1/n), widened to
    include every observed error (one error: that error alone)."""
    lo, hi = min(errors), max(errors)
    if len(errors) < 2:
        return lo, hi
    half = t_95(len(errors) - 1) * stdev(errors) * (1 + 1 / len(errors)) ** 0.5
    return min(lo, mean(errors) - half), max(hi, mean(errors) + half)


def leave_one_out(rows=None, moe: bool = False) -> list[dict]:
    """For each published row, the interval built from the OTHER rows (as step_interval would give it for that run),
    whether the published step lies inside it, and its width as a fraction of the predicted step: an honest check
    of the intervals (a row is never its own evidence). Each {source, label, inside, rows, low, high, width}
    (low, high: the interval's step seconds)."""
    rows = list((moe_rows() if moe else published_rows()) if rows is None else rows)
    out = []
    for i, r in enumerate(rows):
        others = rows[:i] + rows[i + 1:]
        framework = "torchtitan" if r["framework_kind"] == "pytorch" else r["framework_kind"]
        iv = step_interval(r["predicted_step_seconds"], 1.0, framework, r["gpu"], r["num_gpus"], others, moe)
        inside = iv["step_seconds_low"] <= r["published_step_seconds"] <= iv["step_seconds_high"]
        out.append({"source": r["source"], "label": r["label"], "inside": inside, "rows": iv["interval_rows"],
                    "low": iv["step_seconds_low"], "high": iv["step_seconds_high"],
                    "width": (iv["step_seconds_high"] - iv["step_seconds_low"]) / r["predicted_step_seconds"]})
    return out
