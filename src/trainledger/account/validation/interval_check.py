"""The interval checked as it is used, on a source it has never seen (account/validation/interval.py). Pure.

`leave_one_source_out`: every publication, then every framework kind, held out in turn; the interval of each held-out
run is built from the other rows alone (their source deviations too: nothing of the held-out group enters), the run
asked as the code it ran; whether its published step lies inside, and how wide the range is. `headline_check`: whether
moving the headline by the neighbours' mean error would have helped a held-out source (it decides what the headline
is: interval.py's docstring). Both are tables of docs/time.md (account/validation/tables.py).
"""

from __future__ import annotations

import math
import statistics

from trainledger.account.validation.interval import (asked_as_row, check_row, log_error, match,
                                                     source_deviations)
from trainledger.account.validation.published import moe_rows, published_rows


def leave_one_source_out(rows=None, moe: bool = False) -> list[dict]:
    """For each publication and each framework kind of `rows` (default: the published dense rows, or the MoE rows),
    the runs held out with it: {held_out, by ("source" or "framework kind"), n, inside, coverage, median_width,
    widened, checks} (checks: interval.check_row of each run)."""
    rows = list((moe_rows() if moe else published_rows()) if rows is None else rows)
    out = []
    for by, key in (("source", "publication"), ("framework kind", "framework_kind")):
        for group in dict.fromkeys(r[key] for r in rows):
            pool = [r for r in rows if r[key] != group]
            held = [r for r in rows if r[key] == group]
            if not pool:
                continue
            deviations = source_deviations(pool, moe)
            checks = [check_row(r, pool, deviations, moe) for r in held]
            inside = sum(c["inside"] for c in checks)
            out.append({"held_out": group, "by": by, "n": len(held), "inside": inside, "coverage": inside / len(held),
                        "median_width": statistics.median(c["width"] for c in checks),
                        "widened": sum(c["widened"] for c in checks), "checks": checks})
    return out


def headline_check(rows=None, moe: bool = False) -> dict:
    """How far each publication's mean ℓ = ln(predicted / published) lies from zero (the model's own headline) and from
    the neighbours' mean the OTHER publications give it (a headline moved by that mean): {"raw", "moved"} root mean
    squares over the publications, and "publications" (k). A moved headline is worth it only if "moved" < "raw"."""
    rows = list((moe_rows() if moe else published_rows()) if rows is None else rows)
    raw, moved = [], []
    for publication in dict.fromkeys(r["publication"] for r in rows):
        own = [r for r in rows if r["publication"] == publication]
        others = [r for r in rows if r["publication"] != publication]
        if not others:
            continue
        raw.append(statistics.mean(log_error(r) for r in own))
        moved.append(statistics.mean(log_error(r) - match(asked_as_row(r, moe), others)["centre"] for r in own))
    rms = lambda values: math.sqrt(statistics.mean(v * v for v in values))  # noqa: E731
    return {"raw": rms(raw), "moved": rms(moved), "publications": len(raw)}
