"""The held-out table ``validation/outside.yaml``: published results outside the calibration files.

Nothing is fitted to these rows, and their errors are reported (``archsim validate --table outside``),
not asserted row by row: the table measures archsim, it does not gate it. What is tested is that the
table is what it says: held out, every row runnable to a finite prediction, every family present, each
row sourced, and no row a calibration row under another name.
"""

from __future__ import annotations

import math

import pytest

from archsim.spec.library import Library
from archsim.spec.validation import Row
from archsim.validation import validate

LIBRARY = Library(use_env=False)
TABLE = LIBRARY.validation("outside")


def key(row: Row) -> tuple[object, ...]:
    """What makes two rows the same measurement: the run and the quantity."""
    return (
        row.target,
        row.workload,
        row.mode,
        row.batch,
        row.seq_len,
        row.precision,
        row.software,
        row.nodes,
        row.bytes,
        row.metric,
    )


@pytest.mark.validation
def test_the_table_is_held_out_and_sourced() -> None:
    assert TABLE.held_out
    assert all(row.source and row.notes for row in TABLE.rows)


@pytest.mark.validation
def test_no_row_is_a_calibration_row() -> None:
    calibration = {key(row) for name in ("published", "published-llm") for row in LIBRARY.validation(name).rows}
    assert [row.id for row in TABLE.rows if key(row) in calibration] == []


@pytest.mark.validation
def test_every_row_runs_on_every_family() -> None:
    report = validate(LIBRARY, "outside")
    assert report.held_out
    assert len(report.rows) == len(TABLE.rows)
    assert all(math.isfinite(r.predicted) and r.predicted > 0 for r in report.rows)
    assert {r.family for r in report.rows} == {"tensorcore", "ipu", "cube", "systolic"}
