"""Chip descriptions: the common header, one section per family, and their cross-field checks.

A chip file (``chips/NAME.yaml``) has ``kind: chip``, a ``family`` and exactly the one family section
that matches it (``tensorcore``, ``ipu``, ``cube`` or ``systolic``). Every quantity is a unit string;
see :mod:`archsim.units`. The checks at the bottom of :class:`ChipSpec` tie the parts together: the
published peak of each precision must agree with the one implied by the unit counts and the clock
(within 10 %), and the precisions a chip can run are those its matrix unit supports.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from archsim.errors import UnitError
from archsim.spec.common import (
    Bandwidth,
    Bytes,
    Count,
    Duration,
    Fraction,
    Frequency,
    Name,
    Precision,
    Spec,
    Throughput,
    Time,
    parse_shape,
)
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


class Family(enum.StrEnum):
    """The four kinds of chip archsim models, each with its own cost model."""

    TENSORCORE = "tensorcore"
    IPU = "ipu"
    CUBE = "cube"
    SYSTOLIC = "systolic"


class Dataflow(enum.StrEnum):
    """Which operand stays in the processing elements of a systolic array."""

    OUTPUT_STATIONARY = "os"
    WEIGHT_STATIONARY = "ws"
    INPUT_STATIONARY = "is"


class Efficiency(Spec):
    """Efficiency parameters of a run: family file, then software stack, then the chip's overrides.

    The software stack sets the dispatch costs (``op_overhead``, ``framework_overhead``,
    ``host_overhead``, ``step_overhead``; :mod:`archsim.spec.software`) and may set ``compute`` at a
    precision (its kernel choice).

    They are the only numbers fitted to measurements (``scripts/calibrate.py``, to
    ``calibration.csv`` only); nothing here may depend on the benchmark being run.
    """

    compute: Fraction | None = None
    """Fraction of the matrix unit's peak a large, well-shaped kernel reaches in its main loop."""
    memory_bandwidth: Fraction | None = None
    """Fraction of the main memory's peak bandwidth a streaming kernel reaches."""
    vector: Fraction | None = None
    """Fraction of the vector/CUDA-core peak an element-wise kernel reaches when not memory bound."""
    op_overhead: Duration | None = None
    """Device-side fixed cost of one op, part of its duration: the gap between back-to-back kernels
    (GPU), program step (IPU), task dispatch (Ascend)."""
    framework_overhead: Duration | None = None
    """Device idle time per op added by the framework that runs a model's ops one by one (eager
    dispatch, allocator and bookkeeping between kernels), on top of ``op_overhead``. Zero for a bare
    kernel library (``cublas``, the default of ``gemm:``, ``conv:`` and ``meta: {launch: kernel}``
    traces) and for a stack that compiles the whole graph."""
    host_overhead: Duration | None = None
    """Host-side cost of issuing one op (framework dispatch and launch call). The host issues ops
    ahead of the device; this cost shows only when ops are shorter than it (small batches)."""
    step_overhead: Duration | None = None
    """Fixed cost per training step outside the ops (optimizer bookkeeping, loss scaling, data feed);
    inference steps do not pay it."""
    exchange: Fraction | None = None
    """IPU only: fraction of the on-chip exchange bandwidth an exchange phase reaches."""
    wave_overhead: Duration | None = None
    """GPU only: time each wave of thread blocks spends filling and draining its pipeline (the first
    operand tiles arriving from memory, the last results stored) when it cannot overlap a neighbour."""
    data_gradient: Fraction | None = None
    """GPU only: fraction of the matrix unit's peak a data-gradient convolution (cuDNN's dgrad
    kernels, ``bwd_data`` of a ``conv2d``) reaches in its main loop, in place of ``compute``. Measured
    dgrad kernels run 1.1 to 1.9 times as long as the forward kernel of the same shape and MACs
    (DeepBench, V100), while weight-gradient and forward kernels match ``compute``."""

    def merged(self, override: Efficiency) -> Efficiency:
        """A copy with every field that ``override`` sets replaced."""
        # iterating a model gives its (field, value) pairs: no serializer to build, as model_dump() would
        return self.model_copy(update={k: v for k, v in override if v is not None})


