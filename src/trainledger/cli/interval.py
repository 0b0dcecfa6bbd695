"""The error bar every time answer carries (`step`, `layout`, `plan --mfu auto`): the range the most similar
published runs were off by (account/validation/interval.py), as JSON keys and one line of words."""

from __future__ import annotations

from trainledger import units


def interval_of(step_seconds: float, tokens_per_step: float, framework: str, gpu_name: str, num_gpus: int,
                moe: bool = False) -> dict:
    """step_seconds_low/high, tokens_per_s_low/high, interval_rows, interval_basis, interval_words (and the
    fractions) for a predicted step; `moe`: a mixture-of-experts model's, from the published MoE runs."""
    from trainledger.account.validation.interval import step_interval
    return step_interval(step_seconds, tokens_per_step, framework, gpu_name, num_gpus, moe=moe)


def with_interval(seconds_text: str, result: dict) -> str:
    """'8.36 s (runs like this: −3 … +12 %, 14 published)'."""
    return f"{seconds_text} ({result['interval_words']})" if "interval_words" in result else seconds_text


def range_text(result: dict) -> str:
    """'8.1 s … 9.4 s' from step_seconds_low/high."""
    return f"{units.format_seconds(result['step_seconds_low'])} … {units.format_seconds(result['step_seconds_high'])}"
