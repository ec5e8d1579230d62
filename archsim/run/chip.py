"""Replay a built trace on one chip, and finish any replayed result (energy, power, error bars).

:func:`replay_on_chip` is the one-chip seam of the runner: a trace already built (by
:func:`archsim.run.runner.run`, a validation row, a benchmark) priced by the chip's cost model and
replayed in the engine (:func:`archsim.engine.replay`).
"""

from __future__ import annotations

from collections.abc import Callable

from archsim import memory_fit
from archsim.engine import replay
from archsim.errors import UsageError
from archsim.limits import check_trace_ops
from archsim.models import cost_model_for
from archsim.models.base import framework_overhead_s
from archsim.results.assembly import build_result
from archsim.results.power import priced
from archsim.results.records import RunResult
from archsim.run.target import Target
from archsim.spec.chip import ChipSpec
from archsim.spec.common import StreamingMemory
from archsim.spec.efficiency import Efficiency
from archsim.spec.library import Library
from archsim.spec.registry import FamilyEfficiency
from archsim.spec.software import SoftwareSpec
from archsim.stack import default_software, is_kernel, stack_efficiency
from archsim.uncertainty import with_error_bars
from archsim.workloads.memory import resident_bytes
from archsim.workloads.options import Recompute
from archsim.workloads.trace import Mode, Trace


def replay_on_chip(
    target: Target,
    trace: Trace,
    library: Library,
    family_efficiency: Efficiency | None = None,
    software: SoftwareSpec | None = None,
    *,
    streaming: StreamingMemory = StreamingMemory.NONE,
    rebuild: Callable[[int, Recompute], Trace] | None = None,
) -> RunResult:
    """Replay an already built trace on a resolved one-chip target.

    ``family_efficiency`` replaces the family file's efficiency parameters (the chip's own overrides
    still apply); calibration uses it to try parameter values without writing YAML. ``software`` is
    the stack that runs it (None: the chip's default for this trace, see :mod:`archsim.stack`). A
    trace that does not fit under ``streaming`` is refused (:func:`archsim.memory_fit.check_needs`,
    which uses ``rebuild`` to name the largest batch that fits).
    """
    check_trace_ops(len(trace.ops), trace.name)
    if trace.has_comm:
        raise UsageError(trace.name, "TARGET", "communication ops need a multi-chip system as the target, not a chip")
    chip = target.chip
    memory_fit.check_needs(chip, streaming, trace, memory_fit.trace_needs, rebuild)
    stack = software if software is not None else default_software(library, chip, is_kernel(trace))
    efficiency = stack_efficiency(library, chip, stack, trace.precision, family_efficiency)
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
    return finished(result, chip, library, trace)


def finished(result: RunResult, chip: ChipSpec, library: Library, trace: Trace) -> RunResult:
    """A replayed run's result with what every run reports on top of its times.

    Its energy, power and area (:func:`~archsim.results.power.priced`), then its error bars
    (:func:`~archsim.uncertainty.with_error_bars`); chips and systems alike.
    """
    return with_error_bars(priced(result, chip, library), library, chip, is_kernel(trace))
