"""The power validation table (validation/power.yaml): measured average power against the energy model.

Each row is also a case of tests/validation/test_published.py (held to its tolerance, or a strict
expected failure where the table says it is known outside). Here: what holds for every row whatever
its error -- the modelled power is a lower bound of the measured one (the energy model counts a subset
of the actions, each at a cited figure) and above the chip's static power -- and the table is reachable
from the CLI.
"""

from __future__ import annotations

import pytest

from archsim.cli import main
from archsim.spec.library import Library
from archsim.validation import prepare
from archsim.validation.run import report_for

LIBRARY = Library(use_env=False)


@pytest.mark.validation
def test_modelled_power_is_a_lower_bound_of_the_measured_and_above_static() -> None:
    spec = LIBRARY.validation("power")
    report = report_for(spec, [prepare(row, LIBRARY) for row in spec.rows], LIBRARY, None)
    assert {r.row.target for r in report.rows} == {"v100-pcie", "p100-pcie"}
    for result in report.rows:
        chip = LIBRARY.chip(result.row.target)
        assert chip.tdp_w is not None and result.row.published <= chip.tdp_w, result.row.id
        assert result.predicted < result.row.published, result.row.id
        static_w = LIBRARY.energy().static_power_density * chip.die_area if isinstance(chip.die_area, float) else 0.0
        assert result.predicted > static_w, result.row.id


@pytest.mark.validation
def test_the_power_table_runs_from_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--table", "power"]) == 0
    out = capsys.readouterr().out
    assert "p100-pcie-rn50-train-fp32-b128" in out and " W " in out
