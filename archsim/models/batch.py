"""What every family's batch model returns: one op's cost on many configurations at once.

A family's cost model prices an op on one chip (:class:`~archsim.models.base.OpCost`); its batch
model (``models/<family>_batch.py``, named by :attr:`archsim.spec.registry.FamilyDefinition.batch`)
prices the same op on many variants of one chip, each field of the record an array with one entry
per configuration (:class:`BatchCost`). Each entry is the float the one-chip model gives, bit for
bit: the arithmetic is the same, in the same order, on float64 (IEEE-754 operations are the same in
numpy as in Python). Python divides integers exactly where numpy first converts them to float64, so
the two agree only while every integer stays below :data:`EXACT`; a batch model returns None for an op
whose pricing would pass it, and the caller prices those configurations one at a time. Where a
family's one-chip model writes a formula once for numbers or arrays (:class:`~archsim.models.base.Arith`:
the tensor-core and cube tile costs, the L2 wave traffic, the dataflow terms), its batch model calls
that formula with :data:`ARRAYS`; the systolic and IPU batch models mirror theirs line by line.

A family's batch module defines ``build_batch(chips, efficiency, precision, footprint_bytes)``, which
returns a :class:`BatchModel` (the arguments of the family's model factory, with a list of chips
whose family sections differ only in their numbers), and ``group_key(chip)``: configurations whose
keys differ cannot be priced together (a systolic array's dataflow, say).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from archsim.models.base import Arith, Unit, compulsory_bytes
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Precision
from archsim.workloads.trace import Op

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
EXACT = 2**53
"""Integers below this convert to float64 exactly."""


@dataclass(frozen=True, slots=True)
class BatchCost:
    """:class:`~archsim.models.base.OpCost` of one op on every configuration (same fields, as arrays).

    ``time_s`` excludes the framework's per-op time (:class:`~archsim.models.base.FrameworkDispatch`
    adds it, here the caller). A configuration whose entry is not finite is one the one-chip model
    refuses (no tile fits, say): the caller sends it to the event path.
    """

    time_s: Floats
    compute_s: Floats
    memory_s: Floats
    overhead_s: Floats
    dram_bytes: Ints
    roofline_s: Floats
    unit: Unit
    communication_s: Floats
    fill_s: Floats
    onchip_bytes: Ints | int = 0
    """Operand bytes staged from the L2 (:attr:`~archsim.models.base.OpCost.onchip_bytes`): a tensor-core
    GPU's tiled kernels; 0 where the family's model counts none."""


class BatchModel(Protocol):
    """A family's batch model, ready to price ops on many variants of one chip at one precision."""

    separate_units: bool
    """As the family's :class:`~archsim.models.base.CostModel`: matrix and vector ops on separate units."""

    def cost(self, op: Op) -> BatchCost | None:
        """Price one op on every configuration (None: an integer too large to price exactly)."""
        ...


@dataclass(frozen=True)
class BatchRates:
    """:class:`~archsim.models.base.ChipRates` of every configuration (:func:`batch_rates`)."""

    clock_hz: Floats
    matrix_macs_per_clock: Ints
    vector_flops_per_s: Floats
    dram_bytes_per_s: Floats
    element_bytes: float

    @property
    def matrix_flops_per_s(self) -> Floats:
        """Published-peak matrix FLOP/s (2 per MAC)."""
        return 2.0 * self.matrix_macs_per_clock * self.clock_hz

    def roofline_s(self, op: Op) -> Floats:
        """:meth:`~archsim.models.base.ChipRates.roofline_s` on every configuration."""
        peak = self.matrix_flops_per_s if op.kind.is_matrix else self.vector_flops_per_s
        return np.maximum(op.flops / peak, compulsory_bytes(op, self.element_bytes) / self.dram_bytes_per_s)


def floats(values: Sequence[float]) -> Floats:
    """A float64 array of ``values``."""
    return np.array(values, dtype=np.float64)


def ints(values: Sequence[int]) -> Ints:
    """An int64 array of ``values``."""
    return np.array(values, dtype=np.int64)


def batch_rates(chips: Sequence[ChipSpec], precision: Precision, vector_flops_per_s: Floats) -> BatchRates:
    """:func:`~archsim.models.base.chip_rates` of every chip (each supports ``precision``: the caller checked)."""
    macs = ints([c.macs_per_clock(precision) or 0 for c in chips])
    clock = floats([c.clock for c in chips])
    return BatchRates(
        clock_hz=clock,
        matrix_macs_per_clock=macs,
        vector_flops_per_s=np.minimum(vector_flops_per_s, 2.0 * macs * clock),
        dram_bytes_per_s=floats([c.memory.main.bandwidth for c in chips]),
        element_bytes=precision.element_bytes,
    )


def finish(
    rates: BatchRates,
    op: Op,
    compute_s: Floats,
    memory_s: Floats,
    overhead_s: float,
    dram_bytes: Ints,
    unit: Unit,
    fill_s: Floats | None = None,
    onchip_bytes: Ints | int = 0,
) -> BatchCost:
    """:func:`~archsim.models.base.finish` on every configuration: compute and memory overlapped."""
    roofline_s = rates.roofline_s(op)
    zeros = np.zeros(compute_s.shape)
    overhead = np.full(compute_s.shape, overhead_s)
    return BatchCost(
        time_s=np.maximum(np.maximum(compute_s, memory_s), roofline_s) + overhead,
        compute_s=compute_s,
        memory_s=memory_s,
        overhead_s=overhead,
        dram_bytes=dram_bytes,
        roofline_s=roofline_s,
        unit=unit,
        communication_s=zeros,
        fill_s=zeros if fill_s is None else fill_s,
        onchip_bytes=onchip_bytes,
    )


def cdiv(a: Ints | int, b: Ints | int) -> Ints:
    """:func:`~archsim.models.base.ceil_div` on arrays."""
    return np.asarray(-(-np.asarray(a) // np.asarray(b)), dtype=np.int64)


def isqrt(values: Ints) -> Ints:
    """:func:`math.isqrt` of each entry (non-negative, below :data:`EXACT`)."""
    root = np.sqrt(values.astype(np.float64)).astype(np.int64)
    root = np.where(root * root > values, root - 1, root)
    return np.where((root + 1) * (root + 1) <= values, root + 1, root)


def largest(*values: npt.NDArray[Any] | float) -> int:
    """The largest entry of ``values`` (compare with :data:`EXACT`)."""
    return max(int(np.max(v)) for v in values)


ARRAYS = Arith(np.minimum, np.maximum, isqrt)
"""Arrays of configurations: numpy's element-wise functions (:class:`~archsim.models.base.Arith`)."""
