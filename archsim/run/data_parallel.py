"""A data-parallel step on a system: the representative chip's ops and its gradient all-reduces.

Every replica runs the same trace, so one chip's ops are replayed with the step's all-reduces
overlapping them in the engine (:func:`archsim.engine.parallel.data_parallel_step`).
"""

from __future__ import annotations

from archsim import memory_fit
from archsim.engine.parallel import CommPlan, data_parallel_step
from archsim.engine.records import LinkStatistics
from archsim.engine.replay import replay
from archsim.run.context import RunOutput, SystemContext
from archsim.run.system_result import system_result, timeline
from archsim.run.tensor_parallel import TENSOR_PARALLEL_NOTE
from archsim.workloads.trace import Trace
from archsim.workloads.transforms import compute_only, with_gradient_all_reduces


def data_parallel(context: SystemContext, trace: Trace) -> RunOutput:
    """One step of ``trace`` on every chip, its gradients all-reduced over the data-parallel group."""
    memory_fit.check_needs(context.chip, context.options.streaming, trace, memory_fit.trace_needs, context.rebuild)
    model = context.model(trace, trace.memory_bytes)
    compute = compute_only(trace)
    single = replay(compute, model, context.issue_s)
    single_end = max((t.end_s for t in single), default=0.0)
    step = with_communication(context, trace)
    costs = iter(t.cost for t in single)
    statistics = LinkStatistics()
    outcome = data_parallel_step(
        step.ops,
        [None if op.comm is not None and not op.comm.in_stream else next(costs) for op in step.ops],
        model.separate_units,
        context.placement,
        context.comm,
        context.issue_s,
        context.observers(statistics),
        own_plans(context, trace, step),
    )
    entries = [(op, t, 0) for op, t in zip(compute.ops, outcome.timings, strict=True)]
    result = system_result(
        context,
        trace,
        trace.batch,
        1,
        entries,
        outcome.end_s,
        trace.memory_bytes,
        single_step(context, single_end, bool(compute.ops)),
        outcome.comm,
        statistics,
        exposed_s=max(0.0, outcome.end_s - single_end),
        bubble=(0.0, 0.0),
    )
    spans = [[(op.name, t.start_s, t.end_s, op.phase.value) for op, t, _ in entries]]
    return RunOutput(result, timeline(context, spans, outcome.comm))


def single_step(context: SystemContext, single_end: float, computes: bool) -> float | str:
    """One chip's step time for the same batch (the reference of scaling), or why there is none."""
    if context.placement.tensor_parallel > 1:
        return TENSOR_PARALLEL_NOTE
    return single_end + context.step_overhead_s if computes else "the trace has no compute op to run on one chip"


def with_communication(context: SystemContext, trace: Trace) -> Trace:
    """The trace one replica runs, with its communication ops.

    A trace that brings its own (a Chakra ET) runs as it is; otherwise every replica all-reduces its
    gradient buckets over the data-parallel group (:func:`~archsim.workloads.transforms.with_gradient_all_reduces`).
    """
    if trace.has_link_comm or context.placement.data_parallel == 1:
        return trace
    return with_gradient_all_reduces(trace, context.comm.bucket_bytes, context.comm.overlap)


def own_plans(context: SystemContext, trace: Trace, step: Trace) -> dict[int, CommPlan]:
    """The library's plan for each collective ``trace`` brings itself (inserted all-reduces take the bucket's)."""
    if step is not trace:
        return {}
    planned = {
        i: context.plan_comm(op.comm) for i, op in enumerate(step.ops) if op.comm is not None and not op.comm.in_stream
    }
    return {i: plan for i, plan in planned.items() if plan is not None}
