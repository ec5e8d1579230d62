"""Hypothesis strategies for fuzzing loaders: the library's descriptions and corrupted copies of data.

:func:`descriptions` draws the data of one description of a kind; :func:`mutated`,
:func:`mutated_text` and :func:`mutated_bytes` corrupt YAML-ready data, any text, or a binary file
(ONNX, Chakra ET). archsim's own fuzz test uses them; :mod:`archsim.testing.strategies` re-exports
them. This module needs hypothesis (``pip install 'archsim[testing]'``).
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

try:
    from hypothesis import strategies as st
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError("archsim.testing.fuzz needs hypothesis: pip install 'archsim[testing]'") from err

from archsim.spec.library import Library

__all__ = ["descriptions", "mutated", "mutated_bytes", "mutated_text"]


@cache
def builtin_library() -> Library:
    """The built-in library alone (no ``ARCHSIM_PATH``), loaded once."""
    return Library(use_env=False)


def descriptions(kind: str, library: Library | None = None) -> st.SearchStrategy[dict[str, Any]]:
    """A deep copy of the data of one description of ``kind`` (``chip``, ``model``, ...) in the library."""
    entries = (library or builtin_library()).entries(kind)
    if not entries:
        raise ValueError(f"the library has no description of kind {kind!r}")
    return st.sampled_from(entries).map(lambda entry: copy.deepcopy(entry.data))


ODD_VALUES: tuple[Any, ...] = (
    None,
    True,
    0,
    -1,
    1,
    2**31,
    2**53,
    2**53 + 1,
    2**63,
    10**30,
    10**400,
    1e-300,
    1e308,
    float("inf"),
    float("nan"),
    "",
    "x" * 300,
    "900",
    "1e400 GHz",
    "-5 GB/s",
    "0 s",
    "1e-300 Hz",
    "1e300 B",
    "1 parsec",
    "NaN TFLOPS",
    "1e12 TFLOPS",
    "2 GB",
    "16x16",
    [],
    {},
    [1, 2, 3],
    {"x": 1},
)
"""Values that a loader must refuse or survive: wrong types, extremes, non-finite numbers, bad units."""


def _odd_values() -> st.SearchStrategy[Any]:
    return st.one_of(
        # a copy: a list or mapping put into the data may be edited by a later change of the same draw
        st.sampled_from(ODD_VALUES).map(copy.deepcopy),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(),
        st.text(max_size=12),
    )


def _slots(data: Any) -> list[tuple[Any, Any]]:
    """Every (container, key or index) inside ``data``, in a stable order."""
    found: list[tuple[Any, Any]] = []
    stack = [data]
    while stack:
        node = stack.pop()
        items = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
        for key, value in items:
            found.append((node, key))
            if isinstance(value, dict | list) and value:
                stack.append(value)
    return found


def _scaled(value: Any, power: int) -> Any:
    """``value`` with its magnitude moved by ``10**power`` (numbers and the number of a quantity)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value * 10**power if power >= 0 else value // 10**-power
    if isinstance(value, float):
        return value * 10.0**power
    if isinstance(value, str) and value[:1].isdigit():
        number, _, unit = value.partition(" ")
        return f"{number}e{power} {unit}".rstrip()
    return value


@st.composite
def mutated(draw: st.DrawFn, data: dict[str, Any], max_changes: int = 3) -> dict[str, Any]:
    """A copy of ``data`` with 1 to ``max_changes`` random changes: deleted, replaced, scaled or added values.

    Replacements come from :data:`ODD_VALUES` and arbitrary integers, floats and strings; scaling
    moves a number (or a quantity's number) by up to 10^30 either way. Most results are invalid.
    """
    data = copy.deepcopy(data)
    for _ in range(draw(st.integers(min_value=1, max_value=max_changes))):
        slots = _slots(data)
        action = draw(st.sampled_from(["delete", "replace", "scale", "add"] if slots else ["add"]))
        if action == "add" or not slots:
            container = draw(st.sampled_from([data] + [c for c, _ in slots if isinstance(c, dict)]))
            container[draw(st.sampled_from(["extra", "name", "kind", "schema_version", "x"]))] = draw(_odd_values())
            continue
        container, key = draw(st.sampled_from(slots))
        if action == "delete":
            del container[key]
        elif action == "replace":
            container[key] = draw(_odd_values())
        else:
            container[key] = _scaled(container[key], draw(st.integers(min_value=-30, max_value=30)))
    return data


