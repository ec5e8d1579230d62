"""Parallel training steps in the engine: gradient buckets overlapping backward, pipeline schedules."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from archsim.engine.collectives import simulate_collective
from archsim.engine.network import Direction, LaneId
from archsim.engine.parallel import (
    CommOptions,
    CommPlan,
    Schedule,
    data_parallel_step,
    pipeline_step,
    price_programs,
    stage_order,
)
from archsim.engine.records import LinkSpans, LinkStatistics
from archsim.engine.replay import replay
from archsim.models import cost_model_for
from archsim.models.base import OpCost
from archsim.models.interconnect import Fabric, Tier, TierKind
from archsim.models.placement import place
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.spec.system import Algorithm
from archsim.stack import default_efficiency
from archsim.workloads import build_trace
from archsim.workloads.microbatches import BlockKind
from archsim.workloads.trace import CommGroup, CommKind, Mode, Role, Trace
from archsim.workloads.transforms import comm_op, gradient_buckets, with_gradient_all_reduces
from tests.pipelines import StageTimes, uniform_programs

HIER = CommOptions(Algorithm.HIERARCHICAL)


def ring_fabric(chips: int, gbps: float = 25.0) -> Fabric:
    tier = Tier("node", 0, TierKind.RING, chips, 1, "test-link", gbps * 1e9, 1e-6, 1)
    return Fabric("test", "chip", 1, chips, (tier,), "hierarchical")


def test_buckets_follow_the_backward_order_and_hold_every_gradient(library: Library) -> None:
    trace = build_trace("resnet50", library, Mode.TRAIN, 2, Precision.FP16, None)
    total = sum({t.name: t.bytes for op in trace.ops for t in op.writes if t.role is Role.GRADIENT}.values())
    buckets = gradient_buckets(trace.ops, 10 * 2**20)
    assert sum(b.bytes for b in buckets) == total
    assert all(b.bytes >= 10 * 2**20 for b in buckets[:-1])
    assert [max(b.writers) for b in buckets] == sorted(max(b.writers) for b in buckets)
    assert len(gradient_buckets(trace.ops, 2**40)) == 1


@pytest.fixture(scope="module")
def v100_resnet(library: Library) -> tuple[Trace, list[OpCost], bool]:
    chip = library.chip("v100")
    efficiency = default_efficiency(library, chip)
    trace = build_trace("resnet50", library, Mode.TRAIN, 32, Precision.FP16, None)
    model = cost_model_for(chip, efficiency, trace.precision, trace.memory_bytes)
    return trace, [model.cost(op) for op in trace.ops], model.separate_units


def test_one_replica_is_the_single_chip_replay(library: Library, v100_resnet: tuple[Trace, list[OpCost], bool]) -> None:
    trace, costs, separate = v100_resnet
    chip = library.chip("v100")
    model = cost_model_for(chip, default_efficiency(library, chip), trace.precision, 0)
    alone = replay(trace, model)
    one = data_parallel_step(trace.ops, costs, separate, place(Fabric("t", "c", 1, 1, (), "ring"), 1), HIER)
    assert [(t.start_s, t.end_s) for t in one.timings] == [(t.start_s, t.end_s) for t in alone]
    assert one.comm.collectives == []


def _aligned(step: Trace, costs: list[OpCost]) -> list[OpCost | None]:
    """The compute ops' costs at their positions in ``step`` (None at its communication ops)."""
    priced = iter(costs)
    return [None if op.comm is not None else next(priced) for op in step.ops]


def test_overlap_hides_communication(v100_resnet: tuple[Trace, list[OpCost], bool]) -> None:
    trace, costs, separate = v100_resnet
    placement = place(ring_fabric(8, gbps=2.0), 1)
    compute = sum(c.time_s for c in costs)  # V100: one shared unit, no issue cost here
    step = with_gradient_all_reduces(trace, HIER.bucket_bytes)
    serial_step = with_gradient_all_reduces(trace, HIER.bucket_bytes, overlap=False)
    overlapped = data_parallel_step(step.ops, _aligned(step, costs), separate, placement, HIER)
    serial = data_parallel_step(serial_step.ops, _aligned(serial_step, costs), separate, placement, HIER)
    comm = overlapped.comm.busy_s()
    assert comm > 0
    assert len(overlapped.comm.collectives) == len(gradient_buckets(trace.ops, HIER.bucket_bytes))
    assert overlapped.end_s < serial.end_s
    assert serial.end_s == pytest.approx(compute + serial.comm.busy_s(), rel=1e-9)
    assert overlapped.end_s - compute < comm  # part of it hidden behind the backward pass