class MemoryLevel(Spec):
    """One level of a chip's memory: which technology (a ``memory/`` name), how big, how fast."""

    technology: Name
    capacity: Bytes
    bandwidth: Bandwidth
    stacks: Count | None = None


class ChipMemory(Spec):
    """The chip's main memory (HBM, or the IPU's streaming memory) and an optional on-chip level."""

    main: MemoryLevel
    onchip: MemoryLevel | None = None


class TensorCoreSection(Spec):
    """A tensor-core GPU: SMs of tensor cores and CUDA cores sharing an L1/shared memory.

    The same mechanism describes AMD CDNA GPUs: a compute unit (CU) is an SM, its matrix cores are
    tensor cores, its local data share (LDS) is shared memory. A GPU without tensor cores (Pascal)
    leaves ``tensor_cores_per_sm`` and ``mma_shape`` out and runs its matrix products on the CUDA
    cores at the rates of ``cuda_core_fma_per_clock``.
    """

    sm_count: Count
    tensor_cores_per_sm: Count | None = None
    mma_shape: str | None = None
    """Shape ``MxNxK`` of one tensor-core matrix operation per clock, as published."""
    tensor_fma_per_clock: dict[Precision, Count] = Field(default_factory=dict)
    """Dense fused multiply-adds per clock per tensor core, by operand precision."""
    cuda_core_fma_per_clock: dict[Precision, Count]
    """Fused multiply-adds per clock per SM on the CUDA cores, by precision."""
    register_file_per_sm: Bytes
    shared_memory_per_sm: Bytes
    """Largest shared-memory carve-out of one SM."""
    l2_cache: Bytes
    max_threads_per_sm: Count
    max_blocks_per_sm: Count

    @model_validator(mode="after")
    def _shape(self) -> TensorCoreSection:
        described = (self.tensor_cores_per_sm is not None, self.mma_shape is not None, bool(self.tensor_fma_per_clock))
        if any(described) and not all(described):
            raise ValueError(
                "tensor_cores_per_sm, mma_shape and tensor_fma_per_clock describe the tensor cores together: "
                "give all three, or none for a GPU without tensor cores"
            )
        if self.mma_shape is not None:
            parse_shape(self.mma_shape, 3)
        return self


class IpuSection(Spec):
    """A Graphcore IPU: tiles, each a core with its own SRAM, joined by an all-to-all exchange."""

    tiles: Count
    threads_per_tile: Count
    tile_sram: Bytes
    amp_mac_per_clock: dict[Precision, Count]
    """Multiply-accumulates per clock per tile on the AMP (matrix) unit, by precision."""
    vector_flops_per_clock: dict[Precision, Count]
    """Element-wise floating-point operations per clock per tile, by precision."""
    exchange_bandwidth: Bandwidth
    """Aggregate on-chip exchange bandwidth (all tiles together)."""
    sync_latency: Time
    """Time of one chip-wide bulk-synchronous barrier."""


class CubeSection(Spec):
    """A Huawei Da Vinci chip: AI cores, each a cube unit, a vector unit and L0/L1/unified buffers."""

    ai_cores: Count
    cube_shape: str
    cube_mac_per_clock: dict[Precision, Count]
    """Multiply-accumulates per clock per AI core on the cube unit, by precision."""
    vector_ops_per_clock: dict[Precision, Count]
    """Element-wise operations per clock per AI core on the vector unit, by precision."""
    l0a: Bytes
    l0b: Bytes
    l0c: Bytes
    l1: Bytes
    unified_buffer: Bytes
    l2_cache: Bytes

    @model_validator(mode="after")
    def _shape(self) -> CubeSection:
        parse_shape(self.cube_shape, 3)
        return self


