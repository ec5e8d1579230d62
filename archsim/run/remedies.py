"""The changes to a multi-chip run a refusal may name, each checked by fitting the changed step.

:func:`archsim.memory_fit.check_needs` names, for a decoder's training step that does not fit, the
first change that would make it fit, in this order: full recomputation (it checks that itself), the
changes listed here -- a higher ZeRO stage when the run is data parallel, a higher tensor-parallel
degree, then more pipeline stages --, then a smaller (micro-)batch. Each is checked alone (``archsim
plan`` searches the layouts that combine them). Another parallelism joins by adding its
:class:`~archsim.memory_fit.Change` to :func:`system_changes` in its place in that order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

from archsim.errors import UsageError
from archsim.memory_fit import Change, Need, fits, trace_needs
from archsim.models.placement import place
from archsim.run.context import SystemContext
from archsim.workloads.memory import trace_recompute
from archsim.workloads.trace import Mode, Trace
from archsim.workloads.zero import ZERO_STAGES, zero_memory


def all_fit(context: SystemContext, needs: list[Need]) -> bool:
    """True when every chip's need fits the context's chip (with its streaming-memory option)."""
    return all(fits(context.chip, context.options.streaming, n.bytes, n.update_only) for n in needs)


def zero_changes(context: SystemContext, trace: Trace) -> list[Change]:
    """Each ZeRO stage above the run's, for a data-parallel training step without pipeline stages."""
    width, zero = context.placement.data_parallel, context.options.zero
    if trace.mode is not Mode.TRAIN or width == 1 or context.options.pipeline_stages != 1:
        return []
    if context.options.trace.expert_parallel != 1:  # not modelled with expert parallelism (refused)
        return []

    def fits_at(stage: int) -> bool:
        memory = zero_memory(trace, stage, width)
        return all_fit(context, [Need("", memory.total, memory.optimizer_state)])

    return [Change(f"--zero {stage}", partial(fits_at, stage)) for stage in ZERO_STAGES if stage > zero]


StageNeeds = Callable[[SystemContext, Trace, int], list[Need]]
"""What each stage's chip of a pipelined step holds: ``(context, trace, microbatches)`` ->
needs (:func:`archsim.run.pipeline.stage_needs`, passed in: the pipeline module uses this one)."""


def pipeline_changes(context: SystemContext, trace: Trace, stage_needs: StageNeeds) -> list[Change]:
    """More pipeline stages (each dividing the system's first tier), the same micro-batch in every stage.

    A stage of ``P`` keeps up to ``P`` micro-batches in flight under 1F1B (``stage_needs``);
    the run the message names splits its batch into ``4 P`` micro-batches by default, each no larger
    than this one, so it needs no more than what is checked. Not offered with ZeRO (not modelled with pipelines).
    """
    current = context.options.pipeline_stages
    tiers = context.fabric.tiers
    if context.options.zero or not tiers or trace.mode.is_generation:
        return []
    changes: list[Change] = []
    for stages in range(current + 1, tiers[0].size + 1):
        try:
            placement = place(context.fabric, stages, context.source)
        except UsageError:
            continue
        replicas = context.fabric.num_chips // (stages * context.placement.tensor_parallel)
        if replicas % context.options.trace.expert_parallel:  # the experts' group would not tile the replicas
            continue
        options = replace(context.options, pipeline_stages=stages)
        staged = replace(context, options=options, placement=placement)

        def fits_with(staged: SystemContext = staged, stages: int = stages) -> bool:
            return all_fit(staged, stage_needs(staged, trace, 4 * stages))

        changes.append(Change(f"--pipeline-stages {stages}", fits_with))
    return changes


def tensor_parallel_changes(context: SystemContext, trace: Trace, stage_needs: StageNeeds) -> list[Change]:
    """Each higher tensor-parallel degree dividing the system's first tier, the rest of the layout kept.

    The step is rebuilt with every layer split ``T`` ways (:meth:`~archsim.workloads.rebuild.Rebuilder.
    sharded`) and placed again: ``T`` chips of a replica fewer replicas. Decoders only (the only
    models archsim splits), and not with ZeRO, whose sharding the data-parallel width sets.
    """
    rebuild, tiers = context.rebuild, context.fabric.tiers
    if rebuild is None or context.options.zero or not tiers or trace.meta.get("architecture") != "decoder":
        return []
    current, stages = context.placement.tensor_parallel, context.options.pipeline_stages
    recompute = trace_recompute(trace)
    changes: list[Change] = []
    for degree in range(current + 1, tiers[0].size + 1):
        if tiers[0].size % degree:
            continue
        try:
            placement = place(context.fabric, stages, context.source, degree)
        except UsageError:
            continue
        if placement.data_parallel % context.options.trace.expert_parallel:
            continue
        trace_options = replace(context.options.trace, tensor_parallel=degree)
        sharded = replace(context, options=replace(context.options, trace=trace_options), placement=placement)

        def fits_with(sharded: SystemContext = sharded, degree: int = degree) -> bool:
            shard = rebuild.sharded(degree)(trace.batch, recompute)
            if stages == 1:
                return all_fit(sharded, trace_needs(shard))
            return all_fit(sharded, stage_needs(sharded, shard, sharded.options.microbatches or 4 * stages))

        changes.append(Change(f"--tensor-parallel {degree}", fits_with))
    return changes


def system_changes(context: SystemContext, trace: Trace, stage_needs: StageNeeds) -> list[Change]:
    """The changes a refusal on a system may name, in the order it prefers them (see the module)."""
    return [
        *zero_changes(context, trace),
        *tensor_parallel_changes(context, trace, stage_needs),
        *pipeline_changes(context, trace, stage_needs),
    ]