def test_stage_orders() -> None:
    f, b = "F", "B"
    assert stage_order(Schedule.GPIPE, 0, 2, 3, True) == [(f, 0), (f, 1), (f, 2), (b, 2), (b, 1), (b, 0)]
    assert stage_order(Schedule.ONE_F_ONE_B, 0, 4, 6, True) == [
        (f, 0), (f, 1), (f, 2), (f, 3), (b, 0), (f, 4), (b, 1), (f, 5), (b, 2), (b, 3), (b, 4), (b, 5)
    ]  # fmt: skip
    assert stage_order(Schedule.ONE_F_ONE_B, 3, 4, 3, True) == [(f, 0), (b, 0), (f, 1), (b, 1), (f, 2), (b, 2)]
    assert stage_order(Schedule.ONE_F_ONE_B, 1, 4, 3, False) == [(f, 0), (f, 1), (f, 2)]


@pytest.mark.parametrize("schedule", list(Schedule))
@pytest.mark.parametrize(("stages", "microbatches"), [(2, 1), (4, 4), (4, 16), (8, 3)])
def test_uniform_pipeline_has_the_textbook_bubble(schedule: Schedule, stages: int, microbatches: int) -> None:
    programs, models = uniform_programs([StageTimes(1e-3, 2e-3)] * stages, schedule, microbatches)
    outcome = pipeline_step(price_programs(programs, models), place(ring_fabric(stages), stages), HIER)
    assert outcome.pipeline_end_s == pytest.approx((microbatches + stages - 1) * 3e-3, rel=1e-9)
    busy = microbatches * 3e-3
    bubble = (outcome.pipeline_end_s - busy) / outcome.pipeline_end_s
    assert bubble == pytest.approx((stages - 1) / (microbatches + stages - 1), rel=1e-9)


def test_pipeline_sends_activations_and_contends(library: Library) -> None:
    stage = StageTimes(1e-3, 2e-3, 1e-4, send_bytes=8 * 2**20, gradient_bytes=64 * 2**20)
    programs, models = uniform_programs([stage] * 4, Schedule.ONE_F_ONE_B, 8, bucket_bytes=2**30)
    fabric = ring_fabric(8, gbps=25.0)
    placement = place(fabric, 4)
    priced = price_programs(programs, models)
    outcome = pipeline_step(priced, placement, HIER)
    free = pipeline_step(priced, placement, HIER, communicate=False)
    assert outcome.end_s > free.end_s
    sends = [t for t in outcome.comm.transfers if t.name.startswith("act")]
    assert len(sends) == 3 * 8
    assert all(t.end_s - t.start_s >= 8 * 2**20 / 25e9 for t in sends)
    assert len(outcome.comm.collectives) == 4  # one bucket per stage, data-parallel width 2
    updates = [t for t in outcome.tasks if t.kind is BlockKind.UPDATE]
    assert len(updates) == 4
    assert math.isclose(outcome.end_s, max(t.end_s for t in updates))
    # each stage's bucket is all-reduced once its last microbatch's backward has written it
    last_backward = {t.stage: t.end_s for t in outcome.tasks if t.kind is BlockKind.BACKWARD and t.microbatch == 7}
    for reduce in outcome.comm.collectives:
        stage = int(reduce.name.split(" s")[1].split(" ")[0])
        assert reduce.start_s >= last_backward[stage]


def test_gradient_accumulation_is_a_one_stage_pipeline_of_its_microbatches() -> None:
    stage = StageTimes(1e-3, 2e-3, 5e-4, gradient_bytes=64 * 2**20)
    (program,), models = uniform_programs([stage], Schedule.ONE_F_ONE_B, 4, bucket_bytes=2**30)
    placement = place(ring_fabric(8, gbps=25.0), 1)
    outcome = pipeline_step(price_programs([program], models), placement, HIER)
    blocks = [t for t in outcome.tasks if t.kind is not BlockKind.UPDATE]
    assert [(t.kind, t.microbatch) for t in blocks] == [
        (k, m) for m in range(4) for k in (BlockKind.FORWARD, BlockKind.BACKWARD)
    ]
    assert outcome.pipeline_end_s == pytest.approx(4 * 3e-3, rel=1e-12)  # back to back, nothing to wait for
    (reduce,) = outcome.comm.collectives  # once, after the last microbatch's backward
    assert reduce.start_s == pytest.approx(outcome.pipeline_end_s, rel=1e-12)
    (update,) = [t for t in outcome.tasks if t.kind is BlockKind.UPDATE]
    assert update.start_s == pytest.approx(reduce.end_s) and update.end_s - update.start_s == pytest.approx(5e-4)
    assert outcome.comm.transfers == []


