"""archsim.workloads.microbatches: pipelined and accumulated steps as one program of ops per chip."""

from __future__ import annotations

import pytest

from archsim.engine.options import Schedule
from archsim.engine.schedules import interleaved_order, stage_order
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.workloads import build_trace
from archsim.workloads.microbatches import BlockKind, Microbatch, pipeline_programs
from archsim.workloads.pipeline import Stage, split_stages
from archsim.workloads.trace import CommGroup, CommKind, Mode, Role, Trace

F, B = BlockKind.FORWARD, BlockKind.BACKWARD


@pytest.fixture(scope="module")
def bert(library: Library) -> Trace:
    return build_trace("bert-base", library, Mode.TRAIN, 2, Precision.FP16, None)


def stages_of(trace: Trace, count: int) -> list[Stage]:
    return split_stages(trace, count, [1.0] * len(trace.ops))


def orders(
    schedule: Schedule, chips: int, microbatches: int, train: bool = True
) -> list[list[tuple[BlockKind, int, int]]]:
    return [[(k, d, m) for k, m in stage_order(schedule, d, chips, microbatches, train)] for d in range(chips)]


def gradient_bytes(trace: Trace, stage: Stage) -> int:
    return sum(
        {t.name: t.bytes for i in stage.backward for t in trace.ops[i].writes if t.role is Role.GRADIENT}.values()
    )


def test_each_chip_runs_its_stage_per_microbatch_in_its_schedule_s_order(bert: Trace) -> None:
    stages = stages_of(bert, 2)
    programs = pipeline_programs(bert, stages, orders(Schedule.ONE_F_ONE_B, 2, 4), bucket_bytes=25 * 2**20)
    first, last = programs
    assert [s.of for s in first.segments] == [
        Microbatch(0, k, m) for k, m in stage_order(Schedule.ONE_F_ONE_B, 0, 2, 4, True)
    ]
    assert [(s.of.kind, s.of.index) for s in last.segments] == [
        (F, 0),
        (B, 0),
        (F, 1),
        (B, 1),
        (F, 2),
        (B, 2),
        (F, 3),
        (B, 3),
    ]
    # one stage's pass is the same ops for every microbatch: its identity is the segment's
    forwards = [s.ops for s in first.segments if s.of.kind is F]
    assert all(ops is forwards[0] for ops in forwards)
    assert [bert.ops.index(op) for op in forwards[0].ops] == list(stages[0].forward)
    # activations go forward and their gradients come back, between the neighbours only
    # stage 0 sends activations after each forward and receives their gradients before each backward
    assert all((s.recv is None, s.send is not None) == (s.of.kind is F, s.of.kind is F) for s in first.segments)
    send = first.segments[0].send
    assert send is not None
    assert (send.kind, send.bytes, send.group) == (CommKind.SEND, stages[0].send_bytes, CommGroup.PIPELINE)
    assert all(s.send is None for s in last.segments if s.of.kind is F)
    recv = last.segments[0].recv
    assert recv is not None and (recv.kind, recv.bytes) == (CommKind.RECV, stages[0].send_bytes)


def test_the_buckets_follow_the_last_microbatch_s_backward_and_the_update_comes_once(bert: Trace) -> None:
    stages = stages_of(bert, 2)
    programs = pipeline_programs(bert, stages, orders(Schedule.GPIPE, 2, 3), bucket_bytes=25 * 2**20)
    for d, program in enumerate(programs):
        final = max(k for k, s in enumerate(program.segments) if s.of.kind is B)
        assert program.segments[final].of == Microbatch(d, B, 0)  # GPipe: backwards in reverse
        assert {r.after for r in program.reductions} == {final}
        assert sum(r.comm.bytes for r in program.reductions) == gradient_bytes(bert, stages[d])
        ops = program.segments[final].ops.ops
        for reduction in program.reductions:
            assert reduction.comm.kind is CommKind.ALL_REDUCE and reduction.comm.group is CommGroup.DATA_PARALLEL
            assert reduction.writers and all(
                any(t.role is Role.GRADIENT for t in ops[w].writes) for w in reduction.writers
            )
        assert [s for s, _ in program.updates] == [d]


def test_gradient_accumulation_is_one_stage_without_transfers(bert: Trace) -> None:
    (stage,) = stages_of(bert, 1)
    (program,) = pipeline_programs(bert, [stage], orders(Schedule.ONE_F_ONE_B, 1, 4), bucket_bytes=25 * 2**20)
    assert [(s.of.kind, s.of.index) for s in program.segments] == [(k, m) for m in range(4) for k in (F, B)]
    assert all(s.recv is None and s.send is None for s in program.segments)
    assert {r.after for r in program.reductions} == {7}
    assert sum(r.comm.bytes for r in program.reductions) == gradient_bytes(bert, stage)
    assert len(program.updates) == 1


def test_an_interleaved_chip_reduces_its_later_chunk_first(bert: Trace) -> None:
    stages = stages_of(bert, 4)
    chip_orders = [interleaved_order(d, 2, 2, 4, True) for d in range(2)]
    first = pipeline_programs(bert, stages, chip_orders, bucket_bytes=2**40)[0]
    assert [r.stage for r in first.reductions] == [2, 0]  # chunk 1 (virtual stage 2), then chunk 0
    later, own = first.reductions
    assert later.writers == () and own.writers  # chunk 1's gradients were final before the last backward
    assert [s for s, _ in first.updates] == [0, 2]


def test_without_buckets_or_backward_there_is_nothing_to_reduce_or_update(library: Library, bert: Trace) -> None:
    assert all(not p.reductions for p in pipeline_programs(bert, stages_of(bert, 2), orders(Schedule.GPIPE, 2, 2)))
    infer = build_trace("bert-base", library, Mode.INFER, 2, Precision.FP16, None)
    programs = pipeline_programs(infer, stages_of(infer, 2), orders(Schedule.GPIPE, 2, 2, train=False), bucket_bytes=1)
    assert all(not p.reductions and not p.updates for p in programs)
    assert all(s.of.kind is F for p in programs for s in p.segments)
