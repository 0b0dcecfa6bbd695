"""`trainledger tour`: run CS336 Lecture 2 as an executable lecture, one checked claim at a time.

Exit status 0 when no claim failed, 1 when one did, 2 for bad flags (unknown --section, --device cuda
without a GPU). Skipped claims (GPU-only, without CUDA) do not fail the tour; their reason is printed.
"""

from __future__ import annotations

import json
import math

from trainledger.cli import common
from trainledger.errors import TrainledgerError

HELP = "run CS336 Lecture 2 as an executable lecture: each section's values and a pass/fail line per claim"
DESCRIPTION = HELP + """

Sections follow the lecture in order (`trainledger tour --list`). Measured numbers come from
trainledger.measure, predicted ones from trainledger.account; claims compare them with each other and
with the lecture's published values. Where the lecture's own code slips (one week computed for "two
weeks", train() ignoring lr, get_batch returning only x, no warm-up in time_matmul) the tour does the
right thing and says what the lecture printed. Sizes are CPU-small; the whole tour takes seconds.

examples:
  trainledger tour                                  # everything, tables
  trainledger tour --section gradients-flops optimizer
  trainledger tour --json > tour.json               # {"sections": [{"name", "claims": [...]}]}
"""

MARKS = {"pass": ("PASS", "green"), "fail": ("FAIL", "bold red"), "skip": ("SKIP", "yellow")}


def add_arguments(parser) -> None:
    parser.add_argument("--section", metavar="NAME", nargs="+", action="extend", default=None,
                        help="run only these sections (repeatable; see --list); default: all, in lecture order")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="where tensors live (default: cuda if available, else cpu)")
    parser.add_argument("--list", action="store_true", help="list the sections and exit")
    common.add_json_flag(parser)


def run(args) -> int:
    from trainledger.tour import SECTIONS, run_tour, select_sections

    if args.list:
        return _list(SECTIONS, args)
    sections = select_sections(args.section)
    device = _device(args.device)
    console = None if args.json else common.console()
    on_section = None if args.json else (lambda result: _render_section(console, result))
    result = run_tour(sections, device, on_section=on_section)
    if args.json:
        common.print_json(result)
    else:
        _render_summary(console, result)
    return 1 if result["counts"]["fail"] else 0


def _device(requested: str | None) -> str:
    """'cuda' or 'cpu': the requested device, checked; CUDA when available if none was requested."""
    import torch

    available = torch.cuda.is_available()
    if requested == "cuda" and not available:
        raise TrainledgerError("--device cuda was requested but torch sees no CUDA device; use --device cpu")
    return requested or ("cuda" if available else "cpu")


def _list(sections, args) -> int:
    rows = [{"name": s.name, "title": s.title, "lecture": s.lecture} for s in sections]
    if args.json:
        common.print_json(rows)
    else:
        from rich.table import Table

        table = Table(title="Sections of `trainledger tour`, in lecture order", title_justify="left")
        for column in ("name", "title", "lecture_02.py"):
            table.add_column(column, justify="left", overflow="fold")
        for r in rows:
            table.add_row(r["name"], r["title"], r["lecture"])
        common.console().print(table)
    return 0


def _render_section(console, result: dict) -> None:
    from rich.markup import escape
    from rich.table import Table

    console.rule(f"[bold]{escape(result['name'])}[/]: {escape(result['title'])}", align="left")
    if result["lecture"]:
        console.print(f"[dim]lecture_02.py: {escape(result['lecture'])}[/]")
    values = Table.grid(padding=(0, 2))
    values.add_column(style="default", max_width=48)
    values.add_column(style="cyan")
    for item in result["inspected"]:
        values.add_row(escape(item["label"]), escape(_short(item["value"], limit=240)))
    if result["inspected"]:
        console.print(values)
    lines = Table.grid(padding=(0, 1))
    lines.add_column(no_wrap=True)
    lines.add_column()
    for note in result["notes"]:
        lines.add_row("[italic magenta]note[/]", f"[italic]{escape(note)}[/]")
    for claim in result["claims"]:
        mark, style = MARKS[claim["status"]]
        text = escape(claim["claim"])
        if claim["status"] == "skip":
            text += f" [dim]({escape(str(claim['values'].get('reason', '')))})[/]"
        elif claim["status"] == "fail":
            text += f"\n[red]{escape(_short(claim['values'], limit=400))}[/]"
        lines.add_row(f"[{style}]{mark}[/]", text)
    console.print(lines)


def _render_summary(console, result: dict) -> None:
    counts = result["counts"]
    style = "bold red" if counts["fail"] else "bold green"
    console.rule()
    console.print(f"[{style}]{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped[/] "
                  f"in {len(result['sections'])} sections, {result['seconds']:.1f} s on {result['device']}")


def _short(value, limit: int = 110) -> str:
    """A one-line rendering of a JSON value: floats to 6 significant digits, long text cut with '…'."""
    text = _format(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _format(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_format(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_format(v) for v in value) + "]"
    if isinstance(value, str):
        return value
    return json.dumps(value)