def test_link_observers_see_every_transfer(v100_resnet: tuple[Trace, list[OpCost], bool]) -> None:
    trace, costs, separate = v100_resnet
    placement = place(ring_fabric(8, gbps=2.0), 1)
    statistics, spans = LinkStatistics(), LinkSpans()
    step = with_gradient_all_reduces(trace, HIER.bucket_bytes)
    watched = data_parallel_step(step.ops, _aligned(step, costs), separate, placement, HIER, 0.0, [statistics, spans])
    unwatched = data_parallel_step(step.ops, _aligned(step, costs), separate, placement, HIER)
    assert watched.end_s == unwatched.end_s  # observing changes nothing
    assert watched.comm.collectives == unwatched.comm.collectives
    used = [lane for lane in watched.comm.lanes if statistics.busy_s.get(lane, 0.0) > 0]
    assert used
    for lane in used:
        assert sum(s.end_s - s.start_s for s in spans.spans[lane]) == pytest.approx(statistics.busy_s[lane])
        assert lane.name == f"{lane.tier.name} {lane.id}"
        assert statistics.bytes[lane] > 0
    assert {lane.id.direction for lane in used} <= {Direction.PLUS, Direction.MINUS}
    assert str(LaneId("m0", Direction.PLUS, 1)) == "m0 +1"


def _comm_trace(library: Library, nbytes: int, kind: CommKind) -> tuple[Trace, list[OpCost | None]]:
    """A product, a communication op waiting for it, then a product waiting for the communication."""
    gemm = build_trace("gemm:512x512x512", library, Mode.INFER, None, Precision.FP16, None).ops[0]
    ops = (gemm, comm_op("c", kind, nbytes, (0,), CommGroup.DATA_PARALLEL), replace(gemm, name="after", deps=(1,)))
    trace = Trace("t", Mode.INFER, 1, Precision.FP16, ops, 0, 0)
    chip = library.chip("v100")
    model = cost_model_for(chip, default_efficiency(library, chip), trace.precision, 0)
    cost = model.cost(gemm)
    return trace, [cost, None, cost]


def test_a_communication_op_runs_on_the_links_between_the_ops_around_it(library: Library) -> None:
    fabric = ring_fabric(8)
    trace, costs = _comm_trace(library, 8 * 2**20, CommKind.ALL_GATHER)
    trace.check()
    outcome = data_parallel_step(trace.ops, costs, False, place(fabric, 1), HIER)
    before, after = outcome.timings
    (record,) = outcome.comm.collectives
    start, end = record.start_s, record.end_s
    assert (record.name, record.stage, record.bytes) == ("c", 0, 8 * 2**20)
    assert start == before.end_s and after.start_s == end
    alone = simulate_collective(fabric, "all-gather", 8 * 2**20, Algorithm.HIERARCHICAL).time_s
    assert end - start == pytest.approx(alone, rel=1e-12)
    assert outcome.end_s == pytest.approx(after.end_s)


def test_a_planned_collective_runs_as_its_plan_on_its_own_copy_of_the_links(library: Library) -> None:
    fabric, slower = ring_fabric(8), ring_fabric(8, gbps=5.0)
    trace, costs = _comm_trace(library, 8 * 2**20, CommKind.ALL_REDUCE)
    plan = CommPlan(slower, Algorithm.RING, 2**20, launch_s=1e-5)
    statistics = LinkStatistics()
    outcome = data_parallel_step(trace.ops, costs, False, place(fabric, 1), HIER, 0.0, [statistics], plans={1: plan})
    (record,) = outcome.comm.collectives
    start, end = record.start_s, record.end_s
    alone = simulate_collective(slower, "all-reduce", 8 * 2**20, Algorithm.RING, chunk_bytes=2**20, launch_s=1e-5)
    assert end - start == pytest.approx(alone.time_s, rel=1e-12)
    carried = {name: nbytes for name, nbytes, _ in alone.lanes}
    assert {lane.name: statistics.bytes.get(lane, 0.0) for lane in outcome.comm.lanes} == pytest.approx(carried)


def test_a_send_crosses_one_innermost_link(library: Library) -> None:
    fabric = ring_fabric(8, gbps=10.0)
    trace, costs = _comm_trace(library, 2**20, CommKind.SEND)
    outcome = data_parallel_step(trace.ops, costs, False, place(fabric, 1), HIER)
    (record,) = outcome.comm.transfers
    start, end = record.start_s, record.end_s
    assert (record.name, record.bytes) == ("c", 2**20)
    assert end - start == pytest.approx(2**20 / 10e9 + 1e-6, rel=1e-12)
    assert outcome.timings[1].start_s == end
