"""What every cost model returns, and what every cost model is given.

A cost model is built once per (chip, efficiency, precision) by :func:`archsim.models.cost_model_for`
and is then a pure function ``cost(op) -> OpCost``: no hidden state, the same op gives the same
record. The record says how long the op keeps its unit busy, which unit that is, how many bytes it
moves through main memory, and what bound it.

Invariant (checked by the property tests): ``time_s >= roofline_s``, where ``roofline_s`` is the op's
FLOPs over the chip's published peak for that unit and precision, or its compulsory main-memory
bytes over the published main-memory bandwidth, whichever is larger.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from archsim.errors import UsageError
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Precision
from archsim.spec.efficiency import Efficiency
from archsim.spec.registry import FamilyEfficiency
from archsim.workloads.trace import Gemm, Op


class Bound(enum.StrEnum):
    """The term that set an op's time (:func:`bound_of`).

    ``compute``: its arithmetic; ``memory``: its main-memory traffic; ``communication``: data moved
    between chips, or between an IPU's tiles over the exchange; ``overhead``: fixed costs of issuing
    it (kernel launch, framework dispatch, superstep sync, program control).
    """

    COMPUTE = "compute"
    MEMORY = "memory"
    COMMUNICATION = "communication"
    OVERHEAD = "overhead"


class Unit(enum.StrEnum):
    """The on-chip resource an op occupies while it runs."""

    MATRIX = "matrix"
    VECTOR = "vector"


@dataclass(frozen=True, slots=True)
class OpCost:
    """Cost of one op on one chip."""

    time_s: float
    """Time the op occupies its unit, overheads included."""
    compute_s: float
    """Time its arithmetic needs on the unit at the modelled efficiency."""
    memory_s: float
    """Time its main-memory (or exchange) traffic needs at the modelled efficiency."""
    overhead_s: float
    """Fixed issue cost (kernel launch, framework dispatch, superstep sync) included in ``time_s``."""
    dram_bytes: int
    """Bytes moved between the chip and its main memory."""
    roofline_s: float
    """Lower bound from published peaks: max(FLOPs / peak, compulsory bytes / bandwidth)."""
    bound: Bound
    """The largest of the op's terms (:func:`bound_of`)."""
    unit: Unit
    communication_s: float = 0.0
    """Time its on-chip exchange between tiles needs (IPU), included in ``time_s``."""
    fill_s: float = 0.0
    """Array fill and drain (systolic arrays): part of ``compute_s``, but a fixed cost of running the op
    rather than its arithmetic, so :meth:`terms` counts it with the overhead."""
    onchip_bytes: int = 0
    """Operand bytes the op reads from a chip-wide on-chip SRAM into its compute units' buffers: a
    tensor-core GPU's tiled matrix kernels stage every tile's A and B panels from the L2; a systolic
    chip's reads its on-chip cache serves (:mod:`archsim.workloads.cache`); 0 where the model counts none."""

    def terms(self) -> dict[Bound, float]:
        """The terms the label compares (:func:`bound_of`): fill and drain move from compute to overhead."""
        return {
            Bound.COMPUTE: self.compute_s - self.fill_s,
            Bound.MEMORY: self.memory_s,
            Bound.COMMUNICATION: self.communication_s,
            Bound.OVERHEAD: self.overhead_s + self.fill_s,
        }


def bound_of(
    compute_s: float, memory_s: float, overhead_s: float, communication_s: float = 0.0, fill_s: float = 0.0
) -> Bound:
    """The term that set an op's time: the largest of its terms.

    Ties go to the earlier of compute, memory, communication, overhead. An op that moves no
    main-memory bytes has ``memory_s`` 0 and so is never ``memory``. ``fill_s`` (a systolic array's
    fill and drain, part of ``compute_s``) counts as overhead, not arithmetic (:meth:`OpCost.terms`).
    """
    compute_s, overhead_s = compute_s - fill_s, overhead_s + fill_s
    largest, bound = compute_s, Bound.COMPUTE
    for value, term in ((memory_s, Bound.MEMORY), (communication_s, Bound.COMMUNICATION), (overhead_s, Bound.OVERHEAD)):
        if value > largest:
            largest, bound = value, term
    return bound


def framework_overhead_s(efficiency: Efficiency) -> float:
    """Per-op framework idle time of a run (the software's, see :attr:`Efficiency.framework_overhead`)."""
    return efficiency.framework_overhead or 0.0


