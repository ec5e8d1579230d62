"""The one-chip list scheduler (:func:`archsim.engine.replay.list_schedule`) against the SimPy processes.

:func:`~archsim.engine.replay.replay` computes a chip's schedule without SimPy; the multi-chip engine
still runs :func:`~archsim.engine.replay.schedule_ops`. Both must give the same start and end of every
op, bit for bit, on random traces, unit assignments, op times and issue overheads (and of the same
type when every op takes time: SimPy's clock starts at the integer 0).
"""

from __future__ import annotations

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from archsim.engine.replay import OpTiming, list_schedule, schedule_ops
from archsim.models.base import Bound, OpCost, Unit
from archsim.workloads.trace import Op, OpKind, Phase


def simpy_schedule(ops: list[Op], costs: list[OpCost], separate: bool, issue_s: float) -> list[OpTiming]:
    env = simpy.Environment()
    _, timings = schedule_ops(env, ops, costs, separate, issue_s)
    env.run()
    assert all(t is not None for t in timings)
    return [t for t in timings if t is not None]


@st.composite
def schedules(draw: st.DrawFn) -> tuple[list[Op], list[OpCost]]:
    """Random DAGs in program order, each op with a random time (zero included) and unit."""
    count = draw(st.integers(min_value=1, max_value=40))
    seconds = st.one_of(st.just(0.0), st.floats(min_value=1e-9, max_value=1e-2, allow_nan=False))
    ops: list[Op] = []
    costs: list[OpCost] = []
    for index in range(count):
        deps = draw(st.sets(st.integers(min_value=0, max_value=index - 1), max_size=4)) if index else set()
        ops.append(Op(f"op{index}", OpKind.ELEMENTWISE, Phase.FORWARD, 1, (), (), tuple(sorted(deps))))
        time_s = draw(seconds)
        unit = draw(st.sampled_from(list(Unit)))
        costs.append(OpCost(time_s, time_s, 0.0, 0.0, 0, 0.0, Bound.COMPUTE, unit))
    return ops, costs


@settings(max_examples=150, deadline=None)
@given(
    schedule=schedules(),
    separate=st.booleans(),
    issue_s=st.one_of(st.just(0.0), st.floats(min_value=1e-9, max_value=1e-3, allow_nan=False)),
)
def test_list_scheduler_equals_simpy(schedule: tuple[list[Op], list[OpCost]], separate: bool, issue_s: float) -> None:
    ops, costs = schedule
    fast = list_schedule(ops, costs, separate, issue_s)
    slow = simpy_schedule(ops, costs, separate, issue_s)
    assert [(t.start_s, t.end_s) for t in fast] == [(t.start_s, t.end_s) for t in slow]
    if all(c.time_s > 0 for c in costs):  # (SimPy's clock reads 0 or 0.0 after zero-length ops at time 0)
        assert [(type(t.start_s), type(t.end_s)) for t in fast] == [(type(t.start_s), type(t.end_s)) for t in slow]
    assert [t.cost for t in fast] == costs


def test_a_dependency_on_a_later_op_is_refused() -> None:
    ops = [Op("op0", OpKind.ELEMENTWISE, Phase.FORWARD, 1, (), (), (1,))]
    cost = OpCost(1.0, 1.0, 0.0, 0.0, 0, 0.0, Bound.COMPUTE, Unit.MATRIX)
    with pytest.raises(ValueError, match="depends on a later or invalid op"):
        list_schedule(ops, [cost], separate_units=False)
