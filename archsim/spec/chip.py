"""Chip descriptions: the common header, one section per family, and their cross-field checks.

A chip file (``chips/NAME.yaml``) has ``kind: chip``, a ``family`` and exactly the one family section
that matches it, written under the family's name (``tensorcore``, ``ipu``, ``cube``, ``systolic``, ``dataflow`` or a
plugged-in family's) and validated by the schema the family registered
(:mod:`archsim.spec.registry`). Every quantity is a unit string;
see :mod:`archsim.units`. The checks at the bottom of :class:`ChipSpec` tie the parts together: the
published peak of each precision must agree with the one implied by the unit counts and the clock
(within 10 %), and the precisions a chip can run are those its matrix unit supports.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BeforeValidator, Field, SerializeAsAny, ValidationError, model_validator
from pydantic_core import InitErrorDetails

from archsim.errors import SpecError, UnitError
from archsim.spec.common import (
    Bandwidth,
    Bytes,
    Count,
    Frequency,
    Name,
    Precision,
    Spec,
    Throughput,
)
from archsim.spec.efficiency import Efficiency
from archsim.spec.registry import FamilySection, check_family_name, family_definition, family_names
from archsim.units import Dimension, parse

PEAK_TOLERANCE = 0.10
NOT_PUBLISHED = "not published"
PUBLISHED_FIGURES = ("tdp", "die_area", "process")
"""The figures of a chip that may be written ``"not published"`` (with a source saying where it is not)."""


def _figure(dimension: Dimension) -> Any:
    """A quantity of ``dimension``, or the words ``not published``, which are kept as they are."""

    def validate(value: object) -> object:
        if value == NOT_PUBLISHED:
            return value
        try:
            return parse(value, dimension)
        except UnitError as err:
            raise ValueError(err.problem) from None

    return BeforeValidator(validate)


PowerFigure = Annotated[float | Literal["not published"], _figure(Dimension.POWER)]
AreaFigure = Annotated[float | Literal["not published"], _figure(Dimension.AREA)]
LengthFigure = Annotated[float | Literal["not published"], _figure(Dimension.LENGTH)]
SectionT = TypeVar("SectionT", bound=FamilySection)
FamilyName = Annotated[str, AfterValidator(check_family_name)]
"""The name of a registered chip family (:func:`archsim.spec.registry.family_names`)."""


class Dataflow(enum.StrEnum):
    """Which operand stays in the processing elements of a systolic array."""

    OUTPUT_STATIONARY = "os"
    WEIGHT_STATIONARY = "ws"
    INPUT_STATIONARY = "is"


class MemoryLevel(Spec):
    """One level of a chip's memory: which technology (a ``memory/`` name), how big, how fast."""

    technology: Name
    capacity: Bytes
    bandwidth: Bandwidth
    stacks: Count | None = None


class CacheLevel(Spec):
    """An on-chip cache between the cores and main memory that keeps what ops write for the ops after them."""

    capacity: Bytes


class ChipMemory(Spec):
    """The chip's main memory (HBM, or the IPU's streaming memory) and optional on-chip levels."""

    main: MemoryLevel
    onchip: MemoryLevel | None = None
    cache: CacheLevel | None = None
    """An on-chip cache (TPU v4's CMEM): a read of a tensor it still holds moves no main-memory byte
    (:mod:`archsim.workloads.cache`). Only the systolic family's model reads it."""


