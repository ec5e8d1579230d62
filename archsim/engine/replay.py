"""Replay of a trace on one chip: a list scheduler, and the same schedule as SimPy processes.

Each op is a process. It waits until every op it depends on has finished and until the op before
it on the same unit has been issued (units issue in program order, like a CUDA stream or a
Da Vinci instruction queue), then holds its unit for the time its cost model gives. Chips whose
matrix and vector units are separate resources (the model's ``separate_units``: Ascend's cube and vector
units, a TPU's MXUs and vector unit) run independent ops on both at once; on the others every op
takes the one shared unit. Ties are broken by trace order, so a replay is deterministic.

The host issues ops asynchronously, one every ``issue_overhead_s``; an op starts no earlier than
its issue. With one shared unit, no issue cost and no contention, the replay equals the closed
form: the sum of op times.

On one chip nothing else competes for a unit, so :func:`replay` computes that schedule directly, as a
list scheduler over the ops in program order (:func:`list_schedule`): an op starts at the latest of
its dependencies' ends, its issue time and the end of the op before it on its unit. It gives the
same floats, bit for bit, as the SimPy processes of :func:`schedule_ops` (the same maxima and sums,
in the same order), which the multi-chip engine keeps: there an op may also wait for collectives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from archsim.models.base import CostModel, OpCost, Unit
from archsim.workloads.trace import Op, Trace

if TYPE_CHECKING:
    import simpy


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
    costs = [model.cost(op) for op in trace.ops]
    return list_schedule(trace.ops, costs, model.separate_units, issue_overhead_s)


def list_schedule(
    ops: Sequence[Op], costs: Sequence[OpCost], separate_units: bool, issue_overhead_s: float = 0.0
) -> list[OpTiming]:
    """The schedule :func:`schedule_ops` simulates, computed in one pass over the ops in trace order.

    Op ``i`` starts at the latest of: its dependencies' ends, its issue time ``(i + 1) *
    issue_overhead_s`` (when positive), and the end of the previous op on its unit (a unit holds one op
    at a time, in program order); it ends ``time_s`` later. Dependencies must point to earlier ops
    (:meth:`~archsim.workloads.trace.Trace.validate`).

    The times equal SimPy's bit for bit. Only the type of a zero can differ: an op that waited for
    zero-length ops and still starts at time 0 starts at ``0`` or ``0.0`` in SimPy depending on the
    order its events were processed in, and at ``0.0`` here.
    """
    ends: list[float] = []
    unit_free: dict[Unit, float] = {}
    timings: list[OpTiming] = []
    for index, op in enumerate(ops):
        cost = costs[index]
        unit = cost.unit if separate_units else Unit.MATRIX
        waits = [ends[dep] for dep in op.deps if 0 <= dep < index]
        if len(waits) != len(op.deps):
            raise ValueError(f"op {index} ({op.name}) depends on a later or invalid op: {op.deps}")
        if issue_overhead_s > 0.0:
            waits.append((index + 1) * issue_overhead_s)
        if unit in unit_free:
            waits.append(unit_free[unit])
        # an op with nothing to wait for starts when SimPy's clock does: at the integer 0
        start: float = max(waits) if waits else 0
        end = start + cost.time_s
        unit_free[unit] = end
        ends.append(end)
        timings.append(OpTiming(start, end, cost))
    return timings


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
    from archsim.engine.network import LinkSlot  # loads SimPy: the multi-chip engine's, never list_schedule's

    # a unit is held as a link is: one op at a time, first come first served (simpy.Resource's events)
    shared = LinkSlot(env)
    units = {unit: LinkSlot(env) for unit in Unit} if separate_units else {}
    finished = [env.event() for _ in ops]
    issued = [env.event() for _ in ops]
    previous_on_unit: dict[Unit, int] = {}
    timings: list[OpTiming | None] = [None] * len(ops)

    def run_op(index: int, waits: list[simpy.Event], resource: LinkSlot) -> simpy.events.ProcessGenerator:
        if waits:
            yield env.all_of(waits)
        request = resource.request()
        yield request
        issued[index].succeed()
        start = env.now
        yield env.timeout(costs[index].time_s)
        resource.release(request)
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
