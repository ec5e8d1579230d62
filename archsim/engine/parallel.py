"""Parallel training steps on a system: compute and communication in one SimPy environment.

**Data parallel** (:func:`data_parallel_step`). Every chip runs the same trace on its own batch, so
one representative chip's ops are replayed. The trace's compute ops run as in a one-chip replay (the
same processes, priced by the chip's cost model); its communication ops
(:attr:`~archsim.workloads.trace.OpKind.COMM`) run one after another on one communication stream
(like NCCL's), each once its dependencies have finished, on the system's links: collectives in the
collective engine, sends and receives on a link of the innermost tier. A compute op that depends on a
communication op waits for it. Gradient all-reduces are such ops, inserted by
:func:`archsim.workloads.transforms.with_gradient_all_reduces` (buckets that start while the backward
pass goes on, an optimizer update that waits for the last); a Chakra trace brings its own.

**Pipeline parallel** (:func:`pipeline_step`). A pipelined or accumulated step is a program of ops per
chip (:func:`archsim.workloads.microbatches.pipeline_programs`): its stage's ops per microbatch in its
schedule's order (GPipe, 1F1B, interleaved: :mod:`archsim.engine.schedules`), with the receives and
sends between neighbouring stages, its gradient buckets' all-reduces and its updates. A forward of
microbatch ``m`` needs the previous stage's activations of ``m``, which travel over the links between
the two chips once that forward ends; backwards pass gradients the other way. After its last
backward a chip all-reduces its gradients over its data-parallel group (buckets, overlapped with that
last backward), then updates.

Everything that moves between chips is a transfer on the representative network
(:mod:`archsim.engine.network`), so activations, gradients and all-reduces that share a link contend
for it. Link statistics and timelines attach to that network as observers (``observers``,
:mod:`archsim.engine.records`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from archsim.engine.collectives import DEFAULT_CHUNK_BYTES, Collective, CollectiveEngine, check_flat_ring_budget
from archsim.engine.network import Direction, Lane, LaneId, LinkObserver, RepNetwork, Route
from archsim.engine.options import Schedule as Schedule  # re-exported: its home was here
from archsim.engine.records import Block, CollectiveRecord
from archsim.engine.replay import OpTiming, replay, schedule_ops
from archsim.engine.schedules import stage_order as stage_order
from archsim.errors import UsageError
from archsim.models.base import CostModel, OpCost
from archsim.models.interconnect import Fabric, TierKind
from archsim.models.placement import Placement, place
from archsim.spec.system import Algorithm
from archsim.workloads.microbatches import BlockKind, ChipProgram, Microbatch, Reduction, Segment
from archsim.workloads.trace import CommGroup, CommKind, Op
from archsim.workloads.transforms import DEFAULT_BUCKET_BYTES

if TYPE_CHECKING:
    import simpy

COLLECTIVES = frozenset(c.value for c in Collective)
"""The communication kinds the collective engine runs (by their names)."""


@dataclass(frozen=True)
class CommOptions:
    """How gradients are communicated."""

    algorithm: Algorithm
    bucket_bytes: int = DEFAULT_BUCKET_BYTES
    overlap: bool = True
    """All-reduce buckets while the backward pass runs (False: after it)."""
    chunk_bytes: float = DEFAULT_CHUNK_BYTES
    launch_s: float = 0.0
    """Fixed latency of every collective call (the collective library's launch latencies)."""


@dataclass
class CommLog:
    """What moved between chips: every collective and point-to-point transfer, and the lanes."""

    collectives: list[CollectiveRecord] = field(default_factory=list)
    """Each collective, in the order they finished."""
    transfers: list[CollectiveRecord] = field(default_factory=list)
    """Each pipeline send, in the order they arrived."""
    lanes: list[Lane] = field(default_factory=list)
    """Every lane the step's traffic could use, in creation order."""

    def busy_s(self, in_stream: Iterable[tuple[float, float]] = ()) -> float:
        """Seconds during which any collective or transfer was in flight (union of intervals).

        ``in_stream``: the (start, end) of the collectives a chip's stream ran as ops (tensor and
        expert parallelism), which the log does not hold.
        """
        spans = sorted([*((c.start_s, c.end_s) for c in (*self.collectives, *self.transfers)), *in_stream])
        total, cursor = 0.0, float("-inf")
        for start, end in spans:
            if end > cursor:
                total += end - max(start, cursor)
                cursor = end
        return total


@dataclass
class DataParallelOutcome:
    """The representative chip's op timings and the step's communication."""

    timings: list[OpTiming]
    end_s: float
    comm: CommLog


@dataclass(frozen=True)
class CommPlan:
    """How one communication op runs when not as the step's gradient all-reduces do.

    A collective library plans each call by its collective and size (:func:`archsim.collective_run.comm_plan`):
    the fabric as its protocol sees it, the algorithm, the pipelining chunk and the launch latency.
    """

    fabric: Fabric
    algorithm: Algorithm
    chunk_bytes: float
    launch_s: float


def data_parallel_step(
    ops: Sequence[Op],
    costs: Sequence[OpCost | None],
    separate_units: bool,
    placement: Placement,
    options: CommOptions,
    issue_overhead_s: float = 0.0,
    observers: Sequence[LinkObserver] = (),
    plans: Mapping[int, CommPlan] | None = None,
) -> DataParallelOutcome:
    """One data-parallel step of ``ops``: compute ops on the chip, communication ops on the links.

    ``costs`` are the compute ops' costs from the chip's model (None for a communication op; an
    in-stream one, tensor parallel, has its cost and runs as a compute op, in order with them). A
    communication op runs as ``options`` say unless ``plans`` holds a plan for its index. Plans see
    the links through their own protocol, so each runs on its own copy of the representative network;
    the communication stream runs one op at a time, so no two of them ever share a link, and what a
    copy's lane carries is reported to ``observers`` as the representative network's lane of the same
    tier and place (statistics, a timeline). The outcome's timings are the compute ops', in trace order.
    """
    import simpy  # loaded only where SimPy runs (a one-chip run never does)

    env = simpy.Environment()
    net = RepNetwork(env, placement.fabric, observers)
    engine = CollectiveEngine(net, placement, options.chunk_bytes, launch_s=options.launch_s)
    comms = [i for i, op in enumerate(ops) if op.comm is not None and not op.comm.in_stream]
    _check_comm(ops, comms, placement)
    compute = [i for i, op in enumerate(ops) if op.comm is None or op.comm.in_stream]
    position = {i: k for k, i in enumerate(compute)}
    done = {i: env.event() for i in comms}
    local: list[Op] = []
    extra: dict[int, list[simpy.Event]] = {}
    for k, i in enumerate(compute):
        op = ops[i]
        deps = tuple(position[d] for d in op.deps if d in position)
        local.append(op if deps == op.deps else op.with_deps(deps))
        if len(deps) < len(op.deps):
            extra[k] = [done[d] for d in op.deps if d not in position]
    compute_costs = [costs[i] for i in compute]
    assert all(c is not None for c in compute_costs), "every compute op has a cost"
    finished, timings = schedule_ops(
        env, local, [c for c in compute_costs if c is not None], separate_units, issue_overhead_s, extra
    )
    engines: dict[CommPlan, CollectiveEngine] = {}

    def runner(i: int) -> tuple[CollectiveEngine, Algorithm]:
        plan = plans.get(i) if plans is not None else None
        if plan is None:
            return engine, options.algorithm
        if plan not in engines:
            copy = RepNetwork(env, plan.fabric, [_OnNetwork(net)])
            placed = place(plan.fabric, placement.stages, tensor_parallel=placement.tensor_parallel)
            engines[plan] = CollectiveEngine(copy, placed, plan.chunk_bytes, launch_s=plan.launch_s)
        return engines[plan], plan.algorithm

    if comms:
        hops = 0
        for i in comms:
            comm = ops[i].comm
            if comm is not None and comm.kind.value in COLLECTIVES:
                on, algorithm = runner(i)
                hops += on.check(Collective(comm.kind.value), algorithm, comm.bytes)
        check_flat_ring_budget(hops, placement.fabric.system)
        log = CommLog()

        def communicate() -> simpy.events.ProcessGenerator:
            for i in comms:  # one communication stream, in trace order (NCCL's default)
                op = ops[i]
                waits = [finished[position[d]] if d in position else done[d] for d in op.deps]
                if waits:
                    yield env.all_of(waits)
                yield from _communicate(*runner(i), log, op)
                done[i].succeed()

        env.process(communicate())
    env.run()
    complete = [t for t in timings if t is not None]
    assert len(complete) == len(compute), "every op of a topologically ordered trace runs"
    every = [engine, *engines.values()]
    collectives = [r for e in every for r in e.records]
    for copy in engines.values():  # every lane a copy used, as the representative network's
        for lane in copy.net.lanes:
            net.lane(_tier_index(net, lane), lane.id)
    return DataParallelOutcome(complete, env.now, CommLog(collectives, log.transfers if comms else [], net.lanes))


def _tier_index(net: RepNetwork, lane: Lane) -> int:
    """The index in ``net``'s fabric of the tier ``lane`` (a lane of a copy of ``net``) belongs to."""
    return next(i for i, tier in enumerate(net.fabric.tiers) if tier.name == lane.tier.name)


@dataclass(frozen=True)
class _OnNetwork:
    """Observer of a copy of ``net``: reports each transfer to ``net``'s observers on ``net``'s own lane."""

    net: RepNetwork

    def transfer(self, lane: Lane, start_s: float, end_s: float, nbytes: float, label: str) -> None:
        """Forward the transfer as one on the lane of ``net`` with the same tier and place."""
        own = self.net.lane(_tier_index(self.net, lane), lane.id)
        for observer in self.net.observers:
            observer.transfer(own, start_s, end_s, nbytes, label)


def _check_comm(ops: Sequence[Op], comms: Sequence[int], placement: Placement) -> None:
    """Refuse communication the engine cannot run: a collective it has no algorithm for, a pipelined group."""
    for i in comms:
        comm = ops[i].comm
        assert comm is not None
        if comm.kind in (CommKind.REDUCE, CommKind.GATHER, CommKind.SCATTER):
            problem = f"{comm.kind.value} collectives are not simulated (all-reduce, all-gather, reduce-scatter, "
            raise UsageError(placement.fabric.system, ops[i].name, problem + "broadcast, all-to-all, barrier are)")
        if comm.group is CommGroup.ALL and placement.stages > 1:
            raise UsageError(placement.fabric.system, ops[i].name, "a collective over all chips needs one stage")


def _communicate(engine: CollectiveEngine, algorithm: Algorithm, log: CommLog, op: Op) -> simpy.events.ProcessGenerator:
    """Process: one communication op on the representative network.

    A collective over the data-parallel group (or all chips: the same group without pipelining) runs
    in the collective engine. A barrier takes one hop's latency per tier. A send or a receive moves its
    bytes over one lane of the innermost tier (by symmetry the peer's lane is the representative's own).
    """
    comm = op.comm
    assert comm is not None
    env = engine.env
    if comm.kind.value in COLLECTIVES:
        yield from engine.run(Collective(comm.kind.value), algorithm, comm.bytes, 0, op.name)
        return
    start = env.now
    fabric = engine.placement.fabric
    if comm.kind is CommKind.BARRIER:
        yield env.timeout(sum(tier.latency_s for tier in fabric.tiers))
    else:
        tier = fabric.tiers[0]
        route = engine.net.route(0, [engine.lane_id("m0", tier.kind, tier.lanes, 0)])
        yield from engine.stream(route, comm.bytes, op.name)
    log.transfers.append(CollectiveRecord(op.name, 0, comm.bytes, start, env.now))


@dataclass(frozen=True)
class PricedPrograms:
    """Every chip's program with its compute priced by the chip's cost model (:func:`price_programs`)."""

    programs: Sequence[ChipProgram]
    timings: dict[tuple[int, BlockKind], list[OpTiming]]
    """Per (virtual stage, forward or backward): its ops' timings from the start of its segment."""
    updates: dict[int, OpCost]
    """Per stage: its update's cost."""


def price_programs(
    programs: Sequence[ChipProgram], models: Sequence[CostModel], issue_overhead_s: float = 0.0
) -> PricedPrograms:
    """Price chip ``d``'s program with ``models[d]``: each stage's pass once, as a one-chip replay.

    The host issues a segment's ops when it starts (one every ``issue_overhead_s``: a pipeline's host
    waits for each receive before it issues the microbatch), so every microbatch of a stage's pass has
    the same schedule (:func:`~archsim.engine.replay.list_schedule`) from its segment's start.
    """
    timings: dict[tuple[int, BlockKind], list[OpTiming]] = {}
    updates: dict[int, OpCost] = {}
    for program, model in zip(programs, models, strict=True):
        for segment in program.segments:
            key = (segment.of.stage, segment.of.kind)
            if key not in timings:
                timings[key] = replay(segment.ops, model, issue_overhead_s)
        updates |= {s: model.cost(op) for s, op in program.updates}
    return PricedPrograms(programs, timings, updates)


@dataclass
class PipelineOutcome:
    """Every block's timing, the step's end, and its communication."""

    tasks: list[Block]
    """Every block each stage ran, in the order they ended (a block: one segment, or one update)."""
    end_s: float
    pipeline_end_s: float
    """End of the last forward or backward block (the pipeline flush)."""
    comm: CommLog


def pipeline_step(
    priced: PricedPrograms,
    placement: Placement,
    options: CommOptions,
    observers: Sequence[LinkObserver] = (),
    communicate: bool = True,
    expert_placement: Placement | None = None,
) -> PipelineOutcome:
    """One pipelined step of every chip's program; ``communicate=False`` makes every transfer free (a baseline).

    Chip ``d`` runs its program as :func:`price_programs` priced it. A segment starts once the chip
    has ended the previous one and its receive has arrived, and its ops run as priced from its start.
    Its send leaves when it ends, over the links between the two stages' chips (virtual stage ``k``
    is on chip ``k mod len(programs)``). The all-reduces run one after another on the chip's
    communication stream, each once its writers have run (with ``options.overlap`` off, once the
    whole segment they follow has), the expert gradients' over ``expert_placement``; the updates run
    once the segments and all-reduces are done. ``observers`` are told of every transfer on a link
    (statistics, a timeline).
    """
    import simpy  # loaded only where SimPy runs (a one-chip run never does)

    env = simpy.Environment()
    net = RepNetwork(env, placement.fabric, observers)
    engine = CollectiveEngine(net, placement, options.chunk_bytes, launch_s=options.launch_s)
    experts = engine
    if expert_placement is not None:  # a copy of the network for the experts' group, reporting on its lanes
        copy = RepNetwork(env, expert_placement.fabric, [_OnNetwork(net)])
        experts = CollectiveEngine(copy, expert_placement, options.chunk_bytes, launch_s=options.launch_s)
    programs, timings = priced.programs, priced.timings
    chips = len(programs)
    duration = {key: max((t.end_s for t in ops), default=0.0) for key, ops in timings.items()}

    def duration_of(segment: Segment) -> float:
        return duration[(segment.of.stage, segment.of.kind)]

    comm = CommLog(engine.records, [], [])
    tasks: list[Block] = []
    arrived: dict[Microbatch, simpy.Event] = {}
    started = [[env.event() for _ in program.segments] for program in programs]
    blocks_done = [env.event() for _ in programs]
    reduced = [env.event() for _ in programs]

    def arrival(of: Microbatch) -> simpy.Event:
        return arrived.setdefault(of, env.event())

    def routes(sender: int, receiver: int, forward: bool) -> list[Route]:
        index = placement.send_tier(min(sender, receiver), max(sender, receiver))
        groups = placement.tiers[index]
        tier = groups.tier
        ring = Direction.PLUS if forward else Direction.MINUS
        direction = Direction.OUT if tier.kind is TierKind.POOLED else ring
        own = tier.lanes if index == 0 else max(1, tier.lanes // groups.sharers)  # TP peers share a member's ports
        return [net.route(index, [LaneId(f"chip{sender}", direction, i)]) for i in range(own)]

    def send(of: Microbatch, nbytes: int) -> simpy.events.ProcessGenerator:
        forward = of.kind is BlockKind.FORWARD
        receiver = of.stage + 1 if forward else of.stage - 1
        if communicate and nbytes > 0:
            start = env.now
            label = f"{'act' if forward else 'grad'} mb{of.index} s{of.stage}->s{receiver}"
            paths = routes(of.stage % chips, receiver % chips, forward)
            yield env.all_of([env.process(engine.stream(r, nbytes / len(paths), label)) for r in paths])
            comm.transfers.append(CollectiveRecord(label, of.stage % chips, nbytes, start, env.now))
        arrival(Microbatch(receiver, of.kind, of.index)).succeed()

    def run_chip(d: int) -> simpy.events.ProcessGenerator:
        for k, segment in enumerate(programs[d].segments):
            of = segment.of
            if segment.recv is not None:
                yield arrival(of)
            start = env.now
            started[d][k].succeed(start)
            yield env.timeout(duration_of(segment))
            if segment.send is not None:
                env.process(send(of, segment.send.bytes))
            tasks.append(Block(of.stage, of.kind, of.index, start, env.now))
        blocks_done[d].succeed()

    def ready_offset(reduction: Reduction, d: int) -> float:
        """When the bucket is ready, from the start of the segment it follows."""
        of = programs[d].segments[reduction.after].of
        ends = timings[(of.stage, of.kind)]
        return max((ends[w].end_s for w in reduction.writers), default=0.0)

    def reduce_chip(d: int) -> simpy.events.ProcessGenerator:
        program = programs[d]
        if not (communicate and placement.data_parallel > 1 and program.reductions):
            reduced[d].succeed()
            return
        # the stream takes each stage's buckets, its own and the experts' merged, in the order they are ready
        buckets: list[tuple[float, Reduction]] = []
        for s in dict.fromkeys(r.stage for r in program.reductions):
            own, expert = ([(ready_offset(r, d), r) for r in program.reductions if r.stage == s and r.comm.group is g]
                           for g in (CommGroup.DATA_PARALLEL, CommGroup.EXPERT_DATA_PARALLEL))  # fmt: skip
            buckets.extend(heapq.merge(own, expert, key=lambda b: b[0]))
        began = yield started[d][program.reductions[0].after]
        for k, (offset, reduction) in enumerate(buckets):
            ready = began + (offset if options.overlap else duration_of(program.segments[reduction.after]))
            if ready > env.now:
                yield env.timeout(ready - env.now)
            on, label = (
                (engine, "all-reduce")
                if reduction.comm.group is CommGroup.DATA_PARALLEL
                else (experts, "expert all-reduce")
            )
            name = f"{label} s{reduction.stage} b{k}"
            yield from on.run(Collective.ALL_REDUCE, options.algorithm, reduction.comm.bytes, d, name)
        reduced[d].succeed()

    def update_chip(d: int) -> simpy.events.ProcessGenerator:
        yield env.all_of([blocks_done[d], reduced[d]])
        for s, _ in programs[d].updates:
            update_s = priced.updates[s].time_s
            if update_s > 0:  # the host issued it while the chip waited for its gradients
                start = env.now
                yield env.timeout(update_s)
                tasks.append(Block(s, BlockKind.UPDATE, 0, start, env.now))

    if communicate and placement.data_parallel > 1:
        hops = sum(
            (engine if r.comm.group is CommGroup.DATA_PARALLEL else experts).check(
                Collective.ALL_REDUCE, options.algorithm, r.comm.bytes, r.stage % chips
            )
            for program in programs
            for r in program.reductions
        )
        check_flat_ring_budget(hops, placement.fabric.system)
    for d in range(chips):
        env.process(run_chip(d))
        env.process(reduce_chip(d))
        env.process(update_chip(d))
    env.run()
    if experts is not engine:  # the experts' group's collectives and lanes, as the network's
        comm.collectives.extend(experts.records)
        for lane in experts.net.lanes:
            net.lane(_tier_index(net, lane), lane.id)
    comm.lanes = net.lanes
    flush = max((t.end_s for t in tasks if t.kind is not BlockKind.UPDATE), default=0.0)
    return PipelineOutcome(tasks, env.now, flush, comm)
