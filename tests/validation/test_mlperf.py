"""Each published MLPerf time to train of validation/mlperf.yaml as a test with the table's tolerance.

The rows are never fitted to. Rows known to be outside today say why (``known_outside``) and are
strict expected failures: the day such a row comes inside, its test fails until the note is removed.
"""

from __future__ import annotations

import pytest

from archsim.spec.library import Library
from archsim.validation.mlperf import MlperfReport, run_mlperf

TABLE = Library(use_env=False).mlperf("mlperf")


@pytest.fixture(scope="module")
def report() -> MlperfReport:
    return run_mlperf(Library(use_env=False))


def cases() -> list[object]:
    """One case per row; a row with a ``known_outside`` note is a strict expected failure."""
    return [
        pytest.param(
            row.id, marks=[pytest.mark.xfail(reason=row.known_outside, strict=True)] if row.known_outside else []
        )
        for row in TABLE.rows
    ]


@pytest.mark.validation
@pytest.mark.parametrize("row_id", cases())
def test_time_to_train_within_tolerance(report: MlperfReport, row_id: str) -> None:
    outcome = next(r for r in report.rows if r.id == row_id)
    assert outcome.predicted_minutes > 0
    assert abs(outcome.error) <= report.tolerance, (
        f"{row_id}: predicted {outcome.predicted_minutes:.2f} min vs published {outcome.published_minutes:.2f} "
        f"({100 * outcome.error:+.1f}%, tolerance {100 * report.tolerance:.0f}%)"
    )
