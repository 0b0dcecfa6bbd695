"""Parse and format quantities: counts (SI), bytes (SI in, IEC out), FLOPs, durations.

Everything inside trainledger is in base units — a count, bytes, FLOPs, FLOP/s, seconds.
Conversion happens only here, at the edges:

    parse_count("15T") == 15e12          parse_count("1.5e13") == 1.5e13     parse_count("70B") == 70e9
    parse_bytes("80GB") == 80e9          parse_bytes("80GiB") == 80 * 2**30
    parse_seconds("14d") == 14 * 86400   parse_seconds("2w") == 14 * 86400

Counts and FLOPs are shown with SI prefixes (a 175B model is "175B", never "162.98G");
memory shown to humans is IEC (GiB) and always labelled.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from trainledger.errors import TrainledgerError

# SI prefixes for counts. "B" (billion) is the ML habit for 1e9 parameters; "G" is accepted too.
COUNT_SUFFIXES = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
BYTE_SUFFIXES = {
    "": 1, "b": 1, "B": 1,
    "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "PB": 1e15,
    "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
}
COUNT_SUFFIXES_EXACT = {k: int(v) for k, v in COUNT_SUFFIXES.items()}
SECOND_SUFFIXES = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0, "y": 365 * 86400.0}

# A comma only separates thousands, in groups of three after the first one to three digits ("1,024", "15,000,000"):
# "1,5T" is not 15T (a decimal comma, as many locales write 1.5), nor is "0,5" 5 or "1,,0" 10; they are refused.
_NUMBER = r"([-+]?(?:(?:\d{1,3}(?:,\d{3})+|\d[\d_]*)(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
_QUANTITY = re.compile(rf"^\s*{_NUMBER}\s*([A-Za-z]*)\s*$")


def _split(text: str, what: str, flag: str | None, suffixes: dict) -> tuple[float, str]:
    match = _QUANTITY.match(str(text))
    if not match or match.group(2) not in suffixes:
        if "," in str(text):
            raise TrainledgerError(f"cannot parse {what} {text!r}: a comma only separates thousands in groups of three "
                                   "(1,024 or 15,000,000); write a decimal with a point (1.5, not 1,5)", flag)
        allowed = ", ".join(k for k in suffixes if k) or "none"
        raise TrainledgerError(f"cannot parse {what} {text!r}; use a number like 1.5e13 with an optional suffix ({allowed})", flag)
    number = float(match.group(1).replace("_", "").replace(",", ""))
    if not math.isfinite(number):
        raise TrainledgerError(f"{what} must be finite, got {text!r}", flag)
    return number, match.group(2)


def parse_count(text: str | float | int, flag: str | None = None) -> float:
    """A count (parameters, tokens, FLOPs) from '15T', '70B', '1.5e13', '124M' or a number."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    number, suffix = _split(text, "count", flag, COUNT_SUFFIXES)
    return number * COUNT_SUFFIXES[suffix]


def parse_integer(text: str | int, flag: str | None = None) -> int | None:
    """The whole number `text` names, exactly ('8', '4K', '1e3', '99999999999999999'), or None when it names a
    fraction ('1.5'). Parsed as a Fraction, never through a float: 9007199254740993 stays odd (a float would
    make it ...992), 99999999999999999 is not 1e17. TrainledgerError when it is no number at all."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    match = _QUANTITY.match(str(text))
    if not match or match.group(2) not in COUNT_SUFFIXES:
        _split(text, "count", flag, COUNT_SUFFIXES)          # raises the one-line error
    digits = match.group(1).replace("_", "").replace(",", "")
    if len(digits) > 400:                                    # Fraction('1e999999999') would build a huge int
        raise TrainledgerError(f"count {str(text)[:40]!r}... is too long", flag)
    mantissa, _, exponent = digits.lower().partition("e")
    if exponent and abs(int(exponent)) > 400:
        raise TrainledgerError(f"count {text!r} is out of range", flag)
    value = Fraction(digits) * Fraction(COUNT_SUFFIXES_EXACT[match.group(2)])
    return int(value) if value.denominator == 1 else None


def parse_bytes(text: str | float | int, flag: str | None = None) -> float:
    """Bytes from '80GB' (SI, 80e9), '80GiB' (IEC, 80·2^30), '80G' (SI) or a plain number of bytes."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    number, suffix = _split(text, "size in bytes", flag, BYTE_SUFFIXES)
    return number * BYTE_SUFFIXES[suffix]


