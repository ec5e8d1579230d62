"""A pipelined or accumulated step on a system: the trace cut into stages, one program per chip.

The stages are balanced by time on one chip (:func:`~archsim.workloads.pipeline.split_stages`); the
schedule (:mod:`archsim.engine.schedules`) orders each chip's microbatches, and the trace becomes each
chip's program (:func:`~archsim.workloads.microbatches.pipeline_programs`: its stage's ops per
microbatch, the sends and receives between stages, its buckets' all-reduces and its update), which
the engine replays with the chip's cost model and the system's links
(:func:`archsim.engine.parallel.pipeline_step`). One stage is gradient accumulation.
"""

from __future__ import annotations

from dataclasses import replace

from archsim import memory_fit
from archsim.engine.parallel import PipelineOutcome, PricedPrograms, Schedule, pipeline_step, price_programs
from archsim.engine.records import LinkStatistics
from archsim.engine.replay import OpTiming, replay
from archsim.engine.schedules import interleaved_order, stage_order
from archsim.errors import UsageError
from archsim.models.placement import Placement, place
from archsim.results.records import RunResult
from archsim.run.context import SystemContext
from archsim.run.expert_parallel import EXPERT_PARALLEL_NOTE, expert_data_fabric
from archsim.run.remedies import system_changes
from archsim.run.system_result import notify, system_result
from archsim.run.tensor_parallel import TENSOR_PARALLEL_NOTE, free_stream_calls, stream_spans
from archsim.workloads.expert_parallel import is_expert_gradient
from archsim.workloads.memory import memory_per_chip, resident_bytes, update_only_bytes
from archsim.workloads.microbatches import BlockKind, pipeline_programs
from archsim.workloads.pipeline import Stage, parameter_bytes, split_stages, stage_memory_bytes, sub_trace
from archsim.workloads.trace import Mode, Op, Phase, Trace


def pipelined(context: SystemContext, trace: Trace, microbatches: int) -> RunResult:
    """One step of ``microbatches`` microbatches of ``trace`` through the context's pipeline stages."""
    if trace.has_link_comm:  # a Chakra ET's communication runs on the data-parallel path only
        raise UsageError(trace.name, "--pipeline-stages", "a trace with communication ops runs data parallel only")
    train = trace.mode is Mode.TRAIN
    chips, chunks = context.options.pipeline_stages, context.options.interleave
    if chunks > 1 and microbatches % chips:
        fits = f"{chips * max(1, microbatches // chips)} or {chips * (microbatches // chips + 1)}"
        problem = (
            f"{microbatches} microbatches do not interleave over {chips} stages: a multiple of {chips} does ({fits})"
        )
        raise UsageError(trace.name, "--microbatches", problem)
    staged = stages_of(context, trace, microbatches)
    memory_fit.check_needs(
        context.chip,
        context.options.streaming,
        trace,
        lambda t: chip_needs(staged if t is trace else stages_of(context, t, microbatches), chips),
        context.rebuild,
        "--microbatches",
        system_changes(context, trace, stage_needs),
    )
    stages = [stage for stage, _ in staged]
    needs = chip_needs(staged, chips)
    shares = [sum(stage.parameter_fraction for stage in stages[d::chips]) for d in range(chips)]
    options = context.options
    if chunks == 1:
        orders = [[(kind, d, mb) for kind, mb in stage_order(options.schedule, d, chips, microbatches, train)]
                  for d in range(chips)]  # fmt: skip
    else:
        orders = [interleaved_order(d, chips, chunks, microbatches, train) for d in range(chips)]
    expert_width, expert_placement = expert_group(context)
    reduces = train and context.placement.data_parallel > 1
    programs = pipeline_programs(
        trace,
        stages,
        orders,
        send_share(context),
        context.comm.bucket_bytes if reduces else 0,
        None if expert_width == 0 else is_expert_gradient,
        expert_width > 1,
    )
    models = [context.model(trace, needs[d].bytes, shares[d]) for d in range(chips)]
    fullest = max(range(chips), key=lambda d: needs[d].bytes)
    memory = memory_per_chip(trace).scaled(shares[fullest], needs[fullest].bytes)
    placement, comm = context.placement, context.comm
    statistics = LinkStatistics()
    observers = context.observers(statistics)
    priced = price_programs(programs, models, context.issue_s)
    outcome = pipeline_step(priced, placement, comm, observers, True, expert_placement)
    free = pipeline_step(priced, placement, comm, communicate=False)
    in_stream = stream_blocks(outcome, priced)
    stream_exposed_s = 0.0  # what the in-stream collectives add over the same step with none
    if in_stream:
        priced_free = price_programs(programs, [free_stream_calls(m) for m in models], context.issue_s)
        stream_exposed_s = free.end_s - pipeline_step(priced_free, placement, comm, communicate=False).end_s
    entries, stage_spans = _pipeline_entries(trace, stages, outcome, priced)
    chip_spans = [
        sorted((s for spans in stage_spans[d::chips] for s in spans), key=lambda s: s[1]) for d in range(chips)
    ]
    blocks = {key: max((t.end_s for t in timings), default=0.0) for key, timings in priced.timings.items()}
    forward, backward = BlockKind.FORWARD, BlockKind.BACKWARD
    per_stage = [blocks.get((s, forward), 0.0) + blocks.get((s, backward), 0.0) for s in range(len(stages))]
    busy = [microbatches * sum(per_stage[d::chips]) for d in range(chips)]
    flush = outcome.pipeline_end_s
    bubble_s = max(0.0, sum(flush - b for b in busy) / len(busy))  # no negative rounding residue
    result = system_result(
        context,
        trace,
        trace.batch * microbatches,
        microbatches,
        entries,
        outcome.end_s,
        memory,
        single_chip_step(context, trace, microbatches),
        outcome.comm,
        statistics,
        exposed_s=max(0.0, outcome.end_s - free.end_s),
        bubble=(bubble_s, bubble_s / flush if flush > 0 else 0.0),
        in_stream=(in_stream, max(0.0, stream_exposed_s)),
    )
    if chunks > 1:
        result = replace(result, interleave=chunks)
    notify(context, chip_spans, outcome.comm)
    return result