TEXT_TOKENS = (
    "!!python/object/apply:os.system ['true']",
    "!!python/name:os.system",
    "&a ",
    "*a",
    "<<: *a\n",
    "[",
    "]",
    "{",
    "}",
    ": ",
    "- ",
    "? ",
    "|\n",
    "---\n",
    "%YAML 1.1\n",
    "\t",
    "\x00",
    "\ufeff",
    "\\N",
    "'",
    '"',
    ",",
    "=",
    "#",
    "\n",
    "nan",
    "inf",
    "-1",
    "0",
    "1e400",
    "9" * 120,
    "[" * 80,
    "2001-02-30",
    "0x" + "f" * 40,
)
"""Fragments that break YAML, TSV, CSV and INI files in instructive ways."""


@st.composite
def mutated_text(draw: st.DrawFn, text: str, max_changes: int = 3) -> str:
    """``text`` with 1 to ``max_changes`` random edits: tokens inserted, spans deleted, lines duplicated or cut."""
    for _ in range(draw(st.integers(min_value=1, max_value=max_changes))):
        position = draw(st.integers(min_value=0, max_value=len(text)))
        action = draw(st.sampled_from(["insert", "delete", "duplicate", "truncate", "swap-digit"]))
        if action == "insert":
            token = draw(st.one_of(st.sampled_from(TEXT_TOKENS), st.text(max_size=4)))
            text = text[:position] + token + text[position:]
        elif action == "delete":
            text = text[:position] + text[position + draw(st.integers(min_value=1, max_value=40)) :]
        elif action == "duplicate":
            start = text.rfind("\n", 0, position) + 1
            end = text.find("\n", position)
            line = text[start : len(text) if end < 0 else end + 1]
            text = text[:start] + line + text[start:]
        elif action == "truncate":
            text = text[:position]
        else:
            digits = [i for i, c in enumerate(text) if c.isdigit()]
            if digits:
                index = draw(st.sampled_from(digits))
                text = text[:index] + draw(st.sampled_from(["0", "-1", "99999999999", "1e30", "x"])) + text[index + 1 :]
    return text


BYTE_TOKENS = (
    b"\x00",
    b"\xff",
    b"\x80" * 12,  # a varint that never ends
    b"\xff\xff\xff\xff\x0f",  # a varint of 2^32 - 1: a huge length prefix
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # the largest 64-bit varint
    b"\x1f\x8b",  # the gzip magic
    b"\x08\x00",
    b"\x0a\x00",
    b"\x12\x7f",
)
"""Fragments that break length-delimited binary formats (protobuf, Chakra ET) in instructive ways."""


@st.composite
def mutated_bytes(draw: st.DrawFn, data: bytes, max_changes: int = 3) -> bytes:
    """``data`` with 1 to ``max_changes`` random edits: bytes flipped, inserted or deleted, ranges duplicated or cut."""
    for _ in range(draw(st.integers(min_value=1, max_value=max_changes))):
        position = draw(st.integers(min_value=0, max_value=len(data)))
        action = draw(st.sampled_from(["insert", "delete", "duplicate", "truncate", "flip", "set"]))
        if action == "insert":
            token = draw(st.one_of(st.sampled_from(BYTE_TOKENS), st.binary(min_size=1, max_size=8)))
            data = data[:position] + token + data[position:]
        elif action == "delete":
            data = data[:position] + data[position + draw(st.integers(min_value=1, max_value=40)) :]
        elif action == "duplicate":
            chunk = data[position : position + draw(st.integers(min_value=1, max_value=256))]
            data = data[:position] + chunk + data[position:]
        elif action == "truncate":
            data = data[:position]
        elif position < len(data):
            old = data[position]
            new = (
                old ^ (1 << draw(st.integers(min_value=0, max_value=7)))
                if action == "flip"
                else draw(st.integers(0, 255))
            )
            data = data[:position] + bytes([new]) + data[position + 1 :]
    return data