class ChipSpec(Spec):
    """A whole chip description (``kind: chip``)."""

    schema_version: Literal[1]
    kind: Literal["chip"]
    name: Name
    aliases: tuple[Name, ...] = ()
    family: FamilyName
    description: str
    clock: Frequency
    default_precision: Precision
    peak: dict[Precision, Throughput]
    """Published peak dense throughput per precision (FLOPS; OPS for int8 and int4)."""
    tdp: PowerFigure | None = None
    transistors: Count | None = None
    die_area: AreaFigure | None = None
    process: LengthFigure | None = None
    memory: ChipMemory
    section: SerializeAsAny[FamilySection]
    """The family section (written under the family's name in the file: ``tensorcore:``, ``ipu:``, ...)."""
    efficiency: Efficiency = Field(default_factory=Efficiency)
    sources: dict[str, str]

    @model_validator(mode="before")
    @classmethod
    def _family_section(cls, data: Any) -> Any:
        """Validate the section named by ``family`` with the family's schema, and store it as ``section``."""
        if not isinstance(data, dict):
            return data  # the field checks report it
        if "section" in data and not isinstance(data["section"], FamilySection):
            raise ValueError("section: not a field of a chip file (write the family section under the family's name)")
        if "section" in data or not isinstance(data.get("family"), str):
            return data  # a section already validated, or a family the field check refuses
        name = data["family"]
        try:
            definition = family_definition(name)
        except ValueError:
            return data  # the ``family`` field reports the unknown name
        present = [key for key in data if key in family_names()]
        if present != [name]:
            raise ValueError(f"family {name!r} needs exactly the section {name!r}, found {present or 'none'}")
        try:
            section = definition.section.model_validate(data[name])
        except ValidationError as err:
            details = [
                InitErrorDetails(type=e["type"], loc=(name, *e["loc"]), input=e["input"], ctx=e.get("ctx", {}))
                for e in err.errors(include_url=False)
            ]
            raise ValidationError.from_exception_data(cls.__name__, details) from None
        return {**{k: v for k, v in data.items() if k != name}, "section": section}

    @model_validator(mode="after")
    def _consistent(self) -> ChipSpec:
        for figure in self.not_published():
            if not any(key == figure for key in self.sources):
                raise ValueError(f"{figure}: 'not published' needs a source saying where it is not (sources.{figure})")
        if self.default_precision not in self.peak:
            raise ValueError(f"default_precision {self.default_precision.value} has no peak entry")
        for precision in self.peak:
            if precision.is_generic:
                raise ValueError(f"peak.{precision.value}: name the block-scaled format, nvfp4 or mxfp4")
            if precision.storage not in self.peak:
                storage = precision.storage.value
                problem = f"a {precision.value} run keeps what its weight products do not read in {storage}"
                raise ValueError(f"peak.{precision.value} needs peak.{storage}: {problem}")
        for precision, published in self.peak.items():
            derived = self.derived_peak(precision)
            if derived is None:
                raise ValueError(f"peak.{precision.value}: no unit of this chip runs {precision.value}")
            if abs(derived - published) > PEAK_TOLERANCE * published:
                raise ValueError(
                    f"peak.{precision.value}: published {published / 1e12:.1f} T/s disagrees with "
                    f"{derived / 1e12:.1f} T/s from unit counts and clock (tolerance 10%)"
                )
        if self.memory.cache is not None and not family_definition(self.family).reads_cache:
            reading = ", ".join(n for n in family_names() if family_definition(n).reads_cache) or "none"
            problem = f"the {self.family} family's model reads no on-chip cache (those that do: {reading})"
            raise ValueError(f"memory.cache: {problem}")
        self.section.check_chip(self)
        return self

    @property
    def tdp_w(self) -> float | None:
        """The published TDP in watts (None when not published or not given)."""
        return None if self.tdp is None or isinstance(self.tdp, str) else self.tdp

    def not_published(self) -> tuple[str, ...]:
        """The figures of :data:`PUBLISHED_FIGURES` this chip's description says are not published."""
        return tuple(f for f in PUBLISHED_FIGURES if getattr(self, f) == NOT_PUBLISHED)

    def derived_peak(self, precision: Precision) -> float | None:
        """Peak operations per second of the matrix unit at ``precision`` (2 per MAC), or None."""
        macs = self.macs_per_clock(precision)
        return None if macs is None else 2.0 * macs * self.clock

    def peak_flops(self, precision: Precision) -> float:
        """The one peak of ``precision`` that everything uses, in FLOP/s: :meth:`derived_peak`.

        The cost models run the matrix unit at the rate its unit counts and clock give, so
        utilization divides by the same number and can never pass 1. The published ``peak`` is
        the cited figure, checked against it (within 10%) when the chip is read; a precision with no
        published peak is not run.
        """
        derived = self.derived_peak(precision)
        if derived is None or precision not in self.peak:
            raise KeyError(precision)
        return derived

    def macs_per_clock(self, precision: Precision) -> int | None:
        """Whole-chip dense multiply-accumulates per clock at ``precision``, or None if unsupported."""
        return self.section.macs_per_clock(precision)

    def section_of(self, kind: type[SectionT]) -> SectionT:
        """The family section as a ``kind`` (what a family's cost model reads); another kind is a SpecError."""
        if not isinstance(self.section, kind):
            raise SpecError(self.name, self.family, f"is a {type(self.section).__name__}, not a {kind.__name__}")
        return self.section

    def run_precision(self, requested: Precision | None) -> Precision:
        """The precision a run asking for ``requested`` runs at.

        The chip's default for None, its block-scaled 4-bit format for ``fp4`` (NVFP4 where it has it,
        else MXFP4; ``fp4`` itself when it has neither, which the caller then refuses naming
        :attr:`precisions`), ``requested`` otherwise.
        """
        if requested is None:
            return self.default_precision
        if requested.is_generic:
            return next((p for p in (Precision.NVFP4, Precision.MXFP4) if p in self.peak), requested)
        return requested

    @property
    def precisions(self) -> tuple[Precision, ...]:
        """Precisions this chip can run a workload in (those with a published peak)."""
        return tuple(p for p in Precision if p in self.peak)
