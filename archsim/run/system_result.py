"""A system step's result and timeline, from what the engine reported.

:func:`system_result` fills the run's :class:`~archsim.results.records.RunResult` (its layers, the
system fields, per-link statistics and every collective and transfer); :func:`notify` tells the run's
observers (:mod:`archsim.run.observers`) the step's compute lanes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from archsim.engine.network import Lane
from archsim.engine.parallel import CommLog
from archsim.engine.records import LinkStatistics
from archsim.engine.replay import OpTiming
from archsim.results.assembly import build_system_result
from archsim.results.records import LinkRecord, RunResult
from archsim.results.timeline import MIRRORED_CHIPS, TimelineSpan
from archsim.run.context import SystemContext
from archsim.run.observers import Lanes
from archsim.workloads.memory import MemoryPerChip
from archsim.workloads.trace import Op, Trace


def system_result(
    context: SystemContext,
    trace: Trace,
    batch: int,
    microbatches: int,
    entries: Sequence[tuple[Op, OpTiming, int]],
    ops_time_s: float,
    memory: MemoryPerChip,
    single_step: float | str,
    comm: CommLog,
    statistics: LinkStatistics,
    exposed_s: float,
    bubble: tuple[float, float],
    in_stream: tuple[Sequence[tuple[float, float]], float] = ((), 0.0),
) -> RunResult:
    """The result of a step of ``trace`` (one microbatch's) on the context's system.

    ``single_step`` is one chip's time for the same per-replica batch, or why one chip cannot run it;
    ``memory`` what the chip that holds the most holds; ``exposed_s`` what the links add to the step
    (over the same step with free links). ``in_stream`` is the (start, end) of every collective the
    chips' streams ran as ops (tensor and expert parallelism), which count in ``comm_s``, and what they
    add to the step (over the same step with them free), which counts in ``exposed_comm_s``.
    """
    step_s = ops_time_s + context.step_overhead_s
    collectives = sorted(comm.collectives, key=lambda c: (c.start_s, c.stage, c.name))
    collectives += sorted(comm.transfers, key=lambda c: (c.start_s, c.stage, c.name))
    options = context.options
    return build_system_result(
        target=context.system.name,
        system=context.system.name,
        nodes=options.nodes,
        chip=context.chip,
        trace=trace,
        batch=batch,
        entries=entries,
        ops_time_s=ops_time_s,
        step_overhead_s=context.step_overhead_s,
        num_chips=context.fabric.num_chips,
        data_parallel=context.placement.data_parallel,
        pipeline_stages=options.pipeline_stages,
        microbatches=microbatches,
        schedule=options.schedule.value if options.pipeline_stages > 1 else None,
        collective=context.comm.algorithm.value if context.placement.data_parallel > 1 else None,
        memory=memory,
        single_chip_step_s=single_step if isinstance(single_step, float) else None,
        scaling_note=single_step if isinstance(single_step, str) else None,
        comm_s=comm.busy_s(in_stream[0]),
        exposed_comm_s=exposed_s,
        stream_exposed_s=in_stream[1],
        software=context.software.name,
        input_samples_per_s=context.software.input_pipeline,
        bubble_s=bubble[0],
        bubble_fraction=bubble[1],
        links=link_records(comm.lanes, statistics, step_s),
        collectives=collectives,
        zero=options.zero,
    )


def notify(context: SystemContext, per_stage: list[list[tuple[str, float, float, str]]], comm: CommLog) -> None:
    """Tell the run's observers the step's compute lanes (mirrored from the representatives) and its links."""
    if not context.watchers:
        return

    def chip_lanes() -> Lanes:
        stages = len(per_stage)
        spans = [[TimelineSpan(n, s, e, c) for n, s, e, c in lanes] for lanes in per_stage]
        chips, t = context.fabric.num_chips, context.placement.tensor_parallel
        if chips <= MIRRORED_CHIPS:  # chip i runs stage (i // T) mod P
            return [(f"chip {i} (stage {i // t % stages})", spans[i // t % stages]) for i in range(chips)]
        each = chips // stages
        return [(f"chip {s * t} (stage {s}, stands for {each} chips)", spans[s]) for s in range(stages)]

    for watcher in context.watchers:
        watcher.step(chip_lanes, comm.lanes)


def link_records(lanes: Sequence[Lane], statistics: LinkStatistics, step_s: float) -> list[LinkRecord]:
    """Per tier and direction: the representative links' mean traffic and utilization over the step."""
    groups: dict[tuple[str, str, str], list[Lane]] = defaultdict(list)
    for lane in lanes:
        groups[(lane.tier.name, lane.tier.link, lane.id.direction.value)].append(lane)
    busy = {lane: statistics.busy_s.get(lane, 0.0) for lane in lanes}
    records = []
    for (tier, link, direction), members in groups.items():
        count = len(members)
        utilizations = [busy[lane] / step_s if step_s > 0 else 0.0 for lane in members]
        records.append(
            LinkRecord(
                tier=tier,
                link=link,
                direction=direction,
                links=count,
                bytes=sum(statistics.bytes.get(lane, 0.0) for lane in members) / count,
                busy_s=sum(busy[lane] for lane in members) / count,
                utilization=min(sum(utilizations) / count, max(utilizations)),  # no rounding above max
                max_utilization=max(utilizations),
            )
        )
    return records
