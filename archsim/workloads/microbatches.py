"""Pipelined and accumulated steps as a transform of the trace: one program of ops per chip.

A step of ``M`` microbatches over ``P`` pipeline stages (``P = 1``: gradient accumulation) is, on
each chip, the ops of its stage(s) repeated per microbatch in its schedule's order, with the
communication between chips as ops of the program (:func:`pipeline_programs`):

* a :class:`Segment` is one pass (forward or backward) of one microbatch on one (virtual) stage: the
  stage's ops for that pass (the same :class:`~archsim.workloads.trace.Trace` object for every
  microbatch: an op's identity in the step is its segment's typed :class:`Microbatch` and its index),
  preceded by a receive from the neighbouring stage (activations forward, their gradients backward)
  and followed by a send to the other neighbour (:class:`~archsim.workloads.trace.CommOp` of kind
  ``recv``/``send`` over :attr:`~archsim.workloads.trace.CommGroup.PIPELINE`);
* after the chip's last backward segment come its gradient buckets' all-reduces (:class:`Reduction`,
  one per bucket of :func:`~archsim.workloads.transforms.gradient_buckets`, over the data-parallel
  group, or for a mixture of experts' expert weights over the replicas that hold the same experts):
  the gradients of every microbatch are accumulated in place, so only the last microbatch's backward
  writes a bucket's final value; each bucket waits for the ops of that segment that write its
  gradients (the engine's ``overlap`` off: for the whole segment), and the buckets of a chip's other
  (interleaved) chunks, final before, for that segment to start;
* then the optimizer update of each of its stages, once (:attr:`ChipProgram.updates`).

The engine (:func:`archsim.engine.parallel.pipeline_step`) replays the programs: compute ops priced
by the chip's cost model, sends, receives and all-reduces on the system's links.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from archsim.workloads.pipeline import Stage, sub_trace
from archsim.workloads.trace import CommGroup, CommKind, CommOp, Op, Trace
from archsim.workloads.transforms import gradient_buckets


class BlockKind(enum.StrEnum):
    """A pipeline stage's passes: a microbatch's forward or backward pass, or the optimizer update."""

    FORWARD = "F"
    BACKWARD = "B"
    UPDATE = "U"


@dataclass(frozen=True, slots=True)
class Microbatch:
    """Which pass of which microbatch on which (virtual) stage a segment's ops run."""

    stage: int
    kind: BlockKind
    index: int


@dataclass(frozen=True)
class Segment:
    """One microbatch's forward or backward ops of one stage, with the transfers around them."""

    of: Microbatch
    ops: Trace
    """The stage's ops of this pass (one trace per stage and pass, shared by its microbatches)."""
    recv: CommOp | None
    """What it waits to receive from the neighbouring stage before it starts (None: nothing)."""
    send: CommOp | None
    """What it sends to the other neighbouring stage once it has run (None: nothing)."""


@dataclass(frozen=True)
class Reduction:
    """One gradient bucket's all-reduce, after the chip's last backward segment."""

    comm: CommOp
    stage: int
    """The (virtual) stage whose gradients it holds."""
    after: int
    """The index, in the chip's program, of the segment it follows."""
    writers: tuple[int, ...]
    """That segment's ops that write its gradients (none: they were final before the segment started)."""


@dataclass(frozen=True)
class ChipProgram:
    """What one chip of a pipeline runs in one step, in order."""

    segments: tuple[Segment, ...]
    reductions: tuple[Reduction, ...]
    """Its buckets' all-reduces, in the order its communication stream takes them (per stage, last chunk first)."""
    updates: tuple[tuple[int, Op], ...]
    """(stage, optimizer update of that stage's parameters), after the segments and the all-reduces."""


Order = Sequence[tuple[BlockKind, int, int]]
"""A chip's blocks in its schedule's order: (forward or backward, virtual stage, microbatch)."""


