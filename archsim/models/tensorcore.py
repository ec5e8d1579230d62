"""Cost model of tensor-core GPUs (NVIDIA P100 to B200, AMD CDNA MI250X and MI300X).

An AMD compute unit is priced as an SM: its matrix cores are the tensor cores, its local data share
the shared memory that stages operand tiles, and a workgroup a thread block. A GPU without tensor
cores (Pascal) runs its matrix products on the CUDA cores at ``cuda_core_fma_per_clock``.

Matrix products and convolutions (as implicit GEMMs) run as tiled kernels: the output is cut into
thread-block tiles of ``tile_m x tile_n``, each looping over ``K`` in steps of :data:`TILE_K`. A
tile's blocks-per-SM is limited by shared memory (double-buffered operand tiles), registers
(fp32 accumulators) and the SM's block and thread limits; the kernel picks the feasible tile shape
that finishes first, as cuBLAS/cuDNN heuristics do. Tiles are spread over the SMs in waves, so the
busiest SM runs ``ceil(tiles / SMs)`` tiles: that is the wave quantization that makes a kernel of
81 tiles on 80 SMs take twice as long as one of 80. An SM with too few resident warps cannot keep its
tensor cores busy (:data:`WARPS_FOR_FULL_RATE`), and an output with too few tiles to fill the SMs
is split along ``K`` (split-K), paying for the fp32 partial sums in memory. Each wave also pays a
fixed pipeline fill and drain (the family's ``wave_overhead``). Main-memory traffic
follows the L2 reuse model of :mod:`archsim.models.memory` (a wave of tiles shares its operand
panels through L2), and the tile shape is chosen on both compute and memory time; compute and
memory overlap (the kernel double-buffers), and each kernel pays a launch overhead.

Element-wise, normalization, softmax, pooling, embedding and optimizer kernels run on the CUDA
cores and are nearly always bound by main-memory bandwidth. A batch-norm that works on batch
statistics (training: its forward pass updates the running statistics, and its backward pass
reduces over the batch for the scale and shift gradients) cannot normalize before a reduction over
the whole batch has finished, so it reads its activation inputs twice (cuDNN's two-pass kernels);
a persistent kernel keeps what fits the SMs' register files and shared memory and the L2 on chip,
so only the rest is read again (:func:`statistics_reread_bytes`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import Field, model_validator

from archsim.errors import SpecError
from archsim.models.base import SCALAR, Arith, ChipRates, OpCost, Unit, ceil_div, chip_rates, finish, gemm_of
from archsim.models.memory import tiled_dram_bytes
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Bytes, Count, Precision, parse_shape
from archsim.spec.registry import FamilyDefinition, FamilyEfficiency, FamilySection, Mechanism, register_family
from archsim.workloads.trace import Op, OpKind, Phase, Role

TILE_K = 32
"""Depth of one main-loop step of a tile (elements of K staged in shared memory at once)."""
TILE_SHAPES = ((256, 128, 256), (128, 256, 256), (128, 128, 256), (128, 64, 128), (64, 128, 128), (64, 64, 128))
"""Candidate thread-block tiles ``(tile_m, tile_n, threads)``, as in CUTLASS's default set."""
PIPELINE_STAGES = 2
"""Shared-memory buffers per operand tile (double buffering)."""
ACCUMULATOR_BYTES = 4
"""Accumulators are fp32 (int32 for int8 and int4)."""
REGISTER_OVERHEAD = 2.0
"""Registers per block relative to its accumulators alone (operand fragments, addresses)."""
WARPS_FOR_FULL_RATE = 8
"""Resident warps an SM needs to keep its tensor cores busy (two per sub-partition, one computing
while the other waits on shared memory); fewer warps reach a proportional share of the peak."""
SPLIT_K = (1, 2, 4, 8, 16, 32)
"""Split-K factors a kernel may use when the output has too few tiles to fill the SMs. Matrix
products (cuBLAS) and weight-gradient convolutions (whose reduction runs over batch and pixels)
split K; forward and data-gradient convolutions (implicit GEMM, as in cuDNN's
IMPLICIT_PRECOMP_GEMM) do not."""
MIN_K_PER_SPLIT = 4 * TILE_K
"""Smallest slice of K a split-K block works on."""


