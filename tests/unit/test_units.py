import pytest

from archsim.errors import UnitError
from archsim.units import Dimension, format_bytes, format_time, parse, parse_bytes


@pytest.mark.parametrize(
    ("text", "dimension", "expected"),
    [
        ("900 GB/s", Dimension.BANDWIDTH, 900e9),
        ("240 Gbps", Dimension.BANDWIDTH, 30e9),
        ("25 GiB/s", Dimension.BANDWIDTH, 25 * 2**30),
        ("1.53 GHz", Dimension.FREQUENCY, 1.53e9),
        ("2 us", Dimension.TIME, 2e-6),
        ("5 us", Dimension.TIME, 5e-6),
        ("500 ns", Dimension.TIME, 5e-7),
        ("125 TFLOPS", Dimension.THROUGHPUT, 125e12),
        ("624 TOPS", Dimension.THROUGHPUT, 624e12),
        ("300 W", Dimension.POWER, 300.0),
        ("815 mm^2", Dimension.AREA, 815.0),
        ("12 nm", Dimension.LENGTH, 12.0),
        ("1.068 V", Dimension.VOLTAGE, 1.068),
        ("718 mV", Dimension.VOLTAGE, 0.718),
    ],
)
def test_parse_known_units(text: str, dimension: Dimension, expected: float) -> None:
    assert parse(text, dimension) == pytest.approx(expected, rel=1e-15)


def test_gb_and_gib_mean_what_they_say() -> None:
    assert parse_bytes("1 GB") == 10**9
    assert parse_bytes("1 GiB") == 2**30
    assert parse_bytes("6 MiB") == 6 * 2**20


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (900, "expected a quantity string"),
        (True, "expected a quantity string"),
        ("900", "has no unit"),
        ("900 furlongs", "unknown unit"),
        ("1.5 GHz", "is a frequency, expected a bandwidth"),
        ("-5 GB/s", "positive"),
        ("0 GB/s", "positive"),
        ("fast", "not a quantity"),
    ],
)
def test_parse_rejects(value: object, fragment: str) -> None:
    with pytest.raises(UnitError, match=fragment):
        parse(value, Dimension.BANDWIDTH)


def test_fractional_bytes_rejected() -> None:
    with pytest.raises(UnitError, match="whole number of bytes"):
        parse_bytes("1.5 B")


def test_formatting() -> None:
    assert format_bytes(6 * 2**20) == "6.0 MiB"
    assert format_time(3.41e-3) == "3.41 ms"
    assert format_time(2e-9) == "2 ns"
