"""Run the rows of a validation table and compare predictions with published values.

Each row is prepared once (target resolved, trace built) and can then be predicted many times with
different efficiency parameters, which is what calibration needs. Errors are signed relative errors,
``predicted / published - 1``; the mean absolute percentage error (MAPE) is reported per group and
overall.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from archsim.api import Target, resolve_target, run_trace
from archsim.errors import SpecError
from archsim.results.records import RunResult
from archsim.spec.chip import Efficiency, Family
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.spec.system import SystemSpec
from archsim.spec.validation import Group, Level, Metric, Row, ValidationSpec
from archsim.systems import ParallelOptions, replay_system, system_trace
from archsim.workloads import build_trace
from archsim.workloads.options import TraceOptions
from archsim.workloads.trace import Mode, Trace


@dataclass(frozen=True)
class Prepared:
    """A row with its resolved target and built trace (one chip's, for a system)."""

    row: Row
    target: Target
    trace: Trace
    system: SystemSpec | None = None
    """The multi-chip system the row runs on (its default parallel options), or None for one chip."""
    source: str = ""
    microbatches: int | None = None
    """Microbatches per step of a system row (None: data parallel, one batch per step)."""

    @property
    def family(self) -> Family:
        """The family of the row's chip."""
        return self.target.chip.family


@dataclass(frozen=True)
class RowResult:
    """One row's prediction."""

    row: Row
    predicted: float
    """Prediction in the row's unit (samples/s, ms or TFLOP/s)."""
    tolerance: float

    @property
    def error(self) -> float:
        """Signed relative error, predicted / published - 1."""
        return self.predicted / self.row.published - 1.0

    @property
    def within_tolerance(self) -> bool:
        """True when |error| is at most the group's tolerance."""
        return abs(self.error) <= self.tolerance


@dataclass(frozen=True)
class ValidationReport:
    """All rows of a table, with MAPE per group and overall."""

    name: str
    rows: tuple[RowResult, ...]

    def mape(self, group: Group | Level | None = None, in_scope: bool = False) -> float | None:
        """Mean absolute percentage error (as a fraction) of a group, a level, or all rows; None if empty.

        ``in_scope`` leaves out the rows marked ``known_outside`` (what the model does not cover);
        the headline figures count every row.
        """
        errors = [
            abs(r.error)
            for r in self.rows
            if (group is None or r.row.group is group or r.row.group.level is group)
            and not (in_scope and r.row.known_outside)
        ]
        return sum(errors) / len(errors) if errors else None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form: rows in table order, then MAPE per group and overall."""
        return {
            "table": self.name,
            "rows": [
                {
                    "id": r.row.id,
                    "group": r.row.group.value,
                    "target": r.row.target,
                    "workload": r.row.workload,
                    "mode": r.row.mode,
                    "batch": r.row.batch,
                    "seq_len": r.row.seq_len,
                    "gen_len": r.row.gen_len,
                    "precision": r.row.precision.value,
                    "microbatches": r.row.microbatches,
                    "fusion": r.row.fusion.value,
                    "recompute": r.row.recompute,
                    "metric": r.row.metric.value,
                    "phase": r.row.phase,
                    "unit": r.row.unit,
                    "published": r.row.published,
                    "predicted": r.predicted,
                    "error": r.error,
                    "tolerance": r.tolerance,
                    "within_tolerance": r.within_tolerance,
                    "known_outside": r.row.known_outside,
                    "source": r.row.source,
                }
                for r in self.rows
            ],
            "mape": {g.value: self.mape(g) for g in Group} | {"overall": self.mape()},
            "mape_level": {level.value: self.mape(level) for level in Level},
            "mape_in_scope": {g.value: self.mape(g, in_scope=True) for g in Group}
            | {"overall": self.mape(in_scope=True)},
        }


def prepare(row: Row, library: Library) -> Prepared:
    """Resolve a row's target and build its trace (done once per row)."""
    mode, precision = Mode(row.mode), Precision(row.precision)
    options = TraceOptions(row.fusion, row.recompute, row.gen_len)
    entry = library.find(["chip", "system"], row.target)
    if entry.kind == "system":
        system = library.system(row.target)
        source = entry.source
        parallel = ParallelOptions(microbatches=row.microbatches, trace=options)
        trace, microbatches = system_trace(
            system, source, row.workload, mode, row.batch, precision, row.seq_len, library, parallel
        )
        target = Target(name=system.name, chip=library.chip(system.chip))
        return Prepared(row, target, trace, system, source, microbatches)
    if row.microbatches is not None:
        raise SpecError(row.id, "microbatches", "needs a multi-chip system as the target")
    target = resolve_target(row.target, library)
    trace = build_trace(row.workload, library, mode, row.batch, precision, row.seq_len, options)
    return Prepared(row, target, trace)


def measure(row: Row, result: RunResult) -> float:
    """The row's metric read off a run, in the row's unit."""
    if row.metric is Metric.THROUGHPUT:
        return result.throughput
    if row.metric is Metric.TTFT:
        assert result.ttft_s is not None  # a prefill row (checked by the row's validator)
        return 1e3 * result.ttft_s
    layers = [layer for layer in result.layers if layer.phase == row.phase]
    if not layers:
        raise SpecError(row.id, "phase", f"the run has no op of phase {row.phase!r}")
    seconds = sum(layer.end_s - layer.start_s for layer in layers)
    if row.metric is Metric.OP_RATE:
        return sum(layer.flops for layer in layers) / seconds / 1e12
    return 1e3 * seconds


def predict(prepared: Prepared, library: Library, efficiencies: Mapping[Family, Efficiency] | None = None) -> float:
    """Predict one prepared row, optionally with replacement family efficiency parameters."""
    efficiency = None if efficiencies is None else efficiencies.get(prepared.family)
    if prepared.system is not None:
        options = ParallelOptions(microbatches=prepared.microbatches)
        run = replay_system(
            prepared.system, prepared.source, prepared.trace, prepared.microbatches, library, options, False, efficiency
        )
        return measure(prepared.row, run.result)
    result = run_trace(prepared.target, prepared.trace, library, efficiency)
    return measure(prepared.row, result)


def validate(
    library: Library,
    table: str = "published",
    progress: Callable[[int, int, str], None] | None = None,
) -> ValidationReport:
    """Run every row of ``table`` and compare with the published values."""
    spec: ValidationSpec = library.validation(table)
    return report_for(spec, [prepare(row, library) for row in spec.rows], library, None, progress)


def report_for(
    spec: ValidationSpec,
    prepared: Sequence[Prepared],
    library: Library,
    efficiencies: Mapping[Family, Efficiency] | None,
    progress: Callable[[int, int, str], None] | None = None,
) -> ValidationReport:
    """Predict prepared rows and assemble the report."""
    results = []
    for index, item in enumerate(prepared):
        if progress is not None:
            progress(index, len(prepared), item.row.id)
        results.append(RowResult(item.row, predict(item, library, efficiencies), spec.tolerance[item.row.group]))
    return ValidationReport(spec.name, tuple(results))
