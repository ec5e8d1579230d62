"""The runner's one replay seam: a built trace on a resolved target, a system of one chip or of many.

:func:`replay_on_target` is where every run hands its built trace to the engine: the runner
(:func:`archsim.run.runner.replay_built`), validation rows, and code that builds its own traces
(:func:`archsim.api.run_trace`). It runs one step and finishes its result (energy, power, area, error
bars: :func:`finished`). A chip is a system of one chip (:data:`archsim.run.target.ONE_CHIP`): it has no
links, so a trace with communication ops is refused on it, and its step is replayed by the one-chip
list scheduler (:func:`archsim.engine.replay`), which gives the times the SimPy engine gives one chip
(tests/property/test_replay_schedule.py) without loading SimPy. A system joined by links runs its step
in the SimPy engine (:func:`archsim.run.system.system_step`: data parallel or pipelined).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from archsim import memory_fit
from archsim.engine import replay
from archsim.errors import SpecError, UsageError
from archsim.limits import check_trace_ops
from archsim.models import cost_model_for
from archsim.models.base import framework_overhead_s
from archsim.results.assembly import build_result
from archsim.results.power import priced
from archsim.results.records import RunResult
from archsim.results.timeline import TimelineSpan
from archsim.run.context import SystemOptions
from archsim.run.target import Target
from archsim.spec.chip import ChipSpec
from archsim.spec.efficiency import Efficiency
from archsim.spec.library import Library
from archsim.spec.registry import FamilyEfficiency
from archsim.stack import is_kernel, run_stack
from archsim.uncertainty import with_error_bars
from archsim.workloads.cache import cached_reads
from archsim.workloads.memory import resident_bytes
from archsim.workloads.trace import Mode, Trace

if TYPE_CHECKING:  # a plain run attaches no observer: the module is loaded where one is used
    from archsim.run.observers import RunObserver
    from archsim.workloads.rebuild import Rebuilder

ONE_CHIP_OPTIONS = SystemOptions()
"""A trace replayed as built: one batch per step, nothing in streaming memory, the chip's default stack."""


def replay_on_target(
    target: Target,
    trace: Trace,
    library: Library,
    options: SystemOptions = ONE_CHIP_OPTIONS,
    *,
    microbatches: int | None = None,
    observers: Sequence[RunObserver] = (),
    family_efficiency: Efficiency | None = None,
    rebuild: Rebuilder | None = None,
) -> RunResult:
    """Replay an already built trace (one chip's, one microbatch's when pipelined) on ``target``'s system.

    ``options`` say how it is spread over the system's chips, what may live in streaming memory and
    which stack runs it (``software`` None: the chip's default for this trace, see :mod:`archsim.stack`);
    ``microbatches`` None runs one batch per step, else a pipelined or accumulated step (systems with
    links only: the runner refuses a layout that spreads over one chip). ``observers`` watch the
    engine (:mod:`archsim.run.observers`). ``family_efficiency`` replaces the family file's efficiency
    parameters (the chip's own overrides still apply): calibration tries values through it without
    writing YAML. A step that does not fit is refused in one line, ``rebuild(batch, recompute)``
    building the workload at another (micro-)batch to name the largest that fits (None: the workload
    fixes its batch).
    """
    chip, system = target.chip, target.linked
    if chip.memory.cache is not None:  # what the chip's on-chip cache serves (TPU v4's CMEM)
        trace = cached_reads(trace, chip.memory.cache.capacity)
    if system is None:
        result = one_chip_step(target, trace, library, options, observers, family_efficiency, rebuild)
    else:
        from archsim.run.system import system_step  # SimPy and the fabric models: not loaded for one chip

        result = system_step(
            target, system, trace, microbatches, library, options, observers, family_efficiency, rebuild
        )
    return finished(result, chip, library, trace, target.chip_source)


def one_chip_step(
    target: Target,
    trace: Trace,
    library: Library,
    options: SystemOptions,
    observers: Sequence[RunObserver],
    family_efficiency: Efficiency | None,
    rebuild: Rebuilder | None,
) -> RunResult:
    """A step of ``trace`` on a system of one chip, before :func:`finished` (see :func:`replay_on_target`)."""
    check_trace_ops(len(trace.ops), trace.name)
    if trace.has_comm:
        raise UsageError(trace.name, "TARGET", "communication ops need a multi-chip system as the target, not a chip")
    chip = target.chip
    memory_fit.check_needs(chip, options.streaming, trace, memory_fit.trace_needs, rebuild)
    stack, efficiency = run_stack(library, chip, trace, options.software, family_efficiency)
    model = cost_model_for(chip, efficiency, trace.precision, resident_bytes(trace), framework_overhead_s(efficiency))
    resolved = FamilyEfficiency.resolve(efficiency, chip.name)
    timings = replay(trace, model, resolved.host_overhead)
    result = build_result(
        target=target.name,
        chip=chip,
        trace=trace,
        timings=timings,
        # the per-step cost is the training loop's (optimizer bookkeeping, loss scaling, data feed);
        # an inference loop only runs the forward ops
        step_overhead_s=resolved.step_overhead if trace.mode is Mode.TRAIN else 0.0,
        num_chips=target.num_chips,
        software=stack.name,
        input_samples_per_s=stack.input_pipeline,
    )
    if observers:
        spans = [TimelineSpan(layer.name, layer.start_s, layer.end_s, layer.phase) for layer in result.layers]
        for observer in observers:
            observer.step(lambda: [(f"chip 0 ({result.target})", spans)], ())
    return result


def finished(result: RunResult, chip: ChipSpec, library: Library, trace: Trace, chip_source: str = "") -> RunResult:
    """A replayed run's result with what every run reports on top of its times.

    Its energy, power and area (:func:`~archsim.results.power.priced`), then its error bars
    (:func:`~archsim.uncertainty.with_error_bars`). A figure of the chip the pricing refuses (a power
    limit at or below its static power) is named in the chip's file, ``chip_source``.
    """
    try:
        powered = priced(result, chip, library)
    except SpecError as err:
        if err.source:
            raise
        raise SpecError(chip_source or chip.name, err.field, err.problem) from None
    return with_error_bars(powered, library, chip, is_kernel(trace))
