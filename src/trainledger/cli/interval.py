"""The error bar every time answer carries (`step`, `layout`, `plan --mfu auto`, `optimal --mfu auto`): the range a
run like it takes, from the published runs most like it and the spread between sources (account/validation/
interval.py), as JSON keys, a range in the answer's own unit and one line of words."""

from __future__ import annotations

from trainledger import units


def interval_of(step_seconds: float, tokens_per_step: float, framework: str, gpu_name: str, num_gpus: int,
                moe: bool = False) -> dict:
    """step_seconds_low/high, tokens_per_s_low/high, interval_rows, interval_basis, interval_words (and the
    fractions) for a predicted step; `moe`: a mixture-of-experts model's, from the published MoE runs."""
    from trainledger.account.validation.interval import step_interval
    return step_interval(step_seconds, tokens_per_step, framework, gpu_name, num_gpus, moe=moe)


def with_interval(seconds_text: str, result: dict) -> str:
    """'8.36 s (expect 8.10 s … 9.40 s)': the estimate and its range in seconds (the words: interval_line)."""
    return f"{seconds_text} (expect {range_text(result)})" if "interval_words" in result else seconds_text


def range_text(result: dict, key: str = "step_seconds", fmt=units.format_seconds) -> str:
    """'8.10 s … 9.40 s' from `key`_low/high (the step's seconds by default), each end in its own unit."""
    return f"{fmt(result[key + '_low'])} … {fmt(result[key + '_high'])}"


def interval_line(what: str, estimate_text: str, range_words: str, result: dict) -> str:
    """'step 8.36 s, expect 8.10 s … 9.40 s: published runs like this one took …': the estimate, the range it lies in
    (in the answer's unit) and why, in one line (tests/cli/test_interval_ranges.py reads it back)."""
    return f"{what} {estimate_text}, expect {range_words}: {result['interval_words']}"
