"""Shared pieces of every description: the frozen base class, quantity field types, enums.

Quantity fields are declared with the ``Annotated`` types below; each parses its unit string once, at
load time, to a number in SI base units (see :mod:`archsim.units`). Count fields are strict integers:
``"80"`` or ``true`` where a count is expected is an error, as is ``0``, a negative count or one
above :data:`~archsim.limits.MAX_COUNT` (2^53).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class BlockScaling:
    """How a block-scaled format stores its scales.

    One scale of ``scale_bytes`` per ``block`` elements, plus ``tensor_scale_bytes`` once per tensor (0: none).
    """

    block: int
    scale_bytes: int
    tensor_scale_bytes: int


class Precision(enum.StrEnum):
    """Numeric formats of the operands of a run; accumulation is in fp32 (int32 for int8 and int4).

    ``fp8`` stands for both OCP 8-bit floating-point formats, E4M3 and E5M2: the chips that have
    them run both at one matrix rate (NVIDIA Hopper/Blackwell, AMD CDNA 3), so a cost model needs
    only the element size (one byte) and that rate. ``int4`` is treated as ``int8`` is, at half the
    element size: every tensor of the run (weights, activations, KV cache, gradients) is stored at
    4 bits, two elements to a byte, and matrix units accumulate in int32 and write outputs at the
    run's precision (the INT4 tensor-core MMA of NVIDIA Ampere takes s4 operands and an s32
    accumulator: PTX ISA, ``mma.m8n8k32``).

    ``nvfp4`` and ``mxfp4`` are block-scaled 4-bit floats: E2M1 elements (two to a byte) sharing one
    scale per block (:attr:`block_scaling`). NVFP4 has an FP8 E4M3 scale per 16 elements and an FP32
    scale per tensor (NVIDIA, introduced with Blackwell); MXFP4 an E8M0 (power-of-two) scale per 32
    elements (OCP Microscaling Formats (MX) v1.0). The scales are stored with the elements, so a
    tensor of ``n`` elements is ``ceil(n / 2) + ceil(n / block) + tensor scale`` bytes. A run at one of
    them puts the products of weights in the format and keeps everything else at :attr:`storage`,
    fp8 (:mod:`archsim.workloads.quantize`). ``fp4`` is not a format but a request: the chip's own
    block-scaled 4-bit format, NVFP4 where it has it, else MXFP4
    (:meth:`~archsim.spec.chip.ChipSpec.run_precision`); nothing is stored or priced at it.
    """

    FP32 = "fp32"
    TF32 = "tf32"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"
    FP4 = "fp4"
    NVFP4 = "nvfp4"
    MXFP4 = "mxfp4"

    @property
    def bits(self) -> int:
        """Bits of one stored element without its scales (tf32 is stored as fp32; 4-bit formats pack two in a byte)."""
        return _ELEMENT_BITS[self]

    @property
    def is_generic(self) -> bool:
        """True for ``fp4``: a request that a chip resolves to its format, never itself a format."""
        return self is Precision.FP4

    @property
    def block_scaling(self) -> BlockScaling | None:
        """The scales of a block-scaled format (None for every other precision)."""
        return _BLOCK_SCALING.get(self)

    @property
    def storage(self) -> Precision:
        """What a run at this precision keeps the tensors its block-scaled products do not read in.

        fp8 for ``nvfp4`` and ``mxfp4`` (attention, norms, the KV cache), the precision itself otherwise.
        """
        return Precision.FP8 if self in _BLOCK_SCALING else self

    @property
    def element_bytes(self) -> float:
        """Bytes of one stored element as a number, for rates and capacities per element.

        0.5 for int4; 0.5625 for nvfp4 and 0.53125 for mxfp4, their block scales spread over the block.
        """
        scaling = self.block_scaling
        per_scale = 0.0 if scaling is None else scaling.scale_bytes / scaling.block
        return self.bits / BITS_PER_BYTE + per_scale

    def nbytes(self, elements: int) -> int:
        """Bytes of ``elements`` stored elements: ``ceil(elements * bits / 8)`` and any block scales.

        A block-scaled format adds ``ceil(elements / block)`` scales and the tensor's own, if any.
        Exact for every format: an int4 tensor of ``n`` elements is ``ceil(n / 2)`` bytes, an nvfp4 one
        ``ceil(n / 2) + ceil(n / 16) + 4``. ``fp4`` has no size (a ValueError: resolve it first).
        """
        if self.is_generic:
            raise ValueError("fp4 names a chip's block-scaled format: resolve it to nvfp4 or mxfp4 first")
        data = -(-elements * self.bits // BITS_PER_BYTE)
        scaling = self.block_scaling
        if scaling is None or elements <= 0:
            return data
        return data + -(-elements // scaling.block) * scaling.scale_bytes + scaling.tensor_scale_bytes

    def elements_in(self, nbytes: int) -> int:
        """Elements stored in ``nbytes`` bytes: the inverse of :meth:`nbytes` for whole bytes.

        For int4 it is the even count that fills the bytes (an odd-sized tensor's half-empty last
        byte counts as two elements); for a block-scaled format the most elements whose data and
        scales fit (:meth:`nbytes` of the result is at most ``nbytes``).
        """
        scaling = self.block_scaling
        if scaling is None:
            return nbytes * BITS_PER_BYTE // self.bits
        payload = nbytes - scaling.tensor_scale_bytes
        per_block = scaling.block * self.bits // BITS_PER_BYTE + scaling.scale_bytes
        blocks, rest = divmod(max(0, payload), per_block)
        # a last, partial block holds its scale and then two elements per byte
        partial = max(0, rest - scaling.scale_bytes) * BITS_PER_BYTE // self.bits
        return blocks * scaling.block + min(partial, scaling.block - 1)


BITS_PER_BYTE = 8

_ELEMENT_BITS = {
    Precision.FP32: 32,
    Precision.TF32: 32,
    Precision.FP16: 16,
    Precision.BF16: 16,
    Precision.FP8: 8,
    Precision.INT8: 8,
    Precision.INT4: 4,
    Precision.FP4: 4,
    Precision.NVFP4: 4,
    Precision.MXFP4: 4,
}
_BLOCK_SCALING = {
    Precision.NVFP4: BlockScaling(block=16, scale_bytes=1, tensor_scale_bytes=4),
    Precision.MXFP4: BlockScaling(block=32, scale_bytes=1, tensor_scale_bytes=0),
}
"""NVFP4: an FP8 E4M3 scale per 16 elements and an FP32 scale per tensor; MXFP4: an E8M0 scale per 32
(OCP Microscaling Formats v1.0, MXFP4). Sources in the class docstring and the README's FP4 section."""
STORED_PRECISIONS = tuple(p for p in Precision if not p.is_generic)
"""Every precision a tensor can be stored and priced at (all but the ``fp4`` request)."""


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
