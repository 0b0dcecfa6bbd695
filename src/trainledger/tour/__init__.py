"""The executable lecture: CS336 Lecture 2 (Spring 2025) re-run section by section, each claim checked.

    from trainledger.tour import SECTIONS, select_sections, run_tour
    result = run_tour(select_sections(["tensors-memory"]), device="cpu")
    result["counts"]            # {"pass": 9, "fail": 0, "skip": 0}

Each section prints the values the lecture inspects and one pass/fail/skip line per claim. Measured
numbers (FLOPs, memory, time, MFU) come from `trainledger.measure`, predicted ones from
`trainledger.account`; the only numbers typed in are the lecture's published values a claim compares
against, each quoted with where it appears. Where the lecture's code slips, the tour does the right
thing and says what the lecture printed (see each section's notes).
"""

from __future__ import annotations

from trainledger.errors import TrainledgerError
from trainledger.tour import compute, models, operations, precision, questions, tensors, training
from trainledger.tour.runner import Section, Tour, count_statuses, run_section, run_tour

SECTIONS: list[Section] = [
    *questions.SECTIONS,
    *tensors.SECTIONS,
    *operations.SECTIONS,
    *compute.SECTIONS,
    *models.SECTIONS,
    *training.SECTIONS,
    *precision.SECTIONS,
]


def section_names() -> list[str]:
    """Names of all sections, in lecture order."""
    return [section.name for section in SECTIONS]


def select_sections(names: list[str] | None, flag: str = "--section") -> list[Section]:
    """The sections named in `names` (lecture order kept; '_' accepted for '-'); all of them for None/empty.

    An unknown name is a TrainledgerError listing every known name.
    """
    if not names:
        return list(SECTIONS)
    by_name = {section.name: section for section in SECTIONS}
    wanted = set()
    for name in names:
        key = name.strip().lower().replace("_", "-")
        if key not in by_name:
            raise TrainledgerError(f"unknown section {name!r} ({flag}). Known: {', '.join(by_name)}")
        wanted.add(key)
    return [section for section in SECTIONS if section.name in wanted]


__all__ = ["SECTIONS", "Section", "Tour", "count_statuses", "run_section", "run_tour", "section_names",
           "select_sections"]
