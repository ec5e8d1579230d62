"""Errors: one line ``source: field: problem``, whatever the parts quote."""

from __future__ import annotations

from archsim.errors import ArchsimError, SpecError


def test_line_joins_the_parts_and_leaves_empty_ones_out() -> None:
    assert SpecError("chips/x.yaml", "clock", "missing required field").line() == (
        "chips/x.yaml: clock: missing required field"
    )
    assert ArchsimError("archsim", "", "bad option").line() == "archsim: bad option"


def test_line_escapes_what_is_not_printable() -> None:
    # the fuzz test's find: a sweep axis value of "\n" was quoted raw, and the message took two lines
    error = SpecError("sweep.yaml", "chip.systolic.ofmap_sram=\n", "not a quantity: '\r\x00\t'")
    line = error.line()
    assert "\n" not in line and "\r" not in line and "\x00" not in line
    assert line == "sweep.yaml: chip.systolic.ofmap_sram=\\n: not a quantity: '\\r\\x00\\t'"
    assert str(error) == line