class SystolicSection(Spec):
    """A TPU-style chip: cores of systolic arrays (MXUs) fed from ifmap/filter/ofmap SRAM."""

    cores: Count
    arrays_per_core: Count
    array_rows: Count
    array_cols: Count
    dataflow: Dataflow
    mac_per_pe_per_clock: dict[Precision, Count]
    """Multiply-accumulates per clock per processing element, by precision."""
    vector_ops_per_clock: dict[Precision, Count]
    """Element-wise operations per clock per core on the vector unit, by precision."""
    ifmap_sram: Bytes
    filter_sram: Bytes
    ofmap_sram: Bytes
    """SRAM per array for each operand (double-buffered halves)."""


class ChipSpec(Spec):
    """A whole chip description (``kind: chip``)."""

    schema_version: Literal[1]
    kind: Literal["chip"]
    name: Name
    aliases: tuple[Name, ...] = ()
    family: Family
    description: str
    clock: Frequency
    default_precision: Precision
    peak: dict[Precision, Throughput]
    """Published peak dense throughput per precision (FLOPS; OPS for int8)."""
    tdp: PowerFigure | None = None
    transistors: Count | None = None
    die_area: AreaFigure | None = None
    process: LengthFigure | None = None
    memory: ChipMemory
    tensorcore: TensorCoreSection | None = None
    ipu: IpuSection | None = None
    cube: CubeSection | None = None
    systolic: SystolicSection | None = None
    efficiency: Efficiency = Field(default_factory=Efficiency)
    sources: dict[str, str]

    @model_validator(mode="after")
    def _consistent(self) -> ChipSpec:
        sections = {f: getattr(self, f.value) for f in Family}
        present = [f.value for f, s in sections.items() if s is not None]
        if present != [self.family.value]:
            raise ValueError(
                f"family {self.family.value!r} needs exactly the section {self.family.value!r}, "
                f"found {present or 'none'}"
            )
        for figure in self.not_published():
            if not any(key == figure for key in self.sources):
                raise ValueError(f"{figure}: 'not published' needs a source saying where it is not (sources.{figure})")
        if self.default_precision not in self.peak:
            raise ValueError(f"default_precision {self.default_precision.value} has no peak entry")
        for precision, published in self.peak.items():
            derived = self.derived_peak(precision)
            if derived is None:
                raise ValueError(f"peak.{precision.value}: no unit of this chip runs {precision.value}")
            if abs(derived - published) > PEAK_TOLERANCE * published:
                raise ValueError(
                    f"peak.{precision.value}: published {published / 1e12:.1f} T/s disagrees with "
                    f"{derived / 1e12:.1f} T/s from unit counts and clock (tolerance 10%)"
                )
        if self.ipu is not None:
            if self.memory.onchip is None:
                raise ValueError("memory.onchip: an IPU needs its In-Processor-Memory (the tiles' SRAM) described here")
            total = self.ipu.tiles * self.ipu.tile_sram
            if abs(total - self.memory.onchip.capacity) > 0.01 * total:
                raise ValueError(f"ipu.tile_sram x tiles = {total} bytes disagrees with memory.onchip.capacity")
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
        if self.tensorcore is not None:
            tc = self.tensorcore
            if precision in tc.tensor_fma_per_clock and tc.tensor_cores_per_sm is not None:
                return tc.sm_count * tc.tensor_cores_per_sm * tc.tensor_fma_per_clock[precision]
            if precision in tc.cuda_core_fma_per_clock:
                return tc.sm_count * tc.cuda_core_fma_per_clock[precision]
            return None
        if self.ipu is not None:
            per_tile = self.ipu.amp_mac_per_clock.get(precision)
            return None if per_tile is None else per_tile * self.ipu.tiles
        if self.cube is not None:
            per_core = self.cube.cube_mac_per_clock.get(precision)
            return None if per_core is None else per_core * self.cube.ai_cores
        assert self.systolic is not None
        s = self.systolic
        per_pe = s.mac_per_pe_per_clock.get(precision)
        if per_pe is None:
            return None
        return s.cores * s.arrays_per_core * s.array_rows * s.array_cols * per_pe

    @property
    def precisions(self) -> tuple[Precision, ...]:
        """Precisions this chip can run a workload in (those with a published peak)."""
        return tuple(p for p in Precision if p in self.peak)