def chip_needs(staged: list[tuple[Stage, memory_fit.Need]], chips: int) -> list[memory_fit.Need]:
    """What each chip of the pipeline holds: its stage's need, or the sum of its interleaved chunks'."""
    if len(staged) == chips:
        return [need for _, need in staged]
    needs = []
    for d in range(chips):
        mine = [need for _, need in staged[d::chips]]
        what = f"stage {d} with its {len(mine)} chunks' micro-batches in flight"
        needs.append(memory_fit.Need(what, sum(n.bytes for n in mine), sum(n.update_only for n in mine)))
    return needs


def stages_of(context: SystemContext, trace: Trace, microbatches: int) -> list[tuple[Stage, memory_fit.Need]]:
    """The (virtual) stages of ``trace`` (balanced by time on one chip) and what each one's chip holds for it.

    With ``V``-way interleaving there are ``P x V`` virtual stages, stage ``k`` on chip ``k mod P``; a
    chip in its warm-up holds ``2 (P - d - 1) + (V - 1) P + 1`` chunk-microbatches, spread over its chunks.
    """
    chips, chunks = context.options.pipeline_stages, context.options.interleave
    count = chips * chunks
    balance = context.model(trace, trace.memory_bytes // count, 1 / count)
    staged = []
    parameters, update_state = parameter_bytes(trace), update_only_bytes(trace.ops)  # walks, once per trace
    for stage in split_stages(trace, count, [balance.cost(op).time_s for op in trace.ops]):
        all_inflight = context.options.schedule is Schedule.GPIPE or trace.mode is not Mode.TRAIN
        if all_inflight:
            inflight = microbatches
        elif chunks == 1:
            inflight = min(microbatches, count - stage.index)
        else:
            warmup = 2 * (chips - stage.index % chips - 1) + (chunks - 1) * chips + 1
            inflight = min(microbatches, -(-warmup // chunks))
        needed = stage_memory_bytes(trace, stage, inflight, parameters=parameters)
        plural = "es" if inflight > 1 else ""
        what = f"stage {stage.index} with {inflight} micro-batch{plural} of {trace.batch} in flight"
        update_only = needed - resident_bytes(trace, needed, stage.parameter_fraction, update_state)
        staged.append((stage, memory_fit.Need(what, needed, update_only)))
    return staged


def stage_needs(context: SystemContext, trace: Trace, microbatches: int) -> list[memory_fit.Need]:
    """What each chip of the pipeline holds (:func:`stages_of`, :func:`chip_needs`), for :mod:`archsim.run.remedies`."""
    return chip_needs(stages_of(context, trace, microbatches), context.options.pipeline_stages)


def single_chip_step(context: SystemContext, trace: Trace, microbatches: int) -> float | str:
    """One chip running the whole per-replica batch as ``microbatches`` accumulated microbatches.

    The reference of ``scaling_efficiency``: the same micro-batch and options on one chip that holds
    the whole step in its memory (In-Processor Memory on IPUs, nothing in streaming memory). When
    one chip cannot, the reason why (a string) instead.
    """
    if context.placement.tensor_parallel > 1:
        return TENSOR_PARALLEL_NOTE
    if context.options.trace.expert_parallel > 1:
        return EXPERT_PARALLEL_NOTE
    unheld = memory_fit.one_chip_cannot_hold(context.chip, trace)
    if unheld is not None:
        return unheld
    model = context.model(trace, trace.memory_bytes)
    compute = [i for i, op in enumerate(trace.ops) if op.phase is not Phase.UPDATE]
    timings = replay(sub_trace(trace, compute, trace.name), model, context.issue_s)
    once = max((t.end_s for t in timings), default=0.0)
    update = sum(model.cost(op).time_s for op in trace.ops if op.phase is Phase.UPDATE)
    return microbatches * once + update + context.step_overhead_s


def send_share(context: SystemContext) -> int:
    """The part of a stage's boundary activations each tensor-parallel rank sends: 1 in ``T``.

    Megatron-LM's scatter-gather of pipeline sends (Narayanan et al. 2021, section 4.1): each rank
    sends its ``1/T`` slice and the next stage all-gathers it over the fast first tier (not priced).
    With sequence parallelism the activations are already split, so each rank sends its own.
    """
    options = context.options.trace
    return 1 if options.sequence_parallel else options.tensor_parallel


def expert_group(context: SystemContext) -> tuple[int, Placement | None]:
    """The replicas that hold the same experts: their number (0: no expert parallelism) and placement."""
    ep = context.options.trace.expert_parallel
    if ep == 1:
        return 0, None
    placement = context.placement
    width = placement.data_parallel // ep
    if width == 1:
        return 1, None
    t = placement.tensor_parallel
    fabric = expert_data_fabric(context.fabric, t * placement.stages, ep)
    return width, place(fabric, placement.stages, context.source, t)


def stream_blocks(outcome: PipelineOutcome, priced: PricedPrograms) -> list[tuple[float, float]]:
    """The (start, end) of every in-stream collective of every block the stages ran (every microbatch's)."""
    relative: dict[tuple[int, BlockKind], list[tuple[float, float]]] = {}  # per pass, from its block's start
    for program in priced.programs:
        for segment in program.segments:
            key = (segment.of.stage, segment.of.kind)
            if key not in relative:
                timed = zip(segment.ops.ops, priced.timings[key], strict=True)
                relative[key] = stream_spans((op, t.start_s, t.end_s) for op, t in timed)
    spans: list[tuple[float, float]] = []
    for block in outcome.tasks:
        at = block.start_s
        spans += [(at + start, at + end) for start, end in relative.get((block.stage, block.kind), ())]
    return spans


def _pipeline_entries(
    trace: Trace, stages: list[Stage], outcome: PipelineOutcome, priced: PricedPrograms
) -> tuple[list[tuple[Op, OpTiming, int]], list[list[tuple[str, float, float, str]]]]:
    """Layer entries (ops of microbatch 0 placed at their blocks' times) and block spans per stage."""
    first: dict[tuple[int, BlockKind], float] = {}
    spans: list[list[tuple[str, float, float, str]]] = [[] for _ in stages]
    updates: dict[int, tuple[float, float]] = {}
    for block in outcome.tasks:
        s, kind = block.stage, block.kind
        name = "update" if kind is BlockKind.UPDATE else f"{kind.value}{block.microbatch}"
        spans[s].append((name, block.start_s, block.end_s, kind.value))
        if kind is BlockKind.UPDATE:
            updates[s] = (block.start_s, block.end_s)
        elif block.microbatch == 0:
            first[(s, kind)] = block.start_s
    entries: list[tuple[Op, OpTiming, int]] = []
    for stage in stages:
        s = stage.index
        for indices, kind in ((stage.forward, BlockKind.FORWARD), (stage.backward, BlockKind.BACKWARD)):
            offset = first.get((s, kind), 0.0)
            for i, t in zip(indices, priced.timings.get((s, kind), []), strict=True):
                entries.append((trace.ops[i], OpTiming(offset + t.start_s, offset + t.end_s, t.cost), s))
        if stage.update is not None and s in updates:
            start, end = updates[s]
            entries.append((stage.update, OpTiming(start, end, priced.updates[s]), s))
    order = {id(op): k for k, op in enumerate(trace.ops)}
    entries.sort(key=lambda e: (order.get(id(e[0]), len(order)), e[2]))
    return entries, spans