class FrameworkDispatch:
    """A family's model whose every op also pays a framework's per-op idle time.

    User cost functions (:func:`archsim.models.register_op_cost`) receive this model, so the
    framework's time is part of "the family's cost" they start from.
    """

    def __init__(self, base: CostModel, framework_s: float) -> None:
        self.base = base
        self.framework_s = framework_s
        self.chip: ChipSpec = base.chip
        self.precision: Precision = base.precision
        self.separate_units: bool = base.separate_units

    def __getattr__(self, name: str) -> object:
        # attributes a caller reads from the family model (rates, sections) pass through
        return getattr(self.base, name)

    def cost(self, op: Op) -> OpCost:
        """The family model's cost of ``op`` plus the framework's idle time."""
        cost = self.base.cost(op)
        overhead_s = cost.overhead_s + self.framework_s
        bound = (
            bound_of(cost.compute_s, cost.memory_s, overhead_s, cost.communication_s, cost.fill_s)
            if cost.bound is not Bound.COMMUNICATION or cost.communication_s
            else cost.bound
        )
        # every field spelled out: dataclasses.replace walks the fields on each call, and this runs once
        # per op of every run; tests/unit/test_cost_model_plugins.py checks that no field is dropped
        return OpCost(
            time_s=cost.time_s + self.framework_s,
            compute_s=cost.compute_s,
            memory_s=cost.memory_s,
            overhead_s=overhead_s,
            dram_bytes=cost.dram_bytes,
            roofline_s=cost.roofline_s,
            bound=bound,
            unit=cost.unit,
            communication_s=cost.communication_s,
            fill_s=cost.fill_s,
            onchip_bytes=cost.onchip_bytes,
        )


class CostModel(Protocol):
    """A family's cost model, ready to price ops on one chip at one precision."""

    chip: ChipSpec
    precision: Precision
    separate_units: bool
    """True when matrix and vector ops run on separate units that can work at the same time."""

    def cost(self, op: Op) -> OpCost:
        """Price one op."""
        ...


@dataclass(frozen=True, slots=True)
class ChipRates:
    """The numbers every family model needs, derived once from the chip at one precision."""

    clock_hz: float
    matrix_macs_per_clock: int
    """Whole-chip dense MACs per clock of the matrix unit at this precision."""
    vector_flops_per_s: float
    """Whole-chip element-wise FLOP/s peak at this precision."""
    dram_bytes_per_s: float
    """Published main-memory bandwidth."""
    element_bytes: float
    """Bytes of one operand element at the run's precision (0.5 for int4)."""
    efficiency: FamilyEfficiency

    @property
    def matrix_flops_per_s(self) -> float:
        """Published-peak matrix FLOP/s (2 per MAC)."""
        return 2.0 * self.matrix_macs_per_clock * self.clock_hz

    def roofline_s(self, op: Op) -> float:
        """The op's roofline time from published peaks (never modelled as faster)."""
        peak = self.matrix_flops_per_s if op.kind.is_matrix else self.vector_flops_per_s
        return max(op.flops / peak, compulsory_bytes(op, self.element_bytes) / self.dram_bytes_per_s)


def matrix_shape_key(op: Op) -> tuple[object, ...]:
    """What a matrix cost model reads of an op to choose its mapping: GEMM, operand bytes, convolution, phase.

    The operand bytes say which reads an on-chip cache serves (:attr:`~archsim.workloads.trace.TensorAccess.cached`).
    Networks repeat their layer shapes, so a model may keep one choice per key; an event model and its
    batch twin (systolic, IPU) key their memos with it alike.
    """
    return (op.gemm, tuple((t.bytes, t.cached) for t in op.reads), op.conv, op.phase)


def gemm_of(op: Op) -> Gemm:
    """The matrix product of a matrix op (a ValueError for an op that has none: a caller's mistake)."""
    if op.gemm is None:
        raise ValueError(f"op {op.name} ({op.kind.value}) has no matrix product")
    return op.gemm


def operand_bytes(op: Op, element_bytes: float) -> tuple[int, int, int]:
    """Bytes of a matrix op's ``A`` and ``B`` operands and of its other reads.

    An operand is counted at most at the size of its GEMM view: a strided 1x1 convolution reads
    only the pixels its filter lands on (a quarter of its input at stride 2).
    """
    g = gemm_of(op)
    if len(op.reads) < 2:
        raise ValueError(f"op {op.name} reads {len(op.reads)} tensors, a matrix product's operands are two")
    a = min(op.reads[0].bytes, math.ceil(g.batch * g.m * g.k * element_bytes))
    b = min(op.reads[1].bytes, math.ceil(g.batch * g.k * g.n * element_bytes))
    return a, b, sum(t.bytes for t in op.reads[2:])


