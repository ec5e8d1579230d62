"""Shared pieces of every description: the frozen base class, quantity field types, enums.

Quantity fields are declared with the ``Annotated`` types below; each parses its unit string once, at
load time, to a number in SI base units (see :mod:`archsim.units`). Count fields are strict integers:
``"80"`` or ``true`` where a count is expected is an error, as is ``0``, a negative count or one
above :data:`~archsim.limits.MAX_COUNT` (2^53).
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictFloat, StrictInt

from archsim.errors import UnitError
from archsim.limits import MAX_COUNT
from archsim.units import Dimension, parse, parse_bytes

SCHEMA_VERSION = 1


class Spec(BaseModel):
    """Base of every description section: frozen, unknown keys rejected, no coercion of types."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


def _quantity(dimension: Dimension, allow_zero: bool = False) -> Any:
    def validate(value: object) -> float:
        try:
            return parse(value, dimension, allow_zero)
        except UnitError as err:
            raise ValueError(err.problem) from None

    return BeforeValidator(validate)


def _bytes(value: object) -> int:
    try:
        return parse_bytes(value)
    except UnitError as err:
        raise ValueError(err.problem) from None


def _fraction(value: float) -> float:
    if not 0.0 < value <= 1.0:
        raise ValueError(f"must be a fraction in (0, 1], got {value!r}")
    return value


Bytes = Annotated[int, BeforeValidator(_bytes)]
Bandwidth = Annotated[float, _quantity(Dimension.BANDWIDTH)]
Frequency = Annotated[float, _quantity(Dimension.FREQUENCY)]
Time = Annotated[float, _quantity(Dimension.TIME)]
Duration = Annotated[float, _quantity(Dimension.TIME, allow_zero=True)]
"""A time that may be zero (``"0 s"``): a cost that some designs do not pay."""
Throughput = Annotated[float, _quantity(Dimension.THROUGHPUT)]
Power = Annotated[float, _quantity(Dimension.POWER)]
Area = Annotated[float, _quantity(Dimension.AREA)]
Length = Annotated[float, _quantity(Dimension.LENGTH)]
Energy = Annotated[float, _quantity(Dimension.ENERGY)]
EnergyPerBit = Annotated[float, _quantity(Dimension.ENERGY_PER_BIT)]
PowerDensity = Annotated[float, _quantity(Dimension.POWER_DENSITY)]
Voltage = Annotated[float, _quantity(Dimension.VOLTAGE)]
Count = Annotated[StrictInt, Field(gt=0, le=MAX_COUNT)]
Fraction = Annotated[StrictFloat, AfterValidator(_fraction)]
Name = Annotated[str, Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9._-]*$")]


class Fusion(enum.StrEnum):
    """Which ops a framework fuses into one kernel (:mod:`archsim.workloads.fusion` does it).

    ``none``: every op of the graph is a kernel. ``norm-act``: the element-wise ops that consume a
    normalization's output are its epilogue (cuDNN's batch-norm + ReLU and batch-norm + add + ReLU
    kernels, which MXNet's ``--fuse-bn-relu`` and ``--fuse-bn-add-relu`` select).
    """

    NONE = "none"
    NORM_ACT = "norm-act"


class StreamingMemory(enum.StrEnum):
    """What of a step an IPU may keep in streaming memory (DDR behind its gateway) instead of on chip.

    ``none``: the whole step must fit In-Processor Memory, as Poplar requires of a program by
    default. ``optimizer-state``: the state only the optimizer update touches (fp32 master weights,
    moments) may live in streaming memory and is streamed in for the update (Poplar's optimizer-state
    offloading). ``all``: anything may; what does not fit In-Processor Memory is streamed by every op
    that touches it. Chips without streaming memory hold the whole step in main memory whatever it
    says (:mod:`archsim.memory_fit`).
    """

    NONE = "none"
    OPTIMIZER_STATE = "optimizer-state"
    ALL = "all"


