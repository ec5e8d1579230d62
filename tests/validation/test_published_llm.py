"""Each single-chip LLM measurement of validation/published-llm.yaml as a test with its stated tolerance.

Nothing is fitted to these rows (calibration_llm.csv): they check the tensor-core family as fitted to
validation/published.yaml. Rows known to be outside say why (``known_outside``) and are strict
expected failures, as in ``test_published.py``.
"""

from __future__ import annotations

import pytest

from archsim.spec.library import Library
from archsim.validation import ValidationReport, validate

TABLE = Library(use_env=False).validation("published-llm")


@pytest.fixture(scope="module")
def report() -> ValidationReport:
    return validate(Library(use_env=False), "published-llm")


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


@pytest.mark.validation
def test_the_table_covers_both_generation_and_kernels() -> None:
    metrics = {row.metric.value for row in TABLE.rows}
    assert metrics == {"op_rate", "ttft"}
    assert all(row.target == "a100-80gb" for row in TABLE.rows)
