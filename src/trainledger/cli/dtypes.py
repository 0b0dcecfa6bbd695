"""`trainledger dtypes`: the number formats, with range and precision computed from their bit layouts."""

from __future__ import annotations

from trainledger.cli import common

HELP = "list the number formats (bits, bytes, range, precision) computed from their bit layouts"


def add_arguments(parser) -> None:
    common.add_json_flag(parser)


def compute(args) -> list:
    from trainledger.specs.dtypes import DTYPES

    return [d.to_dict() for d in DTYPES]


def _g(x: float) -> str:
    """Whole numbers below 1e7 in full (65504, 57344), the rest with 3 significant digits."""
    return str(int(x)) if x == int(x) and abs(x) < 1e7 else f"{x:.3g}"


def render(result: list, args) -> None:
    from rich import box

    rows = []
    for r in result:
        is_float = r["kind"] == "float"
        rows.append([r["name"], r["bits"], f"{r['bytes']:g}", f"{r['sign_bits']}/{r['exponent_bits']}/{r['mantissa_bits']}",
                     _g(r["max"]), _g(r["smallest_normal"]) if is_float else "",
                     _g(r["smallest_subnormal"]) if is_float else "", _g(r["eps"]) if is_float else ""])
    table = common.table(
        "Number formats (all values computed from the sign/exponent/mantissa bits)",
        ["dtype", "bits", "bytes", "s/e/m", "max", "normal", "subnormal", "eps"], rows,
        "normal / subnormal: the smallest positive normal / subnormal value; eps = 2^-mantissa bits.\n"
        "tf32 is stored in 32 bits; fp8-e4m3 is finite-only (max 448); int4 packs two per byte.\n"
        "Aliases: " + "; ".join(f"{r['name']} = {', '.join(r['aliases'])}" for r in result if r["aliases"]))
    table.box, table.pad_edge, table.collapse_padding = box.SIMPLE_HEAD, False, True
    for column in table.columns:
        column.no_wrap = True
    common.console().print(table)