def compulsory_bytes(op: Op, element_bytes: float) -> int:
    """Bytes an op must move at least once between memory and the chip.

    Every tensor it touches, once; a matrix op's operands at most at their GEMM-view size. A read the
    chip's on-chip cache serves (:attr:`~archsim.workloads.trace.TensorAccess.cached`) is not moved.
    """
    if op.gemm is None or len(op.reads) < 2:
        return op.bytes - op.cached_bytes
    a, b, extras = operand_bytes(op, element_bytes)
    a = 0 if op.reads[0].cached else a
    b = 0 if op.reads[1].cached else b
    extras -= sum(t.bytes for t in op.reads[2:] if t.cached)
    return a + b + extras + op.bytes_written


def chip_rates(
    chip: ChipSpec, efficiency: FamilyEfficiency, precision: Precision, vector_flops_per_s: float
) -> ChipRates:
    """Rates of ``chip`` at ``precision``; an unsupported precision is a UsageError.

    The chip's peak (:meth:`~archsim.spec.chip.ChipSpec.peak_flops`, its matrix units') bounds every
    unit: the vector path runs at ``vector_flops_per_s`` or that peak, whichever is lower. Every
    shipped chip's vector units are far below it; a variant whose are not (a 1x1 systolic array beside
    a 32-lane vector unit) would otherwise report more FLOP/s than its peak.
    """
    macs = chip.macs_per_clock(precision)
    if macs is None or precision not in chip.peak:
        supported = ", ".join(p.value for p in chip.precisions)
        raise UsageError(chip.name, "--precision", f"{precision.value} is not supported (supported: {supported})")
    return ChipRates(
        clock_hz=chip.clock,
        matrix_macs_per_clock=macs,
        vector_flops_per_s=min(vector_flops_per_s, 2.0 * macs * chip.clock),
        dram_bytes_per_s=chip.memory.main.bandwidth,
        element_bytes=precision.element_bytes,
        efficiency=efficiency,
    )


def finish(
    rates: ChipRates,
    op: Op,
    compute_s: float,
    memory_s: float,
    overhead_s: float,
    dram_bytes: int,
    unit: Unit,
    fill_s: float = 0.0,
    onchip_bytes: int = 0,
) -> OpCost:
    """Assemble an OpCost for a unit that overlaps compute with memory traffic (double-buffered).

    ``fill_s`` is the part of ``compute_s`` a systolic array spends filling and draining;
    ``onchip_bytes`` the operands read from an on-chip SRAM level (:attr:`OpCost.onchip_bytes`).
    """
    roofline_s = rates.roofline_s(op)
    busy_s = max(compute_s, memory_s, roofline_s)
    return OpCost(
        time_s=busy_s + overhead_s,
        compute_s=compute_s,
        memory_s=memory_s,
        overhead_s=overhead_s,
        dram_bytes=dram_bytes,
        roofline_s=roofline_s,
        bound=bound_of(compute_s, memory_s, overhead_s, fill_s=fill_s),
        unit=unit,
        fill_s=fill_s,
        onchip_bytes=onchip_bytes,
    )


@dataclass(frozen=True, slots=True)
class Arith:
    """Element-wise minimum and maximum of two operands, and the integer square root of one.

    A formula shared by a family's one-chip model and its batch model (:mod:`archsim.models.batch`) is
    written once, with ``+ - * / //``, :func:`ceil_div` (operators only) and these functions: the
    one-chip model passes :data:`SCALAR` (Python's ``min``, ``max`` and :func:`math.isqrt`), the batch
    model :data:`archsim.models.batch.ARRAYS` (numpy's element-wise twins, on arrays with one entry per
    configuration; kept there so that the one-chip path never imports numpy). The same operations in
    the same order give each entry the same float.
    """

    minimum: Callable[[Any, Any], Any]
    maximum: Callable[[Any, Any], Any]
    isqrt: Callable[[Any], Any]


SCALAR = Arith(min, max, math.isqrt)
"""Python numbers: the builtins."""


def ceil_div(a: int, b: int) -> int:
    """Integer ceiling of a / b for positive b."""
    return -(-a // b)


def cycles(seconds: float, clock_hz: float) -> int:
    """Seconds -> whole cycles of a clock (rounded up)."""
    return math.ceil(seconds * clock_hz - 1e-9)
