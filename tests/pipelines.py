"""Pipelined steps of synthetic stages, for engine tests: each stage's pass is one op of a given time.

:func:`uniform_programs` builds a trace whose stage ``s`` has one forward op, one backward op (writing
the stage's gradients) and an update, cuts it into stages, and turns it into every chip's program
with :func:`archsim.workloads.microbatches.pipeline_programs` in the schedule's order; the chips'
cost models (:class:`FixedTimes`) give each op the time it was made with.
"""

from __future__ import annotations

from dataclasses import dataclass

from archsim.engine.options import Schedule
from archsim.engine.schedules import stage_order
from archsim.models.base import Bound, OpCost, Unit
from archsim.spec.common import Precision
from archsim.workloads.microbatches import ChipProgram, pipeline_programs
from archsim.workloads.pipeline import Stage
from archsim.workloads.trace import Mode, Op, OpKind, Phase, Role, TensorAccess, Trace


@dataclass(frozen=True)
class FixedTimes:
    """A cost model that gives each op the time its name says (``seconds[op.name]``)."""

    seconds: dict[str, float]
    separate_units: bool = False

    def cost(self, op: Op) -> OpCost:
        """The op's time, as compute on the matrix unit."""
        t = self.seconds[op.name]
        return OpCost(t, t, 0.0, 0.0, 0, 0.0, Bound.COMPUTE, Unit.MATRIX)


@dataclass(frozen=True)
class StageTimes:
    """One synthetic stage: its forward, backward and update times, what it sends, its gradient bytes."""

    forward_s: float
    backward_s: float
    update_s: float = 0.0
    send_bytes: int = 0
    gradient_bytes: int = 0


def uniform_programs(
    stages: list[StageTimes], schedule: Schedule, microbatches: int, bucket_bytes: int = 0
) -> tuple[list[ChipProgram], list[FixedTimes]]:
    """Every chip's program of a pipeline of ``stages`` (one chip per stage), and its cost model."""
    ops: list[Op] = []
    seconds: dict[str, float] = {}
    cut: list[Stage] = []
    for s, times in enumerate(stages):
        gradient = (TensorAccess(f"s{s}.grad", times.gradient_bytes, Role.GRADIENT),) if times.gradient_bytes else ()
        forward = Op(f"s{s}", OpKind.MATMUL, Phase.FORWARD, 1, (), ())
        backward = Op(f"s{s}.bwd", OpKind.MATMUL, Phase.BACKWARD_WEIGHT, 1, (), gradient)
        update = Op(f"update@stage{s}", OpKind.OPTIMIZER, Phase.UPDATE, 1, (), ())
        seconds |= {forward.name: times.forward_s, backward.name: times.backward_s, update.name: times.update_s}
        ops += [forward, backward]
        cut.append(Stage(s, (2 * s,), (2 * s + 1,), update, 1 / len(stages), times.send_bytes, 0))
    trace = Trace("synthetic", Mode.TRAIN, 1, Precision.FP16, tuple(ops), 0, 0)
    orders = [[(kind, d, m) for kind, m in stage_order(schedule, d, len(stages), microbatches, True)]
              for d in range(len(stages))]  # fmt: skip
    programs = pipeline_programs(trace, cut, orders, bucket_bytes=bucket_bytes)
    return programs, [FixedTimes(seconds) for _ in stages]
