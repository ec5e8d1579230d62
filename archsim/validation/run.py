"""Run the rows of a validation table and compare predictions with published values.

Each row is prepared once (target resolved, trace built) and can then be predicted many times with
different efficiency parameters, which is what calibration needs. Errors are signed relative errors,
``predicted / published - 1``; the mean absolute percentage error (MAPE) is reported per group and
overall.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from archsim.collective_run import collective
from archsim.errors import SpecError
from archsim.results.records import RunResult
from archsim.run import generation
from archsim.run.request import RunRequest
from archsim.run.runner import BuiltRun, build, largest_batch, replay_built
from archsim.run.target import Target
from archsim.spec.efficiency import Efficiency
from archsim.spec.library import Library
from archsim.spec.software import SoftwareSpec
from archsim.spec.validation import Group, Level, Metric, Row, ValidationSpec
from archsim.stack import default_software, is_kernel
from archsim.workloads.trace import Mode


@dataclass(frozen=True)
class Prepared:
    """A row with its resolved target and, unless it times one collective call, its built run."""

    row: Row
    target: Target
    built: BuiltRun | None
    """The row's run as the runner builds it (None for a ``busbw`` row, which times one collective call;
    a ``generate`` row's prefill)."""
    decode: BuiltRun | None = None
    """A ``generate`` row's decode steps (None for any other row)."""

    @property
    def family(self) -> str:
        """The family of the row's chip."""
        return self.target.chip.family