class Precision(enum.StrEnum):
    """Numeric formats of the operands of a run; accumulation is in fp32 (int32 for int8 and int4).

    ``fp8`` stands for both OCP 8-bit floating-point formats, E4M3 and E5M2: the chips that have
    them run both at one matrix rate (NVIDIA Hopper/Blackwell, AMD CDNA 3), so a cost model needs
    only the element size (one byte) and that rate. ``int4`` is treated as ``int8`` is, at half the
    element size: every tensor of the run (weights, activations, KV cache, gradients) is stored at
    4 bits, two elements to a byte, and matrix units accumulate in int32 and write outputs at the
    run's precision (the INT4 tensor-core MMA of NVIDIA Ampere takes s4 operands and an s32
    accumulator: PTX ISA, ``mma.m8n8k32``).
    """

    FP32 = "fp32"
    TF32 = "tf32"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"

    @property
    def bits(self) -> int:
        """Bits of one stored element (tf32 is stored as fp32; int4 packs two elements in a byte)."""
        return _ELEMENT_BITS[self]

    @property
    def element_bytes(self) -> float:
        """Bytes of one stored element as a number (0.5 for int4), for rates and capacities per element."""
        return self.bits / BITS_PER_BYTE

    def nbytes(self, elements: int) -> int:
        """Bytes of ``elements`` stored elements: ``ceil(elements * bits / 8)``.

        Exact for every precision: an int4 tensor of ``n`` elements is ``ceil(n / 2)`` bytes.
        """
        return -(-elements * self.bits // BITS_PER_BYTE)

    def elements_in(self, nbytes: int) -> int:
        """Elements stored in ``nbytes`` bytes: the inverse of :meth:`nbytes` for whole bytes.

        For int4 it is the even count that fills the bytes (an odd-sized tensor's half-empty last
        byte counts as two elements).
        """
        return nbytes * BITS_PER_BYTE // self.bits


BITS_PER_BYTE = 8

_ELEMENT_BITS = {
    Precision.FP32: 32,
    Precision.TF32: 32,
    Precision.FP16: 16,
    Precision.BF16: 16,
    Precision.FP8: 8,
    Precision.INT8: 8,
    Precision.INT4: 4,
}


def is_shape(text: str) -> bool:
    """Whether ``text`` is written as a shape, positive integers joined by ``x`` (``2x2x4``, the slice of a pod)."""
    return all(p.isascii() and p.isdigit() for p in text.lower().split("x"))


def parse_shape(text: str, rank: int) -> tuple[int, ...]:
    """``"16x16x16"`` -> ``(16, 16, 16)``; raises ValueError naming the expected form."""
    parts = text.lower().split("x")
    if len(parts) != rank or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"expected {rank} positive integers joined by 'x', got {text!r}")
    return tuple(int(p) for p in parts)


SpecT = TypeVar("SpecT", bound=BaseModel)


def replace_path(spec: SpecT, path: str, value: object) -> SpecT:
    """A copy of ``spec`` with the field at dotted ``path`` set to an already-parsed ``value``.

    ``replace_path(chip, "memory.main.bandwidth", 1.8e12)`` doubles a V100's HBM bandwidth. No
    validation runs: the value must be in internal units (bytes, Hz, seconds). Dict entries are
    addressed by key (``peak.fp16``); a chip's family section by its key in the file
    (``tensorcore.sm_count``), as sweeps address it.
    """
    head, _, rest = path.partition(".")
    if isinstance(spec, dict):
        current = spec[head]
        new = value if not rest else replace_path(current, rest, value)
        return {**spec, head: new}
    if head not in type(spec).model_fields and head == getattr(spec, "family", None):
        head = "section"
    if head not in type(spec).model_fields:
        raise KeyError(f"{type(spec).__name__} has no field {head!r}")
    current = getattr(spec, head)
    new = value if not rest else replace_path(current, rest, value)
    return spec.model_copy(update={head: new})
