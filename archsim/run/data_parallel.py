"""A data-parallel step on a system: the representative chip's ops and its gradient all-reduces.

Every replica runs the same trace, so one chip's ops are replayed with the step's all-reduces
overlapping them in the engine (:func:`archsim.engine.parallel.data_parallel_step`). With ZeRO
(:mod:`archsim.workloads.zero`) the step's communication is its reduce-scatters and all-gathers, the
chip updates its shard only, and memory fit checks the sharded memory; the one-chip reference of
``scaling_efficiency`` is then the same sharded step with free links (one chip alone has nothing to
shard its optimizer with, and its whole update would put the scaling above linear).
"""

from __future__ import annotations

from collections.abc import Callable

from archsim import memory_fit
from archsim.engine.parallel import CommPlan, data_parallel_step
from archsim.engine.records import LinkStatistics
from archsim.engine.replay import replay
from archsim.errors import UsageError
from archsim.results.records import RunResult
from archsim.run.context import SystemContext
from archsim.run.expert_parallel import EXPERT_PARALLEL_NOTE, expert_data_fabric
from archsim.run.pipeline import stage_needs
from archsim.run.remedies import system_changes
from archsim.run.system_result import notify, system_result
from archsim.run.tensor_parallel import TENSOR_PARALLEL_NOTE, free_stream_calls, stream_spans
from archsim.spec.system import Algorithm
from archsim.workloads.expert_parallel import is_expert_gradient
from archsim.workloads.trace import CommGroup, Trace
from archsim.workloads.transforms import compute_only, with_gradient_all_reduces
from archsim.workloads.zero import with_zero, zero_memory


def data_parallel(context: SystemContext, trace: Trace) -> RunResult:
    """One step of ``trace`` on every chip, its gradients all-reduced (or ZeRO-sharded) over the data-parallel group."""
    zero, width = context.options.zero, context.placement.data_parallel
    if zero and trace.has_link_comm:
        raise UsageError(trace.name, "--zero", "a trace with its own communication ops (a Chakra ET) runs as recorded")
    needs = zero_needs(zero, width)
    changes = system_changes(context, trace, stage_needs)
    memory_fit.check_needs(context.chip, context.options.streaming, trace, needs, context.rebuild, changes=changes)
    memory = zero_memory(trace, zero, width)
    step = with_communication(context, trace)
    sharded = zero > 0 and step is not trace
    model = context.model(step if sharded else trace, memory.total)
    compute = compute_only(step if sharded else trace)
    single = replay(compute, model, context.issue_s)
    single_end = max((t.end_s for t in single), default=0.0)
    stream_exposed_s = 0.0  # what the in-stream collectives add over the same step with none
    if any(op.comm is not None and op.comm.in_stream for op in compute.ops):
        free = replay(compute, free_stream_calls(model), context.issue_s)
        stream_exposed_s = max(0.0, single_end - max(t.end_s for t in free))
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
        own_plans(context, trace, step) | expert_data_plans(context, step),
    )
    entries = [(op, t, 0) for op, t in zip(compute.ops, outcome.timings, strict=True)]
    result = system_result(
        context,
        trace,
        trace.batch,
        1,
        entries,
        outcome.end_s,
        memory,
        single_step(context, single_end, bool(compute.ops)),
        outcome.comm,
        statistics,
        exposed_s=max(0.0, outcome.end_s - single_end),
        bubble=(0.0, 0.0),
        in_stream=(stream_spans((op, t.start_s, t.end_s) for op, t, _ in entries), stream_exposed_s),
    )
    notify(context, [[(op.name, t.start_s, t.end_s, op.phase.value) for op, t, _ in entries]], outcome.comm)
    return result


def single_step(context: SystemContext, single_end: float, computes: bool) -> float | str:
    """One chip's step time for the same batch (the reference of scaling), or why there is none."""
    if context.placement.tensor_parallel > 1:
        return TENSOR_PARALLEL_NOTE
    if context.options.trace.expert_parallel > 1:
        return EXPERT_PARALLEL_NOTE
    return single_end + context.step_overhead_s if computes else "the trace has no compute op to run on one chip"


def with_communication(context: SystemContext, trace: Trace) -> Trace:
    """The trace one replica runs, with its communication ops (:func:`replica_communication`)."""
    options = context.options
    return replica_communication(
        trace,
        context.placement.data_parallel,
        options.zero,
        options.trace.expert_parallel,
        context.comm.bucket_bytes,
        context.comm.overlap,
    )


def replica_communication(trace: Trace, width: int, zero: int, ep: int, bucket_bytes: int, overlap: bool) -> Trace:
    """``trace`` with what one of ``width`` data-parallel replicas communicates.

    A trace that brings its own (a Chakra ET) runs as it is; otherwise every replica all-reduces its
    gradient buckets over the data-parallel group (:func:`~archsim.workloads.transforms.with_gradient_all_reduces`),
    or communicates as its ZeRO stage says (:func:`~archsim.workloads.zero.with_zero`); with ``ep``-way
    expert parallelism the experts' gradients go over the ``width / ep`` replicas that hold the same
    experts (none when ``ep == width``).
    """
    if trace.has_link_comm or width == 1:
        return trace
    if zero:
        return with_zero(trace, zero, width, bucket_bytes, overlap)
    if ep == 1:
        return with_gradient_all_reduces(trace, bucket_bytes, overlap)
    step = with_gradient_all_reduces(trace, bucket_bytes, overlap, keep=lambda name: not is_expert_gradient(name))
    if width == ep:
        return step
    return with_gradient_all_reduces(step, bucket_bytes, overlap, is_expert_gradient, CommGroup.EXPERT_DATA_PARALLEL)


def expert_data_plans(context: SystemContext, step: Trace) -> dict[int, CommPlan]:
    """How the expert gradients' all-reduces run: as the step's buckets, on the replicas holding the same experts."""
    group = CommGroup.EXPERT_DATA_PARALLEL
    ops = [i for i, op in enumerate(step.ops) if op.comm is not None and op.comm.group is group]
    if not ops:
        return {}
    placement = context.placement
    unit = placement.tensor_parallel * placement.stages
    fabric = expert_data_fabric(context.fabric, unit, context.options.trace.expert_parallel)
    algorithm = context.comm.algorithm
    if algorithm is Algorithm.TORUS and not any(tier.torus for tier in fabric.tiers):
        algorithm = Algorithm.RING  # the group keeps no torus dimension
    plan = CommPlan(fabric, algorithm, context.comm.chunk_bytes, context.comm.launch_s)
    return dict.fromkeys(ops, plan)


def zero_needs(zero: int, width: int) -> Callable[[Trace], list[memory_fit.Need]]:
    """What the one chip of a data-parallel step holds, at ZeRO stage ``zero`` over ``width`` chips."""
    if zero == 0 or width == 1:
        return memory_fit.trace_needs

    def needs(trace: Trace) -> list[memory_fit.Need]:
        memory = zero_memory(trace, zero, width)
        what = f"batch {trace.batch} at ZeRO stage {zero} over {width} chips"
        return [memory_fit.Need(what, memory.total, memory.optimizer_state)]

    return needs


def own_plans(context: SystemContext, trace: Trace, step: Trace) -> dict[int, CommPlan]:
    """The library's plan for each collective ``trace`` brings itself (inserted all-reduces take the bucket's)."""
    if step is not trace:
        return {}
    planned = {
        i: context.plan_comm(op.comm) for i, op in enumerate(step.ops) if op.comm is not None and not op.comm.in_stream
    }
    return {i: plan for i, plan in planned.items() if plan is not None}
