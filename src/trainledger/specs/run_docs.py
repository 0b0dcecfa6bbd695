"""The run file's fields as a Markdown table for docs/conventions.md, made from the one table (specs/run_table.py).

    python -m trainledger.specs.run_docs --write docs/conventions.md   # rewrite the block
    python -m trainledger.specs.run_docs --check docs/conventions.md   # exit 1 when the page falls behind the table

The block sits between `<!-- run-file -->` and `<!-- /run-file -->`: one row per key of the file (its section, key,
flag, default, unit, the commands that take it and what it means). tests/specs/test_run_docs.py fails when the
page shows other rows than the table gives. Pure, no torch.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from trainledger.specs import run_file
from trainledger.specs.run import Run
from trainledger.specs.run_table import fields_by_path

BLOCK = re.compile(r"(<!-- run-file -->\n)(?P<body>.*?)(<!-- /run-file -->)", re.S)


def _default(value) -> str:
    if value is None:
        return "decided (see meaning)"
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def rows() -> list[str]:
    """The Markdown table of every key of a run file."""
    out = ["| key | flag | default | unit | commands | meaning |", "|---|---|---|---|---|---|"]
    for key, (flag, types, meaning) in run_file.MODEL_KEYS.items():
        out.append(f"| `model.{key}` | `{flag}` | — | — | all | {_cell(meaning)} |")
    for key, (flag, types, meaning) in run_file.HARDWARE_KEYS.items():
        out.append(f"| `hardware.{key}` | `{flag}` | — | — | all | {_cell(meaning)} |")
    defaults = Run()
    for path, f in fields_by_path().items():
        value = defaults
        for part in path.split("."):
            value = getattr(value, part)
        s = f.metadata.get("setting")
        if s is None:
            out.append(f"| `{path}` | (file only) | {_default(value)} | — | — | {_cell(f.metadata.get('help', ''))} |")
            continue
        commands = ", ".join(sorted(s.commands))
        out.append(f"| `{path}` | `{s.flag}` | {_default(value)} | {s.unit or '—'} | {commands} | {_cell(s.help)} |")
    return out


def render() -> str:
    return "\n".join(rows()) + "\n"


def rewrite(text: str) -> str:
    """`text` with its run-file block replaced by render(); an error when the page has no block."""
    if not BLOCK.search(text):
        raise SystemExit("no <!-- run-file --> ... <!-- /run-file --> block in the page")
    return BLOCK.sub(lambda m: m.group(1) + render() + m.group(3), text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainledger.specs.run_docs", description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", metavar="PAGE")
    action.add_argument("--check", metavar="PAGE")
    args = parser.parse_args(argv)
    page = Path(args.write or args.check)
    text = page.read_text(encoding="utf-8")
    new = rewrite(text)
    if args.write:
        page.write_text(new, encoding="utf-8")
        return 0
    if new != text:
        sys.stderr.write(f"{page}: the run-file table is behind specs/run.py; run with --write {page}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
