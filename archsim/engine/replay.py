"""Replay of a trace on one chip as a SimPy discrete-event simulation.

Each op is a process. It waits until every op it depends on has finished and until the op before
it on the same unit has been issued (units issue in program order, like a CUDA stream or a
Da Vinci instruction queue), then holds its unit for the time its cost model gives. Chips whose
matrix and vector units are separate resources (the model's ``separate_units``: Ascend's cube and vector
units, a TPU's MXUs and vector unit) run independent ops on both at once; on the others every op
takes the one shared unit. Ties are broken by trace order, so a replay is deterministic.

The host issues ops asynchronously, one every ``issue_overhead_s``; an op starts no earlier than
its issue. With one shared unit, no issue cost and no contention, the replay equals the closed
form: the sum of op times.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import simpy

from archsim.models.base import CostModel, OpCost, Unit
from archsim.workloads.trace import Op, Trace


@dataclass(frozen=True, slots=True)
class OpTiming:
    """When one op ran, and what it cost."""

    start_s: float
    end_s: float
    cost: OpCost


def replay(trace: Trace, model: CostModel, issue_overhead_s: float = 0.0) -> list[OpTiming]:
    """Replay ``trace`` on one chip; returns one timing per op, in trace order.

    ``issue_overhead_s`` is the host's cost of issuing one op (framework dispatch, kernel launch
    call): the host issues ops in trace order, asynchronously, and an op cannot start before it is
    issued. When the device's ops are longer than that, the host runs ahead and the cost is hidden.
    """
    env = simpy.Environment()
    costs = [model.cost(op) for op in trace.ops]
    _, timings = schedule_ops(env, trace.ops, costs, model.separate_units, issue_overhead_s)
    env.run()
    assert all(t is not None for t in timings), "every op of a topologically ordered trace runs"
    return [t for t in timings if t is not None]


def schedule_ops(
    env: simpy.Environment,
    ops: Sequence[Op],
    costs: Sequence[OpCost],
    separate_units: bool,
    issue_overhead_s: float = 0.0,
    extra_waits: Mapping[int, Sequence[simpy.Event]] | None = None,
) -> tuple[list[simpy.Event], list[OpTiming | None]]:
    """Add one chip's ops to ``env`` as processes, as :func:`replay` does; the caller runs ``env``.

    Returns the event each op triggers when it finishes and the list its timings fill in (seconds of
    ``env`` time) while the environment runs. ``extra_waits`` maps an op index to further events it
    waits for before it may start (the multi-chip engine makes the optimizer update wait for the
    gradient all-reduce this way); without them the schedule is exactly :func:`replay`'s.
    """
    shared = simpy.Resource(env, capacity=1)
    units = {unit: simpy.Resource(env, capacity=1) for unit in Unit} if separate_units else {}
    finished = [env.event() for _ in ops]
    issued = [env.event() for _ in ops]
    previous_on_unit: dict[Unit, int] = {}
    timings: list[OpTiming | None] = [None] * len(ops)

    def run_op(index: int, waits: list[simpy.Event], resource: simpy.Resource) -> simpy.events.ProcessGenerator:
        if waits:
            yield env.all_of(waits)
        with resource.request() as request:
            yield request
            issued[index].succeed()
            start = env.now
            yield env.timeout(costs[index].time_s)
        timings[index] = OpTiming(start, env.now, costs[index])
        finished[index].succeed()

    for index, op in enumerate(ops):
        unit = costs[index].unit if separate_units else Unit.MATRIX
        waits = [finished[d] for d in op.deps]
        if issue_overhead_s > 0.0:
            waits.append(env.timeout((index + 1) * issue_overhead_s))
        if unit in previous_on_unit:
            waits.append(issued[previous_on_unit[unit]])
        if extra_waits is not None and index in extra_waits:
            waits.extend(extra_waits[index])
        previous_on_unit[unit] = index
        env.process(run_op(index, waits, units.get(unit, shared)))
    return finished, timings
