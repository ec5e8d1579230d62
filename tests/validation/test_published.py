"""Each published measurement of validation/published.yaml as a test with its stated tolerance.

Run them alone with ``pytest -m validation``, or leave them out with ``pytest -m "not validation"``.
A cost-model change that pushes any row outside its group's tolerance fails here. Rows known to be
outside today say why in the table (``known_outside``) and are strict expected failures: the day
such a row comes inside, its test fails until the note is removed.
"""

from __future__ import annotations

import pytest

from archsim.spec.library import Library
from archsim.validation import ValidationReport, validate

TABLE = Library(use_env=False).validation("published")


@pytest.fixture(scope="module")
def report() -> ValidationReport:
    return validate(Library(use_env=False))


def cases() -> list[object]:
    """One case per row; a row with a ``known_outside`` note is a strict expected failure."""
    out: list[object] = []
    for row in TABLE.rows:
        marks = [pytest.mark.xfail(reason=row.known_outside, strict=True)] if row.known_outside else []
        out.append(pytest.param(row.id, marks=marks, id=row.id))
    return out


@pytest.mark.validation
@pytest.mark.parametrize("row_id", cases())
def test_row_within_tolerance(report: ValidationReport, row_id: str) -> None:
    result = next(r for r in report.rows if r.row.id == row_id)
    assert result.predicted > 0
    assert abs(result.error) <= result.tolerance, (
        f"{row_id}: predicted {result.predicted:.4g} vs published {result.row.published:.4g} {result.row.unit} "
        f"({100 * result.error:+.1f}%, tolerance {100 * result.tolerance:.0f}%); source: {result.row.source}"
    )
