"""Replay of a trace on one chip as a SimPy discrete-event simulation.

Each op is a process. It waits until every op it depends on has finished and until the op before
it on the same unit has been issued (units issue in program order, like a CUDA stream or a
Da Vinci instruction queue), then holds its unit for the time its cost model gives. Chips whose
matrix and vector units are separate resources (the model's ``separate_units``: Ascend's cube and vector
units, a TPU's MXUs and vector unit) run independent ops on both at once; on the others every op
takes the one shared unit. Ties are broken by trace order, so a replay is deterministic.

With one shared unit and no contention the replay equals the closed form: the sum of op times.
"""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from archsim.models.base import CostModel, OpCost, Unit
from archsim.workloads.trace import Trace


@dataclass(frozen=True, slots=True)
class OpTiming:
    """When one op ran, and what it cost."""

    start_s: float
    end_s: float
    cost: OpCost


def replay(trace: Trace, model: CostModel) -> list[OpTiming]:
    """Replay ``trace`` on one chip; returns one timing per op, in trace order."""
    env = simpy.Environment()
    separate_units = model.separate_units
    costs = [model.cost(op) for op in trace.ops]
    shared = simpy.Resource(env, capacity=1)
    units = {unit: simpy.Resource(env, capacity=1) for unit in Unit} if separate_units else {}
    finished = [env.event() for _ in trace.ops]
    issued = [env.event() for _ in trace.ops]
    previous_on_unit: dict[Unit, int] = {}
    timings: list[OpTiming | None] = [None] * len(trace.ops)

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

    for index, op in enumerate(trace.ops):
        unit = costs[index].unit if separate_units else Unit.MATRIX
        waits = [finished[d] for d in op.deps]
        if unit in previous_on_unit:
            waits.append(issued[previous_on_unit[unit]])
        previous_on_unit[unit] = index
        env.process(run_op(index, waits, units.get(unit, shared)))
    env.run()
    assert all(t is not None for t in timings), "every op of a topologically ordered trace runs"
    return [t for t in timings if t is not None]
