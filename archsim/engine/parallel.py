"""Parallel training steps on a system: compute and communication in one SimPy environment.

**Data parallel** (:func:`data_parallel_step`). Every chip runs the same trace on its own batch, so
one representative chip's ops are replayed (the same processes as a one-chip replay). Parameter
gradients are gathered into buckets in the order the backward pass finishes them (a bucket closes
when it reaches ``bucket_bytes``, PyTorch DDP's default is 25 MiB); a bucket's all-reduce starts when
its last gradient is written -- while the backward pass goes on -- and buckets are reduced one after
another (one communication stream, like NCCL's). The optimizer update waits for the last all-reduce.
With ``overlap`` off every bucket waits for the whole backward pass.

**Pipeline parallel** (:func:`pipeline_step`). Stage ``s`` runs on chip ``s`` of each pipeline. Each
stage has a forward and a backward block per microbatch (durations from replaying the stage's ops on
one chip) and executes them in its schedule's order: GPipe (all forwards, then all backwards) or 1F1B
(PipeDream-Flush: ``P - s - 1`` warm-up forwards, then one forward and one backward alternately, then
the remaining backwards). A forward of microbatch ``m`` needs the previous stage's activations of
``m``, which travel over the links between the two chips once that forward ends; backwards pass
gradients the other way. After its last backward a stage all-reduces its gradients over its
data-parallel group (buckets again, overlapped with that last backward), then updates.

Everything that moves between chips is a transfer on the representative network
(:mod:`archsim.engine.network`), so activations, gradients and all-reduces that share a link contend
for it. Link statistics and timelines attach to that network as observers (``observers``,
:mod:`archsim.engine.records`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import simpy

from archsim.engine.collectives import DEFAULT_CHUNK_BYTES, Collective, CollectiveEngine, check_flat_ring_budget
from archsim.engine.network import Direction, Lane, LaneId, LinkObserver, RepNetwork, Route
from archsim.engine.records import Block, BlockKind, CollectiveRecord
from archsim.engine.replay import OpTiming, schedule_ops
from archsim.models.base import OpCost
from archsim.models.interconnect import TierKind
from archsim.models.placement import Placement
from archsim.spec.system import Algorithm
from archsim.workloads.trace import Op, Phase, Role

DEFAULT_BUCKET_BYTES = 25 * 2**20
"""Gradient bucket size (PyTorch DistributedDataParallel's ``bucket_cap_mb`` default, 25 MiB)."""


class Schedule(enum.StrEnum):
    """Pipeline schedules."""

    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"


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


@dataclass(frozen=True)
class Bucket:
    """Parameter gradients all-reduced together: their bytes and the ops that write them."""

    bytes: int
    writers: tuple[int, ...]


def gradient_buckets(ops: Sequence[Op], bucket_bytes: int) -> list[Bucket]:
    """Gradients in the order their last writer appears, packed into buckets of ``bucket_bytes``."""
    last_writer: dict[str, int] = {}
    size: dict[str, int] = {}
    for index, op in enumerate(ops):
        for t in op.writes:
            if t.role is Role.GRADIENT:
                last_writer[t.name] = index
                size[t.name] = t.bytes
    buckets: list[Bucket] = []
    nbytes, writers = 0, set()
    for name in sorted(last_writer, key=lambda n: (last_writer[n], n)):
        nbytes += size[name]
        writers.add(last_writer[name])
        if nbytes >= bucket_bytes:
            buckets.append(Bucket(nbytes, tuple(sorted(writers))))
            nbytes, writers = 0, set()
    if writers:
        buckets.append(Bucket(nbytes, tuple(sorted(writers))))
    return buckets


@dataclass
class CommLog:
    """What moved between chips: every collective and point-to-point transfer, and the lanes."""

    collectives: list[CollectiveRecord] = field(default_factory=list)
    """Each collective, in the order they finished."""
    transfers: list[CollectiveRecord] = field(default_factory=list)
    """Each pipeline send, in the order they arrived."""
    lanes: list[Lane] = field(default_factory=list)
    """Every lane the step's traffic could use, in creation order."""

    def busy_s(self) -> float:
        """Seconds during which any collective or transfer was in flight (union of intervals)."""
        spans = sorted((c.start_s, c.end_s) for c in (*self.collectives, *self.transfers))
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


def data_parallel_step(
    ops: Sequence[Op],
    costs: Sequence[OpCost],
    separate_units: bool,
    placement: Placement,
    options: CommOptions,
    issue_overhead_s: float = 0.0,
    observers: Sequence[LinkObserver] = (),
) -> DataParallelOutcome:
    """One data-parallel step: the chip's ops, and its gradient all-reduces overlapping them.

    ``observers`` are told of every transfer on a link (statistics, a timeline).
    """
    env = simpy.Environment()
    net = RepNetwork(env, placement.fabric, observers)
    engine = CollectiveEngine(net, placement, options.chunk_bytes, launch_s=options.launch_s)
    buckets = gradient_buckets(ops, options.bucket_bytes) if placement.data_parallel > 1 else []
    comm_done = env.event()
    updates = [i for i, op in enumerate(ops) if op.phase is Phase.UPDATE]
    extra: Mapping[int, list[simpy.Event]] = {i: [comm_done] for i in updates} if buckets else {}
    finished, timings = schedule_ops(env, ops, costs, separate_units, issue_overhead_s, extra)
    if buckets:
        hops = sum(engine.check(Collective.ALL_REDUCE, options.algorithm, b.bytes) for b in buckets)
        check_flat_ring_budget(hops, placement.fabric.system)
        every_writer = sorted({w for b in buckets for w in b.writers})

        def communicate() -> simpy.events.ProcessGenerator:
            for k, bucket in enumerate(buckets):
                writers = bucket.writers if options.overlap else every_writer
                yield env.all_of([finished[w] for w in writers])
                yield from engine.run(Collective.ALL_REDUCE, options.algorithm, bucket.bytes, 0, f"all-reduce b{k}")
            comm_done.succeed()

        env.process(communicate())
    env.run()
    done = [t for t in timings if t is not None]
    assert len(done) == len(ops), "every op of a topologically ordered trace runs"
    return DataParallelOutcome(done, env.now, CommLog(engine.records, [], net.lanes))


@dataclass(frozen=True)
class StageWork:
    """One stage's blocks on its chip (seconds) and what it communicates (bytes)."""

    forward_s: float
    backward_s: float
    update_s: float
    send_bytes: int
    """Activations to the next stage per microbatch (gradients come back, same size)."""
    buckets: tuple[tuple[int, float], ...] = ()
    """(bytes, seconds into the backward block when the bucket's last gradient is written)."""


@dataclass
class PipelineOutcome:
    """Every block's timing, the step's end, and its communication."""

    tasks: list[Block]
    """Every block each stage ran, in the order they ended."""
    end_s: float
    pipeline_end_s: float
    """End of the last forward or backward block (the pipeline flush)."""
    comm: CommLog


def stage_order(
    schedule: Schedule, stage: int, stages: int, microbatches: int, train: bool
) -> list[tuple[BlockKind, int]]:
    """The blocks stage ``stage`` runs, in order: (forward or backward, microbatch)."""
    m = microbatches
    forward, backward = BlockKind.FORWARD, BlockKind.BACKWARD
    if not train:
        return [(forward, i) for i in range(m)]
    if schedule is Schedule.GPIPE:
        return [(forward, i) for i in range(m)] + [(backward, i) for i in reversed(range(m))]
    warmup = min(stages - stage - 1, m)
    order = [(forward, i) for i in range(warmup)]
    for i in range(m - warmup):
        order += [(forward, warmup + i), (backward, i)]
    return order + [(backward, i) for i in range(m - warmup, m)]


def pipeline_step(
    work: Sequence[StageWork],
    placement: Placement,
    schedule: Schedule,
    microbatches: int,
    train: bool,
    options: CommOptions,
    observers: Sequence[LinkObserver] = (),
    communicate: bool = True,
) -> PipelineOutcome:
    """One pipelined step of every stage; ``communicate=False`` makes every transfer free (a baseline).

    ``observers`` are told of every transfer on a link (statistics, a timeline).
    """
    env = simpy.Environment()
    net = RepNetwork(env, placement.fabric, observers)
    engine = CollectiveEngine(net, placement, options.chunk_bytes, launch_s=options.launch_s)
    stages, m = len(work), microbatches
    comm = CommLog(engine.records, [], [])
    tasks: list[Block] = []
    activations = [[env.event() for _ in range(m)] for _ in range(stages)]
    gradients = [[env.event() for _ in range(m)] for _ in range(stages)]
    last_backward = [env.event() for _ in range(stages)]
    blocks_done = [env.event() for _ in range(stages)]
    reduced = [env.event() for _ in range(stages)]

    def routes(sender: int, forward: bool) -> list[Route]:
        tier = placement.tiers[0].tier
        ring = Direction.PLUS if forward else Direction.MINUS
        direction = Direction.OUT if tier.kind is TierKind.POOLED else ring
        return [net.route(0, [LaneId(f"chip{sender}", direction, i)]) for i in range(tier.lanes)]

    def send(sender: int, receiver: int, mb: int, arrived: simpy.Event, what: str) -> simpy.events.ProcessGenerator:
        nbytes = work[min(sender, receiver)].send_bytes
        if communicate and nbytes > 0:
            start = env.now
            label = f"{what} mb{mb} s{sender}->s{receiver}"
            paths = routes(sender, receiver > sender)
            yield env.all_of([env.process(engine.stream(r, nbytes / len(paths), label)) for r in paths])
            comm.transfers.append(CollectiveRecord(label, sender, nbytes, start, env.now))
        arrived.succeed()

    def run_stage(s: int) -> simpy.events.ProcessGenerator:
        order = stage_order(schedule, s, stages, m, train)
        final_backward = max((k for k, (kind, _) in enumerate(order) if kind is BlockKind.BACKWARD), default=-1)
        for k, (kind, mb) in enumerate(order):
            if kind is BlockKind.FORWARD:
                if s > 0:
                    yield activations[s][mb]
                start = env.now
                yield env.timeout(work[s].forward_s)
                if s < stages - 1:
                    env.process(send(s, s + 1, mb, activations[s + 1][mb], "act"))
            else:
                if s < stages - 1:
                    yield gradients[s][mb]
                start = env.now
                if k == final_backward:
                    last_backward[s].succeed()
                yield env.timeout(work[s].backward_s)
                if s > 0:
                    env.process(send(s, s - 1, mb, gradients[s - 1][mb], "grad"))
            tasks.append(Block(s, kind, mb, start, env.now))
        blocks_done[s].succeed()

    def reduce_stage(s: int) -> simpy.events.ProcessGenerator:
        if not (train and communicate and placement.data_parallel > 1 and work[s].buckets):
            reduced[s].succeed()
            return
        yield last_backward[s]
        began = env.now
        for k, (nbytes, offset) in enumerate(work[s].buckets):
            ready = began + (offset if options.overlap else work[s].backward_s)
            if ready > env.now:
                yield env.timeout(ready - env.now)
            yield from engine.run(Collective.ALL_REDUCE, options.algorithm, nbytes, s, f"all-reduce s{s} b{k}")
        reduced[s].succeed()

    def update_stage(s: int) -> simpy.events.ProcessGenerator:
        yield env.all_of([blocks_done[s], reduced[s]])
        if train and work[s].update_s > 0:
            start = env.now
            yield env.timeout(work[s].update_s)
            tasks.append(Block(s, BlockKind.UPDATE, 0, start, env.now))

    if train and communicate and placement.data_parallel > 1:
        hops = sum(
            engine.check(Collective.ALL_REDUCE, options.algorithm, nbytes, s)
            for s in range(stages)
            for nbytes, _ in work[s].buckets
        )
        check_flat_ring_budget(hops, placement.fabric.system)
    for s in range(stages):
        env.process(run_stage(s))
        env.process(reduce_stage(s))
        env.process(update_stage(s))
    env.run()
    comm.lanes = net.lanes
    flush = max((t.end_s for t in tasks if t.kind is not BlockKind.UPDATE), default=0.0)
    return PipelineOutcome(tasks, env.now, flush, comm)
