"""Dtypes computed from their bit layouts, checked against torch.finfo, bit patterns and the lecture's facts."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trainledger.errors import TrainledgerError
from trainledger.specs.dtypes import DTYPES, bytes_per_element, get_dtype, round_to_dtype

# every trainledger float dtype that torch has, with its torch dtype and the integer type of the same width
TORCH_FLOATS = {
    "fp64": (torch.float64, torch.int64),
    "fp32": (torch.float32, torch.int32),
    "bf16": (torch.bfloat16, torch.int16),
    "fp16": (torch.float16, torch.int16),
    "fp8-e4m3": (torch.float8_e4m3fn, torch.uint8),
    "fp8-e5m2": (torch.float8_e5m2, torch.uint8),
}


@pytest.mark.parametrize("name", list(TORCH_FLOATS), ids=list(TORCH_FLOATS))
def test_float_dtype_matches_torch_finfo(name):
    d, (torch_dtype, _) = get_dtype(name), TORCH_FLOATS[name]
    info = torch.finfo(torch_dtype)
    assert d.bits == info.bits
    assert d.bytes == torch.empty((), dtype=torch_dtype).element_size()
    assert d.max == info.max
    assert d.min == info.min
    assert d.eps == info.eps
    assert d.smallest_normal == info.smallest_normal


@pytest.mark.parametrize("name", list(TORCH_FLOATS), ids=list(TORCH_FLOATS))
def test_smallest_subnormal_is_the_bit_pattern_one(name):
    """The smallest subnormal is the value whose bits are 0...01 — read back through torch's view()."""
    torch_dtype, int_dtype = TORCH_FLOATS[name]
    one = torch.tensor([1], dtype=int_dtype).view(torch_dtype)
    assert get_dtype(name).smallest_subnormal == one.double().item()


def test_layouts_add_up_to_the_storage_width():
    for d in DTYPES:
        if d.kind == "float" and d.name != "tf32":
            assert d.sign_bits + d.exponent_bits + d.mantissa_bits == d.bits, d.name
        if d.kind == "int":
            assert d.sign_bits + d.mantissa_bits == d.bits, d.name


def test_tf32_has_fp32_range_and_fp16_precision():
    """NVIDIA A100 whitepaper: TF32 = fp32's 8-bit exponent with fp16's 10-bit mantissa, stored in 32 bits."""
    tf32, fp32, fp16 = get_dtype("tf32"), get_dtype("fp32"), get_dtype("fp16")
    assert tf32.smallest_normal == fp32.smallest_normal
    assert tf32.eps == fp16.eps == 2**-10
    assert tf32.max == pytest.approx(fp32.max, rel=1e-3)
    assert tf32.bytes == 4


def test_fp8_ranges_from_the_lecture():
    """CS336 Lecture 2 (and Micikevicius et al. 2022, Table 1): E4M3 ±448, E5M2 ±57344."""
    assert get_dtype("fp8-e4m3").max == 448 and get_dtype("fp8-e4m3").min == -448
    assert get_dtype("fp8-e5m2").max == 57344 and get_dtype("fp8-e5m2").min == -57344


def test_integers():
    assert (get_dtype("int8").min, get_dtype("int8").max, get_dtype("int8").bytes) == (-128, 127, 1)
    assert (get_dtype("int4").min, get_dtype("int4").max, get_dtype("int4").bytes) == (-8, 7, 0.5)
    assert (torch.iinfo(torch.int8).min, torch.iinfo(torch.int8).max) == (-128, 127)
    assert round_to_dtype(2.5, "int8") == 2 and round_to_dtype(-3.5, "int8") == -4
    with pytest.raises(TrainledgerError, match="int4"):
        round_to_dtype(8, "int4")


def test_lecture_underflow_fact():
    """CS336 Lecture 2: torch.tensor([1e-8], dtype=float16) is 0, in bfloat16 it is ≈ 1.0012e-8."""
    assert round_to_dtype(1e-8, "fp16") == 0
    assert round_to_dtype(1e-8, "bf16") == pytest.approx(1.0012e-8, rel=1e-4)
    assert round_to_dtype(1e-8, "bf16") == torch.tensor([1e-8], dtype=torch.bfloat16).double().item()


# (value, dtype, expected, why)
ROUNDING_CASES = [
    (65504.0, "fp16", 65504.0, "fp16 max is representable"),
    (65519.0, "fp16", 65504.0, "below max + half ulp rounds down to max"),
    (65520.0, "fp16", math.inf, "max + half ulp ties to even = 2^16 -> inf"),
    (1 + 2**-11, "fp16", 1.0, "tie between 1 and 1+eps rounds to even (1)"),
    (1 + 3 * 2**-11, "fp16", 1 + 2**-9, "tie rounds to the even mantissa"),
    (2**-25, "fp16", 0.0, "half the smallest subnormal ties to 0"),
    (1.5 * 2**-24, "fp16", 2**-23, "subnormal tie to even"),
    (470.0, "fp8-e4m3", 448.0, "E4M3 saturates (no inf)"),
    (-1e9, "fp8-e4m3", -448.0, "E4M3 saturates negative"),
    (60000.0, "fp8-e5m2", 57344.0, "E5M2 nearest is max"),
    (61440.0, "fp8-e5m2", math.inf, "E5M2 tie above max -> inf"),
    (math.inf, "fp8-e4m3", 448.0, "E4M3 has no inf"),
]


@pytest.mark.parametrize("value, name, expected, why", ROUNDING_CASES, ids=[c[3] for c in ROUNDING_CASES])
def test_rounding_table(value, name, expected, why):
    assert round_to_dtype(value, name) == expected
    torch_dtype = TORCH_FLOATS[name][0]
    assert torch.tensor([value], dtype=torch.float32).to(torch_dtype).double().item() == expected


@settings(max_examples=300, deadline=None)
@given(value=st.floats(width=32, allow_nan=False, min_value=-1e6, max_value=1e6) |
       st.floats(width=32, allow_nan=False, min_value=-2.0**-10, max_value=2.0**-10),
       name=st.sampled_from(["bf16", "fp16", "fp8-e4m3", "fp8-e5m2"]))
def test_rounding_matches_torch_casts(value, name):
    """Pure-Python rounding equals torch's fp32 -> dtype cast (an independent implementation)."""
    expected = torch.tensor([value], dtype=torch.float32).to(TORCH_FLOATS[name][0]).double().item()
    assert round_to_dtype(value, name) == expected


def test_aliases_and_errors():
    assert get_dtype("float32").name == "fp32"
    assert get_dtype("torch.bfloat16").name == "bf16"
    assert get_dtype("half").name == "fp16"
    assert get_dtype("FP8").name == "fp8-e4m3"
    assert get_dtype("float8_e5m2").name == "fp8-e5m2"
    assert bytes_per_element("int4") == 0.5 and bytes_per_element("bf16") == 2
    names = [d.name for d in DTYPES] + [a for d in DTYPES for a in d.aliases]
    assert len(names) == len(set(names)), "an alias names two dtypes"
    with pytest.raises(TrainledgerError) as error:
        get_dtype("fp12")
    assert "--dtype" in str(error.value) and "bf16" in str(error.value) and "\n" not in str(error.value)


def test_lecture_gpt3_ffn_matrix_bytes():
    """CS336 Lecture 2: one GPT-3 FFN matrix [49152, 12288] in fp32 is 2,415,919,104 bytes."""
    assert 49152 * 12288 * bytes_per_element("fp32") == 2_415_919_104