@dataclass(frozen=True)
class RowResult:
    """One row's prediction."""

    row: Row
    predicted: float
    """Prediction in the row's unit (samples/s, ms, TFLOP/s, GB/s or W)."""
    tolerance: float
    family: str = ""
    """The family of the row's chip."""
    software: str = ""
    """What ran the row: its software stack, or a ``busbw`` row's collective library."""

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
    held_out: bool = False
    """The table's rows are outside the calibration files (:attr:`ValidationSpec.held_out`)."""

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
            "held_out": self.held_out,
            "rows": [
                {
                    "id": r.row.id,
                    "group": r.row.group.value,
                    "family": r.family,
                    "software_run": r.software,
                    "target": r.row.target,
                    "workload": r.row.workload,
                    "mode": r.row.mode,
                    "batch": r.row.batch,
                    "seq_len": r.row.seq_len,
                    "gen_len": r.row.gen_len,
                    "precision": r.row.precision.value,
                    "microbatches": r.row.microbatches,
                    "nodes": r.row.nodes,
                    "pipeline_stages": r.row.pipeline_stages,
                    "interleave": r.row.interleave,
                    "tensor_parallel": r.row.tensor_parallel,
                    "sequence_parallel": r.row.sequence_parallel,
                    "streaming_memory": None if r.row.streaming_memory is None else r.row.streaming_memory.value,
                    "bytes": r.row.bytes,
                    "software": r.row.software,
                    "fusion": None if r.row.fusion is None else r.row.fusion.value,
                    "recompute": r.row.recompute,
                    "padding": r.row.padding,
                    "bn_group": r.row.bn_group,
                    "metric": r.row.metric.value,
                    "phase": r.row.phase,
                    "unit": r.row.unit,
                    "published": r.row.published,
                    "predicted": r.predicted,
                    "error": r.error,
                    "tolerance": r.tolerance,
                    "within_tolerance": r.within_tolerance,
                    "known_outside": r.row.known_outside,
                    "fit": r.row.fit,
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
    """Resolve a row's target and build its run (done once per row)."""
    entry = library.find(["chip", "system"], row.target)
    system = library.system(row.target) if entry.kind == "system" else None
    if row.mode is None:  # a busbw row: one collective call, no trace
        if system is None:
            raise SpecError(row.id, "target", "a busbw row needs a multi-chip system as the target")
        target = Target(system.name, library.chip(system.chip), system=system, source=entry.source)
        return Prepared(row, target, None)
    if system is None:
        for field, value in (
            ("microbatches", row.microbatches),
            ("nodes", row.nodes),
            ("pipeline_stages", row.pipeline_stages),
            ("interleave", row.interleave),
            ("tensor_parallel", row.tensor_parallel),
        ):
            if value is not None:
                raise SpecError(row.id, field, "needs a multi-chip system as the target")
    generating = row.mode in ("prefill", "decode", "generate")
    request = RunRequest.of(
        row.target,
        row.workload,
        row.mode,
        1 if row.batch == "max" else row.batch,
        row.precision,
        None if generating else row.seq_len,
        prompt_len=row.seq_len if generating else None,
        gen_len=row.gen_len,
        nodes=row.nodes,
        pipeline_stages=row.pipeline_stages or 1,
        microbatches=row.microbatches,
        software=row.software,
        fusion=row.fusion,
        recompute=row.recompute,
        padding=row.padding,
        bn_group=row.bn_group,
        streaming_memory=row.streaming_memory,
        tensor_parallel=row.tensor_parallel or 1,
        sequence_parallel=bool(row.sequence_parallel),
        interleave=row.interleave or 1,
    )
    if request.mode is Mode.GENERATE:  # a prefill then decode steps, as archsim run combines them
        prefill = build(replace(request, mode=Mode.PREFILL, gen_len=None), library)
        decode = build(replace(request, mode=Mode.DECODE), library)
        if row.batch == "max":
            batch = largest_batch(decode, prefill)
            if batch is None:
                raise SpecError(row.id, "batch", f"{row.workload} fixes its batch: batch max needs a model")
            prefill = build(replace(prefill.request, batch=batch), library)
            decode = build(replace(decode.request, batch=batch), library)
        return Prepared(row, prefill.target, prefill, decode)
    built = build(request, library)
    return Prepared(row, built.target, built)


def measure(row: Row, result: RunResult) -> float:
    """The row's metric read off a run, in the row's unit."""
    if row.metric is Metric.THROUGHPUT:
        return result.throughput
    if row.metric is Metric.TTFT:
        assert result.ttft_s is not None  # a prefill row (checked by the row's validator)
        return 1e3 * result.ttft_s
    if row.metric is Metric.STEP_TIME:
        return result.step_time_s
    if row.metric is Metric.POWER:
        return result.power_w
    if row.metric is Metric.OUTPUT_THROUGHPUT:
        return _output_throughput(row, result)
    if row.metric is Metric.ACHIEVED_TFLOPS:
        # every FLOP the step executes (the backward pass's and any recomputed forward's), as
        # Megatron-LM's "achieved TFLOP/s" counts them (Narayanan et al. 2021, Eq. 3)
        return result.flops / result.step_time_s / result.num_chips / 1e12
    if row.metric is Metric.MFU:
        if result.mfu is None:
            raise SpecError(row.id, "workload", "metric mfu needs a decoder model")
        return 100.0 * result.mfu
    layers = [layer for layer in result.layers if layer.phase == row.phase]
    if not layers:
        raise SpecError(row.id, "phase", f"the run has no op of phase {row.phase!r}")
    # a kernel benchmark's op is read at the nominal clock: it times one kernel for milliseconds, which
    # a board's power limit (acting over longer windows) does not throttle, while archsim throttles a
    # run to its step's average power and stretches its layers with the clock (archsim.results.power)
    seconds = sum(layer.end_s - layer.start_s for layer in layers) * result.clock_scale
    if row.metric is Metric.OP_RATE:
        return sum(layer.flops for layer in layers) / seconds / 1e12
    return 1e3 * seconds


def _output_throughput(row: Row, result: RunResult) -> float:
    """A generate run's output tokens per second: per chip (``tok/s/GPU``) or per model replica (``tok/s``).

    A replica is the chips one copy of the model spans (tensor-parallel x pipeline stages), which is
    what a published single-replica run measures; a system target holds several replicas.
    """
    assert result.output_tokens_per_s is not None  # a generate row (checked by the row's validator)
    per_chip = result.output_tokens_per_s / result.num_chips
    if row.unit == "tok/s/GPU":
        return per_chip
    return per_chip * result.tensor_parallel * result.pipeline_stages


def software_of(prepared: Prepared, library: Library) -> SoftwareSpec | None:
    """The stack a prepared row runs with (the one it names, or its chip's default for its trace).

    None for a ``busbw`` row, which runs a collective library, not a stack (see :func:`software_name`).
    """
    if prepared.built is None:
        return None
    if prepared.built.software is not None:
        return prepared.built.software
    return default_software(library, prepared.target.chip, is_kernel(prepared.built.trace))


def software_name(prepared: Prepared, library: Library) -> str:
    """The name of what runs a row: its software stack, or a ``busbw`` row's collective library."""
    stack = software_of(prepared, library)
    if stack is not None:
        return stack.name
    if prepared.row.software is not None:
        return library.collective_library(prepared.row.software).name
    system = prepared.target.linked
    assert system is not None  # a busbw row runs on a system
    found = library.system_collective_library(system)
    return found.name if found is not None else "links"


def predict(
    prepared: Prepared,
    library: Library,
    efficiencies: Mapping[str, Efficiency] | None = None,
    stacks: Mapping[str, SoftwareSpec] | None = None,
) -> float:
    """Predict one prepared row, optionally with replacement family efficiencies or software stacks.

    ``stacks`` maps a stack's name to a replacement (calibration tries dispatch costs this way).
    """
    efficiency = None if efficiencies is None else efficiencies.get(prepared.family)
    software = software_of(prepared, library)
    if software is None or prepared.built is None:
        return _busbw(prepared, library)
    software = stacks.get(software.name, software) if stacks is not None else software
    result = replay_built(prepared.built, library, family_efficiency=efficiency, software=software)
    if prepared.decode is None:
        return measure(prepared.row, result)
    step = replay_built(prepared.decode, library, family_efficiency=efficiency, software=software)
    assert step.gen_len is not None  # a decode run reports its generation length
    return measure(prepared.row, generation.combined(result, step, step.gen_len, prepared.target.chip))


def _busbw(prepared: Prepared, library: Library) -> float:
    """A busbw row: one collective call as ``archsim collective`` times it, in GB/s of bus bandwidth."""
    row = prepared.row
    assert row.bytes is not None  # checked by the row's validator
    nodes = row.nodes or 1
    result = collective(row.target, row.workload, [row.bytes], row.software, nodes, library=library)[0]
    return result.busbw_bytes_per_s / 1e9


def calibration_table(library: Library, table: str) -> ValidationSpec:
    """Validation table ``table``, to fit or cross-validate parameters on; a held-out table is refused."""
    spec: ValidationSpec = library.validation(table)
    if spec.held_out:
        raise ValueError(f"{table} is a held-out table (held_out: true): nothing may be fitted to it")
    return spec


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
    efficiencies: Mapping[str, Efficiency] | None,
    progress: Callable[[int, int, str], None] | None = None,
    stacks: Mapping[str, SoftwareSpec] | None = None,
) -> ValidationReport:
    """Predict prepared rows and assemble the report."""
    results = []
    for index, item in enumerate(prepared):
        if progress is not None:
            progress(index, len(prepared), item.row.id)
        predicted = predict(item, library, efficiencies, stacks)
        software = software_name(item, library)
        results.append(RowResult(item.row, predicted, spec.tolerance[item.row.group], item.family, software))
    return ValidationReport(spec.name, tuple(results), spec.held_out)
