"""The closest known name to a mistyped one, for the "Did you mean" of an unknown --model or --gpu."""

from __future__ import annotations


def did_you_mean(key: str, names) -> str:
    """" Did you mean 'gpt2'?" for the closest of `names` to `key` (difflib, case and '-_. ' ignored), else ''."""
    import difflib

    def squash(text: str) -> str:
        return "".join(c for c in str(text).lower() if c not in "-_. ")

    by_squashed = {squash(n): n for n in names}
    close = difflib.get_close_matches(squash(key), list(by_squashed), n=1, cutoff=0.6)
    return f" Did you mean {by_squashed[close[0]]!r}?" if close else ""

