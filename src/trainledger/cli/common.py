"""Shared pieces of the subcommands: argparse types that name what is allowed, and table/JSON output.

Types raise argparse.ArgumentTypeError, so argparse prefixes the flag:
    error: flops: argument --seq-len: must be a positive integer, got '0'
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from trainledger import units
from trainledger.errors import TrainledgerError


def _wrap(parse, what):
    def convert(text):
        try:
            value = parse(text)
        except TrainledgerError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return value
    convert.__name__ = what
    return convert


# Sizes, counts of GPUs, steps...: beyond int64 nothing is meaningful, and float arithmetic would overflow.
LARGEST_INT = 2**63 - 1


def positive_int(text: str) -> int:
    """A positive integer below 2^63: '8', '1024', '4K' (SI suffixes allowed)."""
    try:
        value = units.parse_count(text)
    except TrainledgerError:
        value = None
    if value is None or not math.isfinite(value) or value <= 0 or value != int(value):
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    if value > LARGEST_INT:
        raise argparse.ArgumentTypeError(f"must be a positive integer below 2^63, got {text!r}")
    return int(value)


def nonnegative_int(text: str) -> int:
    try:
        value = units.parse_count(text)
    except TrainledgerError:
        value = None
    if value is None or not math.isfinite(value) or value < 0 or value != int(value):
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {text!r}")
    return int(value)


def positive_count(text: str) -> float:
    """A positive count: '70B', '15T', '1.5e13'."""
    value = _wrap(units.parse_count, "count")(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def positive_bytes(text: str) -> float:
    """A positive size: '80GB' (1e9), '80GiB' (2^30), or bytes."""
    value = _wrap(units.parse_bytes, "bytes")(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive size like 80GB or 80GiB, got {text!r}")
    return value


def _float(text: str) -> float:
    """`text` as a float, NaN when it is not a number (the caller's range check then rejects it)."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def fraction(text: str) -> float:
    """A number in (0, 1]: MFU, efficiency."""
    value = _float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0: learning rates, ratios."""
    value = _float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object in base units (bytes, FLOPs, seconds) instead of a table")


def print_json(data) -> None:
    """One JSON document on stdout; floats that are whole stay numbers, NaN/inf become null."""
    sys.stdout.write(json.dumps(json_ready(data), indent=2) + "\n")


def json_ready(value):
    """`value` with NaN/inf replaced by None, keys as strings, tuples as lists: safe for json.dumps."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


def console():
    """A rich Console for tables (imported lazily: rich costs ~50 ms at startup)."""
    from rich.console import Console
    return Console(highlight=False)


def table(title: str, columns: list[str], rows: list[list], caption: str | None = None):
    """A rich Table with right-aligned columns after the first."""
    from rich.table import Table
    t = Table(title=title, caption=caption, caption_justify="left", title_justify="left")
    for i, name in enumerate(columns):
        t.add_column(name, justify="left" if i == 0 else "right")
    for row in rows:
        t.add_row(*[str(cell) for cell in row])
    return t


def approximation_notes(spec) -> list[str]:
    """One assumption line per part of a config.json that trainledger's Transformer does not reproduce
    (`spec.approximations`, filled by specs/hf_config.py: RoPE scaling, MPT's qk_ln, ...); [] for presets."""
    return [f"approximated: {note}" for note in getattr(spec, "approximations", ())]