def pipeline_programs(
    trace: Trace,
    stages: Sequence[Stage],
    orders: Sequence[Order],
    send_share: int = 1,
    bucket_bytes: int = 0,
    expert: Callable[[str], bool] | None = None,
    expert_buckets: bool = False,
) -> list[ChipProgram]:
    """The program of each of ``len(orders)`` chips running ``stages`` of ``trace`` in those orders.

    Virtual stage ``k`` runs on chip ``k mod len(orders)``. A stage sends ``send_bytes // send_share``
    per microbatch (:func:`archsim.run.pipeline.send_share`). With ``bucket_bytes`` above 0 (a
    training step over several data-parallel replicas) each stage all-reduces its gradient buckets;
    ``expert`` picks a mixture of experts' expert gradients, left out of those buckets; with
    ``expert_buckets`` they are bucketed apart and all-reduced over
    :attr:`~archsim.workloads.trace.CommGroup.EXPERT_DATA_PARALLEL` (else no other replica holds them).
    """
    chips, last = len(orders), len(stages) - 1
    passes = {
        (stage.index, kind): sub_trace(trace, indices, f"{trace.name}.s{stage.index}.{name}")
        for stage in stages
        for kind, indices, name in (
            (BlockKind.FORWARD, stage.forward, "fwd"),
            (BlockKind.BACKWARD, stage.backward, "bwd"),
        )
    }
    sends = [stage.send_bytes // send_share for stage in stages]
    programs = []
    for d, order in enumerate(orders):
        segments = []
        for kind, s, m in order:
            forward = kind is BlockKind.FORWARD
            peer = s - 1 if forward else s + 1  # where its input comes from
            recv = CommOp(CommKind.RECV, sends[min(s, peer)], CommGroup.PIPELINE) if 0 <= peer <= last else None
            to = s + 1 if forward else s - 1
            send = CommOp(CommKind.SEND, sends[min(s, to)], CommGroup.PIPELINE) if 0 <= to <= last else None
            segments.append(Segment(Microbatch(s, kind, m), passes[(s, kind)], recv, send))
        final = max((k for k, seg in enumerate(segments) if seg.of.kind is BlockKind.BACKWARD), default=-1)
        reductions: list[Reduction] = []
        if bucket_bytes > 0 and final >= 0:
            for s in reversed(range(d, len(stages), chips)):  # the chip's chunks, last first
                reductions += _reductions(
                    trace, stages[s], segments[final], final, bucket_bytes, expert, expert_buckets
                )
        updates = []
        for s in range(d, len(stages), chips):  # a training step updates each of its stages once
            update = stages[s].update
            if final >= 0 and update is not None:
                updates.append((s, update))
        programs.append(ChipProgram(tuple(segments), tuple(reductions), tuple(updates)))
    return programs


def _reductions(
    trace: Trace,
    stage: Stage,
    final: Segment,
    after: int,
    bucket_bytes: int,
    expert: Callable[[str], bool] | None,
    expert_buckets: bool,
) -> list[Reduction]:
    """``stage``'s buckets, its own then (with experts) the experts', each after its writers in ``final``.

    ``final`` is the chip's last backward segment: the stage's own when it is the chip's first chunk,
    else the buckets are ready when it starts (their gradients were final before).
    """
    own = final.of.stage == stage.index
    backward = [trace.ops[i] for i in stage.backward]
    found = []
    groups: list[tuple[Callable[[str], bool] | None, CommGroup]] = [(None, CommGroup.DATA_PARALLEL)]
    if expert is not None:
        groups = [(lambda name: not expert(name), CommGroup.DATA_PARALLEL)]
        if expert_buckets:
            groups.append((expert, CommGroup.EXPERT_DATA_PARALLEL))
    for keep, group in groups:
        for bucket in gradient_buckets(backward, bucket_bytes, keep):
            writers = bucket.writers if own else ()
            found.append(Reduction(CommOp(CommKind.ALL_REDUCE, bucket.bytes, group), stage.index, after, writers))
    return found
