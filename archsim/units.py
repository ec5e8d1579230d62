"""Quantity strings -> SI numbers, in one place.

In YAML every quantity is a string with its unit (``"900 GB/s"``, ``"1.53 GHz"``, ``"6 MiB"``,
``"2 us"``). This module converts them once, at load time, to plain numbers in SI base units:

=============  ==========================  ===================================================
dimension      result                      accepted units (prefixes k M G T P, Ki Mi Gi Ti)
=============  ==========================  ===================================================
bytes          int, bytes                  B, KB, MB, GB, TB, KiB, MiB, GiB, TiB (bits: b, Kb ...)
bandwidth      float, bytes per second     B/s, GB/s, GiB/s ... and bit rates Gb/s, Gbps, Tbps
frequency      float, hertz                Hz, kHz, MHz, GHz
time           float, seconds              s, ms, us, ns, ps
throughput     float, operations per s     FLOPS, TFLOPS, TFLOP/s, TOPS, OP/s ...
power          float, watts                W, kW
area           float, square millimetres   mm^2, mm2, um^2
length         float, nanometres           nm, um
energy         float, joules               J, mJ, uJ, nJ, pJ
energy/bit     float, joules per bit       pJ/bit, nJ/bit ...
power density  float, watts per mm^2       W/mm^2, mW/mm^2
voltage        float, volts                V, mV
=============  ==========================  ===================================================

GB and GiB mean what they say: decimal prefixes are powers of 1000, binary ones powers of 1024.
A bare number where a quantity is expected is an error: units written only in comments drift.
Each dimension has a range of accepted values (:data:`archsim.limits.QUANTITY_RANGES`).
"""

from __future__ import annotations

import enum
import math
import re

from archsim.errors import UnitError
from archsim.limits import QUANTITY_RANGES


class Dimension(enum.Enum):
    """The physical dimension a quantity field expects."""

    BYTES = "bytes"
    BANDWIDTH = "bandwidth"
    FREQUENCY = "frequency"
    TIME = "time"
    THROUGHPUT = "throughput"
    POWER = "power"
    AREA = "area"
    LENGTH = "length"
    ENERGY = "energy"
    ENERGY_PER_BIT = "energy per bit"
    POWER_DENSITY = "power density"
    VOLTAGE = "voltage"


_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
_SUBUNIT_DIVISOR = {"": 1.0, "m": 1e3, "u": 1e6, "\u00b5": 1e6, "n": 1e9, "p": 1e12}


def _build_table() -> dict[str, tuple[Dimension, float, float]]:
    """Every accepted unit spelling mapped to (dimension, multiplier, divisor) to the SI base.

    Sub-units divide rather than multiply so that ``"5 us"`` is exactly ``5e-06``.
    """
    table: dict[str, tuple[Dimension, float, float]] = {}
    for prefix, factor in {**_DECIMAL, **_BINARY}.items():
        table[f"{prefix}B"] = (Dimension.BYTES, factor, 1.0)
        table[f"{prefix}b"] = (Dimension.BYTES, factor, 8.0)
        table[f"{prefix}B/s"] = (Dimension.BANDWIDTH, factor, 1.0)
        table[f"{prefix}b/s"] = (Dimension.BANDWIDTH, factor, 8.0)
        table[f"{prefix}bps"] = (Dimension.BANDWIDTH, factor, 8.0)
    for prefix, factor in _DECIMAL.items():
        table[f"{prefix}Hz"] = (Dimension.FREQUENCY, factor, 1.0)
        for spelling in ("FLOPS", "FLOP/s", "OPS", "OP/s"):
            table[f"{prefix}{spelling}"] = (Dimension.THROUGHPUT, factor, 1.0)
        table[f"{prefix}W"] = (Dimension.POWER, factor, 1.0)
    for prefix, divisor in _SUBUNIT_DIVISOR.items():
        table[f"{prefix}s"] = (Dimension.TIME, 1.0, divisor)
    for prefix, divisor in _SUBUNIT_DIVISOR.items():
        table[f"{prefix}J"] = (Dimension.ENERGY, 1.0, divisor)
        table[f"{prefix}J/bit"] = (Dimension.ENERGY_PER_BIT, 1.0, divisor)
    table["V"] = (Dimension.VOLTAGE, 1.0, 1.0)
    table["mV"] = (Dimension.VOLTAGE, 1.0, 1e3)
    table["um^2"] = (Dimension.AREA, 1.0, 1e6)
    table["W/mm^2"] = (Dimension.POWER_DENSITY, 1.0, 1.0)
    table["mW/mm^2"] = (Dimension.POWER_DENSITY, 1.0, 1e3)
    table["mm^2"] = (Dimension.AREA, 1.0, 1.0)
    table["mm2"] = (Dimension.AREA, 1.0, 1.0)
    table["nm"] = (Dimension.LENGTH, 1.0, 1.0)
    table["um"] = (Dimension.LENGTH, 1e3, 1.0)
    return table


