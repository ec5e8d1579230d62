"""Published MLPerf times to train against archsim's (``archsim mlperf``).

:func:`run_mlperf` runs every row of an MLPerf table (``validation/mlperf.yaml``, :mod:`archsim.spec.mlperf`)
as a training step with the row's settings plus its time to train (:func:`archsim.time_to_train.simulate_training`),
and returns predicted against published minutes. A row whose settings do not give its published global
batch is refused, naming both. The table is reported, never fitted to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from statistics import fmean
from typing import Any

from archsim.errors import SpecError
from archsim.results.records import RunResult
from archsim.spec.library import Library
from archsim.spec.mlperf import MlperfRow, MlperfSpec
from archsim.time_to_train import simulate_training


@dataclass(frozen=True)
class MlperfOutcome:
    """One row: the published and predicted minutes and what the prediction is made of."""

    id: str
    published_minutes: float
    predicted_minutes: float
    error: float
    """``predicted / published - 1``."""
    within_tolerance: bool
    throughput: float
    """Predicted training samples per second."""
    epochs: float | None
    samples: float
    train_s: float
    eval_s: float


@dataclass(frozen=True)
class MlperfReport:
    """Every row of a table, with the table's tolerance."""

    table: str
    tolerance: float
    rows: tuple[MlperfOutcome, ...]

    @property
    def mape(self) -> float:
        """Mean absolute error over the rows."""
        return fmean(abs(r.error) for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "table": self.table,
            "tolerance": self.tolerance,
            "mape": self.mape,
            "rows": [asdict(r) for r in self.rows],
        }


def predict_row(row: MlperfRow, library: Library, source: str) -> RunResult:
    """The training run of ``row`` with its time to train."""
    result = simulate_training(
        row.target,
        row.workload,
        optimizer=row.optimizer,
        epochs=row.epochs,
        library=library,
        batch=row.batch,
        precision=row.precision,
        seq_len=row.seq_len,
        nodes=row.nodes,
        pipeline_stages=row.pipeline_stages,
        microbatches=row.microbatches,
        fusion=row.fusion,
        recompute=row.recompute,
        padding=row.padding,
        bn_group=row.bn_group,
        streaming_memory=row.streaming_memory,
        software=row.stack,
    )
    if result.global_batch != row.global_batch:
        raise SpecError(
            source,
            f"rows.{row.id}.global_batch",
            f"the settings give a global batch of {result.global_batch}, the log records {row.global_batch}",
        )
    return result


def run_mlperf(
    library: Library, table: str = "mlperf", progress: Callable[[int, int, str], None] | None = None
) -> MlperfReport:
    """Run every row of ``table`` (a name or path) and compare with the published minutes."""
    entry = library.find(["mlperf"], table)
    spec: MlperfSpec = library.spec(entry)
    outcomes = []
    for i, row in enumerate(spec.rows):
        if progress is not None:
            progress(i, len(spec.rows), row.id)
        result = predict_row(row, library, entry.source)
        ttt = result.time_to_train
        assert ttt is not None
        minutes = ttt.time_to_train_s / 60
        error = minutes / row.published_minutes - 1
        outcomes.append(
            MlperfOutcome(
                id=row.id,
                published_minutes=float(row.published_minutes),
                predicted_minutes=minutes,
                error=error,
                within_tolerance=abs(error) <= spec.tolerance,
                throughput=result.throughput,
                epochs=ttt.epochs,
                samples=ttt.samples,
                train_s=ttt.train_s,
                eval_s=ttt.eval_s,
            )
        )
    return MlperfReport(table=spec.name, tolerance=spec.tolerance, rows=tuple(outcomes))
