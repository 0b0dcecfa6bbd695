"""Number formats as data: each dtype is its bit layout; range, precision and size are computed from it.

A binary floating-point format with e exponent bits and m mantissa (fraction) bits has
    bias = 2^(e-1) - 1,  smallest normal = 2^(1-bias),  smallest subnormal = 2^(1-bias-m),  eps = 2^-m,
    max = (2 - 2^-m) · 2^bias            when the all-ones exponent is reserved for inf/NaN (IEEE 754),
    max = (2 - 2^(1-m)) · 2^(bias+1)     for the "fn" formats (finite, one NaN pattern S.1111.111):
                                         FP8 E4M3 -> 1.75 · 2^8 = 448.
Sources: IEEE 754-2019 (binary64/32/16); Google's bfloat16 (8 exponent, 7 mantissa bits); NVIDIA's
TF32 (8 exponent, 10 mantissa bits, stored in 32 bits); Micikevicius et al. 2022, "FP8 Formats for Deep
Learning" (arXiv:2209.05433), Table 1: E4M3 max 448, E5M2 max 57344. None of these numbers is typed in.
Integers: two's complement, int4 packs two values per byte (0.5 bytes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainledger.errors import TrainledgerError


@dataclass(frozen=True)
class DType:
    """One number format. `bits` is the storage width; `sign_bits + exponent_bits + mantissa_bits` its layout."""

    name: str
    kind: str                      # "float" | "int"
    bits: int                      # storage bits per element (TF32 is stored in 32)
    sign_bits: int = 1
    exponent_bits: int = 0
    mantissa_bits: int = 0         # floats: explicit fraction bits; ints: value bits (bits - sign)
    finite_only: bool = False      # "fn" formats: no inf, all-ones exponent holds finite values
    peak_key: str = ""             # the key of GPUSpec.peak_flops_per_s used for matmuls in this dtype
    aliases: tuple[str, ...] = ()
    source: str = ""

    @property
    def bytes(self) -> float:
        """Bytes per element (int4: 0.5)."""
        return self.bits / 8

    @property
    def bias(self) -> int:
        """Exponent bias 2^(e-1) - 1 (0 for integers)."""
        return 2 ** (self.exponent_bits - 1) - 1 if self.kind == "float" else 0

    @property
    def max(self) -> float:
        """Largest finite value."""
        if self.kind == "int":
            return float(2 ** (self.bits - 1) - 1)
        m = self.mantissa_bits
        if self.finite_only:  # top exponent usable; the all-ones mantissa there is NaN
            return (2 - 2.0 ** (1 - m)) * 2.0 ** (self.bias + 1)
        return (2 - 2.0 ** -m) * 2.0 ** self.bias

    @property
    def min(self) -> float:
        """Most negative finite value."""
        return float(-(2 ** (self.bits - 1))) if self.kind == "int" else -self.max

    @property
    def smallest_normal(self) -> float:
        """Smallest positive normal value 2^(1-bias) (1 for integers)."""
        return 2.0 ** (1 - self.bias) if self.kind == "float" else 1.0

    @property
    def smallest_subnormal(self) -> float:
        """Smallest positive value 2^(1-bias-m) (1 for integers)."""
        return 2.0 ** (1 - self.bias - self.mantissa_bits) if self.kind == "float" else 1.0

    @property
    def eps(self) -> float:
        """Gap between 1 and the next representable value, 2^-m (1 for integers)."""
        return 2.0 ** -self.mantissa_bits if self.kind == "float" else 1.0

    @property
    def decimal_digits(self) -> float:
        """Decimal digits of precision, log10(2^(m+1))."""
        return (self.mantissa_bits + (1 if self.kind == "float" else 0)) * math.log10(2)

    def to_dict(self) -> dict:
        return {"name": self.name, "aliases": list(self.aliases), "kind": self.kind, "bits": self.bits,
                "bytes": self.bytes, "sign_bits": self.sign_bits, "exponent_bits": self.exponent_bits,
                "mantissa_bits": self.mantissa_bits, "max": self.max, "min": self.min,
                "smallest_normal": self.smallest_normal, "smallest_subnormal": self.smallest_subnormal,
                "eps": self.eps, "peak_key": self.peak_key, "source": self.source}


# IEEE 754-2019 binary64
FP64 = DType("fp64", "float", 64, 1, 11, 52, peak_key="fp64", aliases=("float64", "double", "f64"),
             source="IEEE 754-2019 binary64")
# IEEE 754-2019 binary32
FP32 = DType("fp32", "float", 32, 1, 8, 23, peak_key="fp32", aliases=("float32", "float", "single", "f32"),
             source="IEEE 754-2019 binary32")
# NVIDIA A100 whitepaper: TensorFloat-32, fp32 range with fp16 precision, stored as 32-bit floats
TF32 = DType("tf32", "float", 32, 1, 8, 10, peak_key="tf32", aliases=("tensorfloat32", "tensorfloat-32"),
             source="NVIDIA A100 Tensor Core GPU Architecture whitepaper (TF32: 1+8+10 bits in 32-bit storage)")
# Google Brain bfloat16: fp32's exponent, 7 fraction bits
BF16 = DType("bf16", "float", 16, 1, 8, 7, peak_key="bf16", aliases=("bfloat16", "brain-float16"),
             source="Google bfloat16 (Kalamkar et al. 2019, arXiv:1905.12322)")
# IEEE 754-2019 binary16
FP16 = DType("fp16", "float", 16, 1, 5, 10, peak_key="fp16", aliases=("float16", "half", "f16"),
             source="IEEE 754-2019 binary16")
# Micikevicius et al. 2022 (arXiv:2209.05433) Table 1: E4M3, no infinities, max 448 (torch.float8_e4m3fn)
FP8_E4M3 = DType("fp8-e4m3", "float", 8, 1, 4, 3, finite_only=True, peak_key="fp8",
                 aliases=("fp8", "e4m3", "fp8_e4m3", "float8_e4m3fn", "fp8-e4m3fn"),
                 source="Micikevicius et al. 2022, FP8 Formats for Deep Learning (arXiv:2209.05433), E4M3")
# Micikevicius et al. 2022 (arXiv:2209.05433) Table 1: E5M2, IEEE-like with inf, max 57344 (torch.float8_e5m2)
FP8_E5M2 = DType("fp8-e5m2", "float", 8, 1, 5, 2, peak_key="fp8", aliases=("e5m2", "fp8_e5m2", "float8_e5m2"),
                 source="Micikevicius et al. 2022, FP8 Formats for Deep Learning (arXiv:2209.05433), E5M2")
# two's complement 8-bit integer
INT8 = DType("int8", "int", 8, 1, 0, 7, peak_key="int8", aliases=("i8",), source="two's complement")
# two's complement 4-bit integer, two per byte
INT4 = DType("int4", "int", 4, 1, 0, 3, peak_key="int4", aliases=("i4",), source="two's complement, packed 2 per byte")

DTYPES: list[DType] = [FP64, FP32, TF32, BF16, FP16, FP8_E4M3, FP8_E5M2, INT8, INT4]


def get_dtype(name: str, flag: str = "--dtype") -> DType:
    """The DType named `name` or one of its aliases ('float16', 'half', 'torch.bfloat16'); an error listing names otherwise."""
    key = str(name).strip().lower().removeprefix("torch.")
    for dtype in DTYPES:
        if key == dtype.name or key in dtype.aliases:
            return dtype
    known = ", ".join(d.name for d in DTYPES)
    raise TrainledgerError(f"unknown dtype {name!r} ({flag}). Known: {known} (see `trainledger dtypes`)")


def bytes_per_element(name: str | DType) -> float:
    """Bytes one element of dtype `name` takes (fp32 4, bf16 2, fp8 1, int4 0.5)."""
    return (name if isinstance(name, DType) else get_dtype(name)).bytes


def round_to_dtype(value: float, dtype: str | DType) -> float:
    """`value` rounded to the nearest value of a float dtype (ties to even), returned as a Python float.

    Values below half the smallest subnormal flush to ±0 (the lecture: fp16(1e-8) == 0, while
    bf16(1e-8) ≈ 1.0012e-8 because bf16 keeps fp32's exponent range). Overflow gives ±inf in the IEEE-like
    formats (fp16, bf16, E5M2: 61440 -> inf); the finite-only E4M3 has no inf, and its cast saturates to
    ±448 (as torch's `.to(torch.float8_e4m3fn)` and NVIDIA's SATFINITE conversions do). Integers round
    half to even; a value outside their range is an error (a TrainledgerError).
    """
    d = dtype if isinstance(dtype, DType) else get_dtype(dtype)
    if d.kind == "float" and not math.isfinite(value):
        return math.copysign(d.max, value) if d.finite_only and math.isinf(value) else value
    if d.kind == "int":
        result = float(round(value)) if math.isfinite(value) else value
        if not d.min <= result <= d.max:
            raise TrainledgerError(f"{value!r} is outside the range of {d.name} [{d.min:g}, {d.max:g}]")
        return result
    if value == 0:
        return value
    exponent = max(math.frexp(abs(value))[1] - 1, 1 - d.bias)      # unbiased exponent, clamped to subnormals
    quantum = math.ldexp(1.0, exponent - d.mantissa_bits)             # spacing of values at this exponent
    rounded = math.copysign(round(abs(value) / quantum) * quantum, value)
    if abs(rounded) > d.max:
        return math.copysign(d.max if d.finite_only else math.inf, value)
    return rounded