_UNITS = _build_table()
_QUANTITY = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([^\s\d].*?)?\s*$")


def parse(text: object, dimension: Dimension, allow_zero: bool = False) -> float:
    """Convert a quantity string to a float in the SI base unit of ``dimension``.

    Raises :class:`UnitError` (with an empty source and field, filled in by the caller) when the value
    is not a string, has no unit, an unknown unit, a unit of another dimension, or is not a finite
    positive number (zero is allowed with ``allow_zero``, for costs that may vanish).
    """
    if isinstance(text, bool) or not isinstance(text, str):
        raise UnitError("", "", f"expected a quantity string with a unit of {dimension.value}, got {text!r}")
    match = _QUANTITY.match(text)
    if match is None:
        raise UnitError("", "", f"not a quantity: {text!r} (expected e.g. '900 GB/s')")
    number_text, unit = match.group(1), match.group(2)
    if not unit:
        raise UnitError("", "", f"{text!r} has no unit (expected a unit of {dimension.value})")
    if unit not in _UNITS:
        raise UnitError("", "", f"unknown unit {unit!r} in {text!r}")
    unit_dimension, multiplier, divisor = _UNITS[unit]
    if unit_dimension is not dimension:
        raise UnitError("", "", f"{text!r} is a {unit_dimension.value}, expected a {dimension.value}")
    value = float(number_text) * multiplier / divisor
    if not math.isfinite(value) or value < 0.0 or (value == 0.0 and not allow_zero):
        kind = "non-negative" if allow_zero else "positive"
        raise UnitError("", "", f"{text!r} must be a {kind}, finite quantity")
    low, high, base = QUANTITY_RANGES[dimension.value]
    if value != 0.0 and not low <= value <= high:
        raise UnitError(
            "", "", f"{text!r} is outside the {low:g} to {high:g} {base} archsim accepts for a {dimension.value}"
        )
    return value


def parse_any(text: object) -> int | float:
    """A quantity of whatever dimension its unit names, in SI base units (bytes as an int).

    Used where the field is not known (sweep axes and their constraints); raises :class:`UnitError`
    when ``text`` is not a quantity with a known unit.
    """
    match = _QUANTITY.match(text) if isinstance(text, str) else None
    if match is None or match.group(2) not in _UNITS:
        raise UnitError("", "", f"not a quantity with a known unit: {text!r}")
    dimension = _UNITS[match.group(2)][0]
    return parse_bytes(text) if dimension is Dimension.BYTES else parse(text, dimension, allow_zero=True)


def dimension_of(text: object) -> Dimension | None:
    """The dimension a quantity string's unit names, or None if it is not a quantity with a known unit."""
    match = _QUANTITY.match(text) if isinstance(text, str) else None
    if match is None or match.group(2) not in _UNITS:
        return None
    return _UNITS[match.group(2)][0]


def parse_bytes(text: object) -> int:
    """A size in bytes, as an int; fractional bytes are an error."""
    value = parse(text, Dimension.BYTES)
    rounded = round(value)
    if abs(value - rounded) > 1e-6 * max(1.0, value):
        raise UnitError("", "", f"{text!r} is not a whole number of bytes")
    return int(rounded)


def format_bytes(n: float) -> str:
    """Human-readable binary size, e.g. ``6.0 MiB`` (for tables, never parsed back)."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= factor:
            return f"{n / factor:.1f} {unit}"
    return f"{n:.0f} B"


def format_time(seconds: float) -> str:
    """Human-readable time, e.g. ``3.41 ms`` (for tables, never parsed back)."""
    for unit, factor in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= factor:
            return f"{seconds / factor:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"
