"""units.py: quantities parse to base units and format with labelled SI / IEC units."""

import pytest

from trainledger import units
from trainledger.errors import TrainledgerError


@pytest.mark.parametrize("text, expected", [
    ("15T", 15e12, ),
    ("1.5e13", 1.5e13),
    ("70B", 70e9),
    ("124M", 124e6),
    ("4K", 4e3),
    ("1,024", 1024.0),
    ("7.5e9", 7.5e9),
    (1024, 1024.0),
])
def test_parse_count(text, expected):
    assert units.parse_count(text) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("text, expected", [
    ("80GB", 80e9),          # SI, as datasheets print memory
    ("80GiB", 80 * 2**30),   # IEC
    ("80G", 80e9),
    ("512MiB", 512 * 2**20),
    ("4096", 4096.0),
    ("1.5TB", 1.5e12),
])
def test_parse_bytes(text, expected):
    assert units.parse_bytes(text) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("text, expected", [
    ("14d", 14 * 86400),
    ("2w", 14 * 86400),
    ("36h", 36 * 3600),
    ("90min", 90 * 60),
    ("30s", 30),
])
def test_parse_seconds(text, expected):
    assert units.parse_seconds(text) == pytest.approx(expected)


def test_bare_duration_uses_default_unit():
    assert units.parse_seconds("14", default_unit="d") == 14 * 86400


@pytest.mark.parametrize("bad", ["", "abc", "15X", "1e", "--3", "nan", "inf"])
def test_unparseable_count_names_the_flag(bad):
    with pytest.raises(TrainledgerError) as info:
        units.parse_count(bad, flag="--tokens")
    assert "--tokens" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("n, text", [
    (124_439_808, "124M"),
    (6_738_415_616, "6.74B"),
    (175e9, "175B"),         # never "162.98G": counts use 1000, not 1024
    (15e12, "15T"),
    (999, "999"),
    (999_885_952, "1B"),     # Gemma 3 1B: rounded before the prefix is chosen, never "1000M"
    (999_999, "1M"),
])
def test_format_count_is_si(n, text):
    assert units.format_count(n) == text


def test_format_bytes_is_iec_and_labelled():
    assert units.format_bytes(80e9) == "74.5 GiB"
    assert units.format_bytes(2**20) == "1 MiB"
    assert units.format_bytes(100) == "100 B"


def test_format_flops_and_rate():
    assert units.format_flops(6.3e24) == "6.30e24"
    assert units.format_rate(989.5e12) == "989.5 TFLOP/s"


def test_format_seconds_picks_a_unit():
    assert units.format_seconds(143.93 * 86400) == "143.9 days"
    assert units.format_seconds(0.25) == "250.00 ms"


def test_positive_rejects_zero_and_fractions_for_integers():
    assert units.positive(3, "--num-gpus", integer=True) == 3
    with pytest.raises(TrainledgerError, match="--num-gpus must be a positive integer"):
        units.positive(0, "--num-gpus", integer=True)
    with pytest.raises(TrainledgerError):
        units.positive(1.5, "--num-gpus", integer=True)
