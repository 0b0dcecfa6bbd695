"""Runs the tour's sections and returns one pass/fail/skip record per claim; an Exception never escapes it.

A section is a function `run(tour: Tour) -> None` that shows the values the lecture inspects and
checks its claims inside `with tour.claim("...") as c:` blocks:

    with tour.claim("fp16 underflows 1e-8 to zero") as c:
        x = torch.tensor([1e-8], dtype=torch.float16)
        c.check(x.item() == 0, fp16_value=x.item())

A claim passes when it made at least one check and every check held; it fails when a check did not
hold, when it made no check (a claim that cannot fail is a defect), or when its block raised — the
error goes into its values and the tour goes on. `c.skip(reason)` marks it skipped (GPU-only claims
without CUDA). An exception outside any claim block ends that section with one failed claim.
"""

from __future__ import annotations

import math
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

STATUSES = ("pass", "fail", "skip")


class SkipClaim(Exception):
    """Raised by `ClaimCheck.skip`: the claim cannot be checked here (the reason says why)."""


@dataclass
class Section:
    """One section of the lecture: `name` (kebab-case, for --section), a title, the lecture function(s) it follows."""

    name: str
    title: str
    run: Callable[["Tour"], None]
    lecture: str = ""  # the lecture_02.py function(s) this section re-runs


@dataclass
class ClaimCheck:
    """The record of one claim while its block runs; becomes a dict in the result."""

    claim: str
    values: dict = field(default_factory=dict)
    checks: list = field(default_factory=list)
    status: str = "fail"

    def check(self, condition, **values) -> bool:
        """Record `values` (a JSON snapshot, taken now) and whether `condition` held; returns it (the block goes on)."""
        self.values.update(_jsonable(values))
        held = bool(condition)
        self.checks.append(held)
        return held

    def approx(self, value: float, expected: float, /, *, rel: float = 1e-9, abs_: float = 0.0, **values) -> bool:
        """Check |value - expected| <= max(rel·|expected|, abs_), recording `values` (name both in them)."""
        ok = (isinstance(value, (int, float)) and math.isfinite(value)
              and abs(value - expected) <= max(rel * abs(expected), abs_))
        return self.check(ok, **values)

    def skip(self, reason: str):
        """Stop this claim and mark it skipped with `reason` (e.g. 'no CUDA device')."""
        raise SkipClaim(reason)

    def to_dict(self) -> dict:
        return {"claim": self.claim, "status": self.status, "values": _jsonable(self.values)}


class _ClaimBlock:
    """Context manager behind `Tour.claim`: turns checks, skips and exceptions into a status."""

    def __init__(self, tour: "Tour", text: str):
        self.tour = tour
        self.record = ClaimCheck(text)

    def __enter__(self) -> ClaimCheck:
        return self.record

    def __exit__(self, exc_type, exc, tb) -> bool:
        record = self.record
        if exc_type is not None and issubclass(exc_type, SkipClaim):
            record.status = "skip"
            record.values["reason"] = str(exc)
        elif exc_type is not None and issubclass(exc_type, Exception):
            record.status = "fail"
            record.values["error"] = f"{exc_type.__name__}: {exc}"
        elif exc_type is not None:
            return False  # KeyboardInterrupt and friends go through
        elif not record.checks:
            record.status = "fail"
            record.values["error"] = "the claim made no check"
        else:
            record.status = "pass" if all(record.checks) else "fail"
        self.tour.claims.append(record)
        return True


class Tour:
    """What a section function receives: the device, a scratch folder, and the recorders."""

    def __init__(self, device: str, workdir: Path):
        self.device = device          # "cpu" or "cuda"
        self.workdir = workdir        # scratch files (data.npy, checkpoints); removed after the run
        self.claims: list[ClaimCheck] = []
        self.inspected: list[tuple[str, object]] = []
        self.notes: list[str] = []

    def claim(self, text: str) -> _ClaimBlock:
        """`with tour.claim(text) as c:` — see the module docstring."""
        return _ClaimBlock(self, text)

    def inspect(self, label: str, value) -> None:
        """Show a value the lecture inspects (`# @inspect` in lecture_02.py)."""
        self.inspected.append((label, _jsonable(value)))  # a snapshot: later in-place writes don't show

    def note(self, text: str) -> None:
        """A remark printed with the section: where the lecture's code slips and what the tour does instead."""
        self.notes.append(text)

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"


def run_section(section: Section, device: str, workdir: Path) -> dict:
    """The result of one section: {name, title, lecture, inspected, notes, claims, seconds}; never raises."""
    tour = Tour(device, workdir)
    start = time.perf_counter()
    try:
        section.run(tour)
    except Exception as error:  # the tour never crashes: the section ends with one failed claim
        record = ClaimCheck(f"section '{section.name}' runs to completion", status="fail")
        frame = traceback.extract_tb(error.__traceback__)[-1]
        record.values = {"error": f"{type(error).__name__}: {error}", "at": f"{Path(frame.filename).name}:{frame.lineno}"}
        tour.claims.append(record)
    return {
        "name": section.name,
        "title": section.title,
        "lecture": section.lecture,
        "inspected": [{"label": label, "value": value} for label, value in tour.inspected],
        "notes": list(tour.notes),
        "claims": [claim.to_dict() for claim in tour.claims],
        "seconds": time.perf_counter() - start,
    }


def run_tour(sections: list[Section], device: str, on_section: Callable[[dict], None] | None = None) -> dict:
    """{"device", "sections": [...], "counts": {pass, fail, skip}, "seconds"} for `sections`, in order.

    `on_section(result)` is called as each section finishes (the CLI prints as it goes).
    """
    start = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory(prefix="trainledger-tour-") as scratch:
        for section in sections:
            workdir = Path(scratch) / section.name
            workdir.mkdir()
            result = run_section(section, device, workdir)
            results.append(result)
            if on_section is not None:
                on_section(result)
    return {"device": device, "sections": results, "counts": count_statuses(results),
            "seconds": time.perf_counter() - start}


def count_statuses(section_results: list[dict]) -> dict:
    """{"pass": n, "fail": n, "skip": n} over all claims of `section_results`."""
    counts = dict.fromkeys(STATUSES, 0)
    for section in section_results:
        for claim in section["claims"]:
            counts[claim["status"]] += 1
    return counts


def _jsonable(value):
    """`value` as plain JSON data: tensors and arrays become numbers or lists, dtypes and devices strings."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    tolist = getattr(value, "tolist", None)  # torch.Tensor, numpy arrays and scalars, torch.Size
    if callable(tolist):
        try:
            return _jsonable(tolist())
        except (TypeError, RuntimeError):
            pass
    return str(value)
