"""Each published measurement of the validation tables as a test with its stated tolerance.

``validation/published.yaml`` holds the rows archsim's efficiency parameters are fitted to;
``validation/published-llm.yaml`` the LLM rows of calibration_llm.csv, which nothing is fitted to
(they check the tensor-core family as fitted to the first table); ``validation/power.yaml`` measured
average power, which nothing is fitted to either (it checks the energy model). Run them alone with
``pytest -m validation``, or leave them out with ``pytest -m "not validation"``. The rows whose
pipelines replay thousands of blocks (Megatron-LM's 310B to 1T runs on up to 3,072 GPUs: seconds each,
a minute together) are skipped unless ``ARCHSIM_SLOW_VALIDATION=1``, to keep the suite's time. A cost-model change
that pushes any row outside its group's tolerance fails here. Rows known to be outside today say why
in the table (``known_outside``) and are strict expected failures: the day such a row comes inside,
its test fails until the note is removed.
"""

from __future__ import annotations

import functools
import os

import pytest

from archsim.spec.library import Library
from archsim.spec.validation import Row
from archsim.validation import RowResult, prepare
from archsim.validation.run import report_for

TABLES = ("published", "published-llm", "power")
LIBRARY = Library(use_env=False)


SLOW_BLOCKS = 2000
"""A row whose pipeline replays more blocks than this (stages x chunks x microbatches) is slow."""


def slow(row: Row) -> bool:
    """True for a row whose run replays more than :data:`SLOW_BLOCKS` pipeline blocks."""
    return (row.pipeline_stages or 1) * (row.interleave or 1) * (row.microbatches or 1) > SLOW_BLOCKS


@functools.cache
def row_result(table: str, row_id: str) -> RowResult:
    """One row's prediction, run once per test process."""
    spec = LIBRARY.validation(table)
    row = next(r for r in spec.rows if r.id == row_id)
    return report_for(spec, [prepare(row, LIBRARY)], LIBRARY, None).rows[0]


def cases() -> list[object]:
    """One case per row of each table; a row with a ``known_outside`` note is a strict expected failure."""
    out: list[object] = []
    run_slow = os.environ.get("ARCHSIM_SLOW_VALIDATION") == "1"
    for table in TABLES:
        for row in LIBRARY.validation(table).rows:
            marks = [pytest.mark.xfail(reason=row.known_outside, strict=True)] if row.known_outside else []
            if slow(row) and not run_slow:
                marks.append(pytest.mark.skip(reason="slow row: set ARCHSIM_SLOW_VALIDATION=1 to run it"))
            out.append(pytest.param(table, row.id, marks=marks, id=f"{table}:{row.id}"))
    return out


@pytest.mark.validation
@pytest.mark.parametrize(("table", "row_id"), cases())
def test_row_within_tolerance(table: str, row_id: str) -> None:
    result = row_result(table, row_id)
    assert result.predicted > 0
    assert abs(result.error) <= result.tolerance, (
        f"{row_id}: predicted {result.predicted:.4g} vs published {result.row.published:.4g} {result.row.unit} "
        f"({100 * result.error:+.1f}%, tolerance {100 * result.tolerance:.0f}%); source: {result.row.source}"
    )


@pytest.mark.validation
def test_the_llm_table_covers_both_generation_and_kernels() -> None:
    rows = LIBRARY.validation("published-llm").rows
    metrics = {"op_rate", "ttft", "step_time", "output_throughput", "achieved_tflops", "mfu"}
    assert {row.metric.value for row in rows} == metrics
    single = [row for row in rows if row.group.value != "multi_chip"]
    assert single and all(row.target in ("a100-80gb", "h100", "h200", "mi300x") for row in single)
    # the multi-chip rows are Megatron-LM and TensorRT-LLM runs with tensor or data parallelism (issue 22),
    # and vLLM's eight single-GPU replicas on an MI300X platform (data parallelism within one system)
    multi = [row for row in rows if row not in single]
    assert all(
        (row.tensor_parallel or 1) > 1 or (row.nodes or 1) > 1 or LIBRARY.system(row.target).num_chips > 1
        for row in multi
    )
    # every row names its calibration_llm.csv id
    assert all("calibration_llm.csv " in row.notes for row in rows)


@pytest.mark.validation
def test_slow_rows_are_few() -> None:
    """The skipped rows are the big Megatron-LM runs only, so the default suite checks the rest."""
    rows = LIBRARY.validation("published-llm").rows
    assert sum(slow(row) for row in rows) <= 5
    assert all(row.metric.value in ("achieved_tflops", "mfu", "step_time") for row in rows if slow(row))
