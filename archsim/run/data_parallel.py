"""A data-parallel step on a system: the representative chip's ops and its gradient all-reduces.

Every replica runs the same trace, so one chip's ops are replayed with the step's all-reduces
overlapping them in the engine (:func:`archsim.engine.parallel.data_parallel_step`).
"""

from __future__ import annotations

from archsim import memory_fit
from archsim.engine.parallel import data_parallel_step
from archsim.engine.records import LinkStatistics
from archsim.engine.replay import replay
from archsim.run.context import RunOutput, SystemContext
from archsim.run.system_result import system_result, timeline
from archsim.workloads.trace import Trace


def data_parallel(context: SystemContext, trace: Trace) -> RunOutput:
    """One step of ``trace`` on every chip, its gradients all-reduced over the data-parallel group."""
    memory_fit.check_needs(context.chip, context.options.streaming, trace, memory_fit.trace_needs, context.rebuild)
    model = context.model(trace, trace.memory_bytes)
    single = replay(trace, model, context.issue_s)
    single_end = max((t.end_s for t in single), default=0.0)
    costs = [t.cost for t in single]
    statistics = LinkStatistics()
    observers = context.observers(statistics)
    outcome = data_parallel_step(
        trace.ops, costs, model.separate_units, context.placement, context.comm, context.issue_s, observers
    )
    entries = [(op, t, 0) for op, t in zip(trace.ops, outcome.timings, strict=True)]
    result = system_result(
        context,
        trace,
        trace.batch,
        1,
        entries,
        outcome.end_s,
        trace.memory_bytes,
        single_end + context.step_overhead_s,
        outcome.comm,
        statistics,
        exposed_s=max(0.0, outcome.end_s - single_end),
        bubble=(0.0, 0.0),
    )
    spans = [[(op.name, t.start_s, t.end_s, op.phase.value) for op, t, _ in entries]]
    return RunOutput(result, timeline(context, spans, outcome.comm))