def parse_seconds(text: str | float | int, flag: str | None = None, default_unit: str = "s") -> float:
    """Seconds from '14d', '2w', '36h', '90min', '30s'; a bare number is in `default_unit`."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text) * SECOND_SUFFIXES[default_unit]
    number, suffix = _split(text, "duration", flag, SECOND_SUFFIXES)
    return number * SECOND_SUFFIXES[suffix or default_unit]


def positive(value: float, flag: str, integer: bool = False):
    """`value` if it is > 0 (and whole, when `integer`), else a TrainledgerError naming the flag."""
    kind = "a positive integer" if integer else "positive"
    if value is None or not math.isfinite(value) or value <= 0 or (integer and value != int(value)):
        raise TrainledgerError(f"{flag} must be {kind}, got {value!r}")
    return int(value) if integer else value


def format_count(n: float, digits: int = 3) -> str:
    """SI count for humans: 124439808 -> '124M', 6.74e9 -> '6.74B', 1.75e11 -> '175B'."""
    if n == 0 or not math.isfinite(n):
        return str(n)
    if abs(n) >= 1e21:                     # beyond the largest prefix: '1e+30', never '1000000000000E'
        return f"{n:.{digits}g}"
    n = float(f"{n:.{digits}g}")      # round first, so 999,885,952 is '1B', not '1000M'
    for suffix, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{_sig(n / scale, digits)}{suffix}"
    return _sig(n, digits)


def format_flops(flops: float, digits: int = 3) -> str:
    """FLOPs (a count) in scientific notation: 6.3e24 -> '6.30e24'."""
    if flops == 0:
        return "0"
    mantissa, exponent = f"{flops:.{digits - 1}e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def format_rate(flops_per_s: float) -> str:
    """FLOP/s with an SI prefix: 989.5e12 -> '989.5 TFLOP/s'."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if abs(flops_per_s) >= scale:
            return f"{_sig(flops_per_s / scale, 4)} {prefix}FLOP/s"
    return f"{_sig(flops_per_s, 4)} FLOP/s"


def format_bytes(n_bytes: float, digits: int = 3) -> str:
    """IEC bytes for humans, always labelled: 80e9 -> '74.5 GiB'."""
    for suffix, scale in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n_bytes) >= scale:
            return f"{_sig(n_bytes / scale, digits)} {suffix}"
    return f"{int(n_bytes)} B"


def format_seconds(seconds: float) -> str:
    """A duration in the largest sensible unit: 1.24e7 -> '143.9 days'."""
    if not math.isfinite(seconds):
        return str(seconds)
    if seconds >= 1e4 * 365 * 86400.0:    # '9.6e+18 years', never a 20-digit number
        return f"{seconds / (365 * 86400.0):.3g} years"
    for unit, scale in (("years", 365 * 86400.0), ("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= 2 * scale or (unit == "days" and seconds >= scale):
            return f"{seconds / scale:.1f} {unit}"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def _sig(x: float, digits: int) -> str:
    """`x` with `digits` significant digits and no trailing zeros: 6.7384 -> '6.74', 175.0 -> '175'."""
    if x == 0:
        return "0"
    decimals = max(digits - 1 - int(math.floor(math.log10(abs(x)))), 0)
    text = f"{x:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def count_of(n: int | float, noun: str) -> str:
    """'1 thread', '2 threads', '1,024 sequences': a whole number and its noun, singular for exactly one."""
    return f"{n:,.0f} {noun}" + ("" if n == 1 else "s")
