"""Each published measurement of the validation tables as a test with its stated tolerance.

``validation/published.yaml`` holds the rows archsim's efficiency parameters are fitted to;
``validation/published-llm.yaml`` the single-chip LLM rows of calibration_llm.csv, which nothing is
fitted to (they check the tensor-core family as fitted to the first table). Run them alone with
``pytest -m validation``, or leave them out with ``pytest -m "not validation"``. A cost-model change
that pushes any row outside its group's tolerance fails here. Rows known to be outside today say why
in the table (``known_outside``) and are strict expected failures: the day such a row comes inside,
its test fails until the note is removed.
"""

from __future__ import annotations

import functools

import pytest

from archsim.spec.library import Library
from archsim.validation import ValidationReport, validate

TABLES = ("published", "published-llm")
LIBRARY = Library(use_env=False)


@functools.cache
def report(table: str) -> ValidationReport:
    """The table's validation report, run once per test process."""
    return validate(LIBRARY, table)


def cases() -> list[object]:
    """One case per row of each table; a row with a ``known_outside`` note is a strict expected failure."""
    out: list[object] = []
    for table in TABLES:
        for row in LIBRARY.validation(table).rows:
            marks = [pytest.mark.xfail(reason=row.known_outside, strict=True)] if row.known_outside else []
            out.append(pytest.param(table, row.id, marks=marks, id=f"{table}:{row.id}"))
    return out


@pytest.mark.validation
@pytest.mark.parametrize(("table", "row_id"), cases())
def test_row_within_tolerance(table: str, row_id: str) -> None:
    result = next(r for r in report(table).rows if r.row.id == row_id)
    assert result.predicted > 0
    assert abs(result.error) <= result.tolerance, (
        f"{row_id}: predicted {result.predicted:.4g} vs published {result.row.published:.4g} {result.row.unit} "
        f"({100 * result.error:+.1f}%, tolerance {100 * result.tolerance:.0f}%); source: {result.row.source}"
    )


@pytest.mark.validation
def test_the_llm_table_covers_both_generation_and_kernels() -> None:
    rows = LIBRARY.validation("published-llm").rows
    assert {row.metric.value for row in rows} == {"op_rate", "ttft", "step_time"}
    single = [row for row in rows if row.group.value != "multi_chip"]
    assert single and all(row.target == "a100-80gb" for row in single)
    # the multi-chip rows are Megatron-LM and TensorRT-LLM runs with tensor parallelism (issue 22)
    assert all((row.tensor_parallel or 1) > 1 for row in rows if row not in single)
