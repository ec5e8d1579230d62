"""The SimPy replay: program order per unit, dependencies, overlap of separate units."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from hypothesis import given, settings

from archsim.engine import replay
from archsim.models.base import Bound, OpCost, Unit
from archsim.spec.common import Precision
from archsim.testing.strategies import traces
from archsim.workloads.trace import Mode, Op, OpKind, Phase, Trace


@dataclass
class FixedModel:
    """Each op costs 1 ms per (index + 1); matrix ops on the matrix unit, others on the vector unit."""

    separate_units: bool
    chip: object = None
    precision: Precision = Precision.FP16

    def cost(self, op: Op) -> OpCost:
        seconds = 1e-3 * (int(op.name.removeprefix("op")) + 1)
        unit = Unit.MATRIX if op.kind.is_matrix else Unit.VECTOR
        return OpCost(seconds, seconds, 0.0, 0.0, 0, seconds, Bound.COMPUTE, unit)


def trace_of(kinds: list[OpKind], deps: list[tuple[int, ...]]) -> Trace:
    ops = tuple(
        Op(f"op{i}", kind, Phase.FORWARD, 1, (), (), dep) for i, (kind, dep) in enumerate(zip(kinds, deps, strict=True))
    )
    return Trace("t", Mode.INFER, 1, Precision.FP16, ops, parameters=0, memory_bytes=0)


def test_shared_unit_runs_in_program_order() -> None:
    trace = trace_of([OpKind.MATMUL, OpKind.ELEMENTWISE, OpKind.MATMUL], [(), (), ()])
    timings = replay(trace, FixedModel(separate_units=False))
    assert [(t.start_s, t.end_s) for t in timings] == [(0.0, 0.001), (0.001, 0.003), (0.003, 0.006)]


def test_separate_units_overlap_independent_ops() -> None:
    # op1 (vector) does not depend on op0 (matrix): they run together; op2 waits for both
    trace = trace_of([OpKind.MATMUL, OpKind.ELEMENTWISE, OpKind.MATMUL], [(), (), (0, 1)])
    timings = replay(trace, FixedModel(separate_units=True))
    assert timings[0].start_s == timings[1].start_s == 0.0
    assert timings[2].start_s == max(timings[0].end_s, timings[1].end_s)


def test_dependencies_respected_across_units() -> None:
    trace = trace_of([OpKind.ELEMENTWISE, OpKind.MATMUL], [(), (0,)])
    timings = replay(trace, FixedModel(separate_units=True))
    assert timings[1].start_s == timings[0].end_s


@settings(max_examples=50, deadline=None)
@given(trace=traces())
def test_without_contention_equals_closed_form(trace: Trace) -> None:
    """One shared unit: the makespan is the sum of op times, and ops never overlap."""
    model = FixedModel(separate_units=False)
    timings = replay(trace, model)
    total = sum(model.cost(op).time_s for op in trace.ops)
    assert abs(max(t.end_s for t in timings) - total) < 1e-12
    for before, after in itertools.pairwise(timings):
        assert after.start_s >= before.end_s - 1e-15


@settings(max_examples=50, deadline=None)
@given(trace=traces())
def test_separate_units_bounds(trace: Trace) -> None:
    """Two units: no slower than one, no faster than the busier unit or any dependency chain."""
    model = FixedModel(separate_units=True)
    timings = replay(trace, model)
    makespan = max(t.end_s for t in timings)
    per_unit: dict[Unit, float] = {}
    for op in trace.ops:
        cost = model.cost(op)
        per_unit[cost.unit] = per_unit.get(cost.unit, 0.0) + cost.time_s
    assert makespan <= sum(per_unit.values()) + 1e-12
    assert makespan >= max(per_unit.values()) - 1e-12
    for index, op in enumerate(trace.ops):
        for dep in op.deps:
            assert timings[index].start_s >= timings[dep].end_s - 1e-15