@dataclass(frozen=True, slots=True)
class TileChoice:
    """The tile shape a kernel runs with and what it implies."""

    tile_m: int
    tile_n: int
    blocks_per_sm: int
    tiles: int
    compute_s: float
    dram_bytes: int
    memory_s: float
    onchip_bytes: int = 0
    """A and B panel bytes the tiles stage from the L2 into shared memory over their K loops."""


class TensorCoreSection(FamilySection):
    """A tensor-core GPU: SMs of tensor cores and CUDA cores sharing an L1/shared memory.

    The same mechanism describes AMD CDNA GPUs: a compute unit (CU) is an SM, its matrix cores are
    tensor cores, its local data share (LDS) is shared memory. A GPU without tensor cores (Pascal)
    leaves ``tensor_cores_per_sm`` and ``mma_shape`` out and runs its matrix products on the CUDA
    cores at the rates of ``cuda_core_fma_per_clock``.
    """

    peak_counts = ("sm_count",)

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

    def macs_per_clock(self, precision: Precision) -> int | None:
        """Tensor-core MACs per clock at ``precision``, else the CUDA cores', else None."""
        if precision in self.tensor_fma_per_clock and self.tensor_cores_per_sm is not None:
            return self.sm_count * self.tensor_cores_per_sm * self.tensor_fma_per_clock[precision]
        if precision in self.cuda_core_fma_per_clock:
            return self.sm_count * self.cuda_core_fma_per_clock[precision]
        return None

    def onchip_bytes(self) -> int:
        """Shared memory of every SM and the L2."""
        return self.sm_count * self.shared_memory_per_sm + self.l2_cache

    def matrix_instruction_shape(self) -> str | None:
        """The tensor core's ``MxNxK`` (None without tensor cores)."""
        return self.mma_shape

    def simt_ops_per_instruction(self, precision: Precision, matrix: bool) -> int | None:
        """The CUDA cores' work per lane instruction; None for matrix work the tensor cores run.

        A matrix product at a precision the tensor cores lack runs on the CUDA cores, one FMA per lane
        instruction, or two where the precision's rate is twice fp32's (Pascal's packed half2);
        element-wise work packs two 16-bit values per instruction, as the cost model's vector rate does.
        """
        if matrix and precision in self.tensor_fma_per_clock and self.tensor_cores_per_sm is not None:
            return None
        if not matrix:
            return 2 if precision.bits == 16 else 1
        fp32 = self.cuda_core_fma_per_clock.get(Precision.FP32, 0)
        rate = self.cuda_core_fma_per_clock.get(precision, 0)
        return max(1, rate // fp32) if fp32 else 1

    def simt_lanes(self) -> int:
        """The CUDA cores' FP32 lanes: SMs x FP32 FMAs per SM per clock."""
        return self.sm_count * self.cuda_core_fma_per_clock.get(Precision.FP32, 0)


@dataclass(frozen=True, slots=True)
class TensorCoreEfficiency(FamilyEfficiency):
    """The efficiency record of a tensor-core GPU: the common values, the wave fill and dgrad kernels."""

    wave_overhead: float
    data_gradient: float


MEMO_CHIPS = 16
"""Chips (at one precision and efficiency) whose tile choices are kept between runs."""
_TILE_MEMOS: OrderedDict[tuple[int, Precision, TensorCoreEfficiency], tuple[ChipSpec, dict[object, TileChoice]]] = (
    OrderedDict()
)


def shared_tile_memo(
    chip: ChipSpec, precision: Precision, efficiency: TensorCoreEfficiency
) -> dict[object, TileChoice]:
    """The tile choices already made for ``chip`` at ``precision`` and ``efficiency``, shared by its models.

    A tile choice is a pure function of the op's shape and of these three (the chip's SMs, clock and
    memory, the precision's rates, the efficiencies), so models of the same chip built for later runs
    reuse it. The memo holds the chip itself, so its ``id`` cannot be reused while it is kept; the
    least recently used of more than :data:`MEMO_CHIPS` are dropped.
    """
    key = (id(chip), precision, efficiency)
    found = _TILE_MEMOS.get(key)
    if found is not None and found[0] is chip:
        _TILE_MEMOS.move_to_end(key)
        return found[1]
    memo: dict[object, TileChoice] = {}
    _TILE_MEMOS[key] = (chip, memo)
    while len(_TILE_MEMOS) > MEMO_CHIPS:
        _TILE_MEMOS.popitem(last=False)
    return memo


def statistics_reread_bytes(op: Op, onchip_bytes: int) -> int:
    """Bytes a batch-statistics batch-norm reads a second time (0 for any other op).

    The forward pass reads its input ``x`` once for the statistics and once to normalize; the
    backward pass reads its activation inputs (``dy``, ``x`` and, fused, the ReLU output) once for the
    scale and shift gradients and once for ``dx``. Whatever fits ``onchip_bytes`` stays on chip.
    """
    return max(0, statistics_bytes(op) - onchip_bytes)


def statistics_bytes(op: Op) -> int:
    """Bytes a batch-statistics batch-norm reads for its reduction (0 for any other op, or running statistics)."""
    if op.kind is not OpKind.BATCHNORM:
        return 0
    activations = [t.bytes for t in op.reads if t.role is Role.ACTIVATION]
    if op.phase in (Phase.BACKWARD_DATA, Phase.BACKWARD_WEIGHT):
        return sum(activations)
    if op.phase is Phase.FORWARD and any(t.role is Role.STATE for t in op.writes):
        return activations[0] if activations else 0
    return 0  # inference (running statistics), or recomputed with the statistics saved from forward


def data_gradient_fraction(tc: TensorCoreSection, efficiency: TensorCoreEfficiency, precision: Precision) -> float:
    """The reachable fraction of the matrix peak of a dgrad convolution on ``tc`` at ``precision``.

    ``data_gradient`` where the tensor cores run it: that is what it was fitted to (DeepBench's V100
    dgrad kernels, all fp16 on tensor cores). On CUDA cores (every precision on a P100, fp32 on a V100)
    no dgrad kernel was measured, so a dgrad convolution reaches ``compute``, as its forward does.
    """
    on_tensor_cores = tc.simt_ops_per_instruction(precision, matrix=True) is None
    return efficiency.data_gradient if on_tensor_cores else efficiency.compute


def compute_fraction(efficiency: TensorCoreEfficiency, op: Op, data_gradient: Any) -> Any:
    """The reachable fraction of the matrix peak of ``op``.

    ``data_gradient`` (the chip's :func:`data_gradient_fraction`) for a dgrad convolution, ``compute``
    for every other matrix op.
    """
    if op.conv is not None and op.phase is Phase.BACKWARD_DATA:
        return data_gradient
    return efficiency.compute


def may_split_k(op: Op) -> bool:
    """Matrix products and weight-gradient convolutions may split K; other convolutions do not."""
    return op.conv is None or op.phase is Phase.BACKWARD_WEIGHT


def cuda_core_flops_per_s(tc: TensorCoreSection, clock_hz: float, precision: Precision) -> float:
    """Element-wise FLOP/s of the CUDA cores of every SM at ``precision``."""
    fp32_fma = tc.cuda_core_fma_per_clock.get(Precision.FP32, 0)
    # packed half2 arithmetic doubles the CUDA-core rate for 16-bit element-wise work; CUDA cores
    # have no 8-bit (or 4-bit) arithmetic, so fp8, int8 and int4 element-wise work runs at the fp32 rate
    vector_scale = 2 if precision.bits == 16 else 1
    return 2.0 * fp32_fma * vector_scale * tc.sm_count * clock_hz


def persistent_bytes(tc: TensorCoreSection) -> int:
    """What a persistent kernel keeps on chip: every SM's register file and shared memory, and the L2."""
    return tc.sm_count * (tc.register_file_per_sm + tc.shared_memory_per_sm) + tc.l2_cache


def sm_macs_per_clock(tc: TensorCoreSection, precision: Precision) -> int:
    """MACs per clock of one SM's matrix path at ``precision``: its tensor cores, else its CUDA cores."""
    per_tc = tc.tensor_fma_per_clock.get(precision)
    if per_tc is not None and tc.tensor_cores_per_sm is not None:
        return per_tc * tc.tensor_cores_per_sm
    return tc.cuda_core_fma_per_clock[precision]


def blocks_per_sm(tc: TensorCoreSection, precision: Precision, tile_m: int, tile_n: int, threads: int) -> int:
    """Thread blocks of a tile shape one SM holds at once (shared memory, registers, threads, blocks)."""
    smem = precision.nbytes((tile_m + tile_n) * TILE_K) * PIPELINE_STAGES
    registers = tile_m * tile_n * ACCUMULATOR_BYTES * REGISTER_OVERHEAD
    return min(
        tc.max_blocks_per_sm,
        tc.shared_memory_per_sm // smem,
        int(tc.register_file_per_sm // registers),
        tc.max_threads_per_sm // threads,
    )


class TensorCoreModel:
    """Tiled-kernel model of one tensor-core GPU at one precision."""

    separate_units = False

    def __init__(self, chip: ChipSpec, efficiency: TensorCoreEfficiency, precision: Precision) -> None:
        self.chip = chip
        self.precision = precision
        self.tc: TensorCoreSection = chip.section_of(TensorCoreSection)
        self.eff = efficiency
        vector_flops = cuda_core_flops_per_s(self.tc, chip.clock, precision)
        self.rates: ChipRates = chip_rates(chip, efficiency, precision, vector_flops)
        self._tile_memo = shared_tile_memo(chip, precision, efficiency)
        self.onchip_bytes = persistent_bytes(self.tc)
        if not any(self._blocks_per_sm(m, n, threads) >= 1 for m, n, threads in TILE_SHAPES):
            m, n, threads = TILE_SHAPES[-1]
            raise SpecError(
                chip.name,
                "tensorcore",
                f"no thread-block tile fits one SM: the smallest ({m}x{n}, {threads} threads) needs "
                f"{threads} threads, {precision.nbytes((m + n) * TILE_K) * PIPELINE_STAGES} B of shared memory "
                f"and {m * n * ACCUMULATOR_BYTES * REGISTER_OVERHEAD:.0f} B of registers",
            )
        self.sm_macs_per_clock = sm_macs_per_clock(self.tc, precision)
        self.data_gradient = data_gradient_fraction(self.tc, efficiency, precision)

    def cost(self, op: Op) -> OpCost:
        """Price one op (matrix ops as tiled kernels, the rest as streaming kernels)."""
        eff = self.eff
        dram_bw = self.rates.dram_bytes_per_s * eff.memory_bandwidth
        if op.gemm is not None:
            choice = self.best_tile(op, dram_bw)
            return finish(
                self.rates,
                op,
                choice.compute_s,
                choice.memory_s,
                eff.op_overhead,
                choice.dram_bytes,
                Unit.MATRIX,
                onchip_bytes=choice.onchip_bytes,
            )
        compute_s = op.flops / (self.rates.vector_flops_per_s * eff.vector)
        dram = op.bytes + statistics_reread_bytes(op, self.onchip_bytes)
        return finish(self.rates, op, compute_s, dram / dram_bw, eff.op_overhead, dram, Unit.VECTOR)

    def best_tile(self, op: Op, dram_bytes_per_s: float) -> TileChoice:
        """The feasible tile shape that finishes first (ties: the earlier shape).

        The choice depends only on the product's shape, its tensors' sizes, and (through split-K and
        the data-gradient efficiency) whether it is a convolution of which pass, so it is memoized:
        networks repeat the same layer shapes many times.
        """
        key = (op.gemm, tuple(t.bytes for t in op.reads), op.bytes_written, op.conv is not None, op.phase)
        found = self._tile_memo.get(key)
        if found is None:
            found = self._best_tile(op, dram_bytes_per_s)
            self._tile_memo[key] = found
        return found

    def _best_tile(self, op: Op, dram_bytes_per_s: float) -> TileChoice:
        # min keeps the first of equal candidates; the constructor checked that the smallest tile fits
        return min(self._candidates(op, dram_bytes_per_s), key=lambda c: max(c.compute_s, c.memory_s))

    def _candidates(self, op: Op, dram_bytes_per_s: float) -> Iterator[TileChoice]:
        """Every feasible (tile shape, split-K) of a matrix op, in :data:`TILE_SHAPES` then :data:`SPLIT_K` order."""
        k = gemm_of(op).k
        for tile_m, tile_n, threads in TILE_SHAPES:
            for split in SPLIT_K:
                if split > 1 and (not may_split_k(op) or k < split * MIN_K_PER_SPLIT):
                    break
                choice = self._tile(op, tile_m, tile_n, threads, split, dram_bytes_per_s)
                if choice is not None:
                    yield choice

    def _blocks_per_sm(self, tile_m: int, tile_n: int, threads: int) -> int:
        """Thread blocks of a tile shape one SM holds at once (:func:`blocks_per_sm`)."""
        return blocks_per_sm(self.tc, self.precision, tile_m, tile_n, threads)

    def _tile(
        self, op: Op, tile_m: int, tile_n: int, threads: int, split: int, dram_bytes_per_s: float
    ) -> TileChoice | None:
        blocks = self._blocks_per_sm(tile_m, tile_n, threads)
        if blocks < 1:
            return None
        tiles, _, compute_s, dram, memory_s = tile_cost(
            SCALAR,
            op,
            (tile_m, tile_n, threads, split),
            (self.tc.sm_count, blocks, self.sm_macs_per_clock, self.chip.clock, self.data_gradient),
            self.eff,
            self.precision.element_bytes,
            dram_bytes_per_s,
        )
        staged = staged_bytes(op, tile_m, tile_n, self.precision)
        return TileChoice(tile_m, tile_n, blocks, tiles, compute_s, dram, memory_s, staged)


def staged_bytes(op: Op, tile_m: int, tile_n: int, precision: Precision) -> int:
    """A and B panel bytes a kernel's tiles of ``tile_m x tile_n`` stage from the L2 into shared memory.

    Each output tile column re-reads all of A, each tile row all of B (edge tiles load only their real
    rows and columns; split-K divides K, not the panels). The same on every GPU: it depends on the op
    and the tile shape only.
    """
    gemm = gemm_of(op)
    m_tiles, n_tiles = ceil_div(gemm.m, tile_m), ceil_div(gemm.n, tile_n)
    return precision.nbytes(gemm.batch * (n_tiles * gemm.m + m_tiles * gemm.n) * gemm.k)


def tile_cost(
    arith: Arith,
    op: Op,
    candidate: tuple[int, int, int, int],
    gpu: tuple[Any, Any, Any, Any, Any],
    efficiency: TensorCoreEfficiency,
    element_bytes: float,
    dram_bytes_per_s: Any,
) -> tuple[int, Any, Any, Any, Any]:
    """One candidate kernel of a matrix op: its tiles, the busiest SM's MACs, compute_s, DRAM bytes, memory_s.

    ``candidate`` is ``(tile_m, tile_n, threads, split)``; ``gpu`` is ``(sm_count, blocks_per_sm,
    sm_macs_per_clock, clock_hz, data_gradient)`` (the last: :func:`data_gradient_fraction`), numbers of
    one GPU (``arith`` :data:`~archsim.models.base.SCALAR`)
    or arrays of many (:mod:`archsim.models.tensorcore_batch`): one formula for both.
    """
    tile_m, tile_n, threads, split = candidate
    sm_count, blocks_per_sm, sm_macs, clock_hz, data_gradient = gpu
    gemm = gemm_of(op)
    m_tiles, n_tiles = ceil_div(gemm.m, tile_m), ceil_div(gemm.n, tile_n)
    tiles = gemm.batch * m_tiles * n_tiles * split
    k_steps = ceil_div(ceil_div(gemm.k, split), TILE_K)
    tiles_on_busiest_sm = ceil_div(tiles, sm_count)
    macs_on_busiest_sm = tiles_on_busiest_sm * tile_m * tile_n * k_steps * TILE_K
    resident_warps = arith.minimum(tiles_on_busiest_sm, blocks_per_sm) * threads // 32
    occupancy = arith.minimum(1.0, resident_warps / WARPS_FOR_FULL_RATE)
    waves = ceil_div(tiles_on_busiest_sm, blocks_per_sm)
    rate = sm_macs * compute_fraction(efficiency, op, data_gradient) * occupancy * clock_hz
    dram = tiled_dram_bytes(arith, op, m_tiles, n_tiles, sm_count * blocks_per_sm, element_bytes)
    if split > 1:
        # partial sums go out in fp32 and are read back by the reduction
        dram = dram + 2 * split * gemm.batch * gemm.m * gemm.n * ACCUMULATOR_BYTES
    compute_s = macs_on_busiest_sm / rate + waves * efficiency.wave_overhead
    return tiles, macs_on_busiest_sm, compute_s, dram, dram / dram_bytes_per_s


def build(
    chip: ChipSpec, efficiency: TensorCoreEfficiency, precision: Precision, footprint_bytes: int
) -> TensorCoreModel:
    """The family's model factory (the whole footprint lives in main memory, so it is not needed)."""
    return TensorCoreModel(chip, efficiency, precision)


register_family(
    FamilyDefinition(
        "tensorcore",
        TensorCoreSection,
        TensorCoreEfficiency,
        Mechanism.KERNEL_LAUNCH,
        build,
        "tensor-core GPUs (NVIDIA, AMD CDNA)",
        batch="archsim.models.tensorcore_batch",
        boost_clock=True,
    )
)
