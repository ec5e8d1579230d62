"""Cost model of TPU-style systolic arrays (TPU v2/v3/v4 and any ``rows x cols`` array).

A matrix product (a convolution through its implicit-GEMM view) is cut into folds of one array's
size in the chip's dataflow, with SCALE-Sim 3.0's fold timing (:mod:`archsim.models.systolic_map`):
``T + rows + cols - 2`` cycles per output-stationary fold, ``T + 2 rows + cols - 2`` per weight- or
input-stationary fold, where ``T`` is the streamed dimension. Folds of all products of a batch are
spread over the chip's ``cores * arrays_per_core`` arrays, so the busiest array runs
``ceil(folds / arrays)`` of them; a processing element does ``mac_per_pe_per_clock`` MACs per clock.

Main-memory traffic follows the reuse model of :mod:`archsim.models.systolic_map` with the chip's
per-array ifmap/filter/ofmap SRAMs (double-buffered halves): an operand is re-read per fold or per
pass only when its reused part does not fit, a convolution's input is read through the footprint
of its output tiles, and partial sums spill only when they do not fit. Compute and main-memory
traffic overlap (the SRAMs are double-buffered), so an op takes the longer of the two; its
per-fold stalls are what the SCALE-Sim path (:mod:`archsim.models.systolic_layer`) schedules fold by
fold. A weight- or input-stationary product whose partial sums do not fit the ofmap SRAM may be cut
along its streamed dimension (:func:`~archsim.models.systolic_map.split_stream`), as a compiler
tiles it: each slice pays its own fill and drain and re-reads the stationary operand, and the cut
that finishes first is chosen. Element-wise ops run on the vector unit. A read the chip's on-chip
cache serves (``memory.cache``, TPU v4's CMEM; :mod:`archsim.workloads.cache`) moves no main-memory
byte: a cached operand is read from the cache every time the tiling re-reads it, and those bytes are
the op's ``onchip_bytes`` (priced at the cache's SRAM energy). This module imports neither numpy nor
numba.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from archsim.models.base import OpCost, Unit, ceil_div, chip_rates, finish, gemm_of, matrix_shape_key, operand_bytes
from archsim.models.systolic_map import ArrayConfig, MatrixLayer, dram_words, fold_grid, forward_window, split_stream
from archsim.spec.chip import ChipSpec, Dataflow
from archsim.spec.common import Bytes, Count, Precision
from archsim.spec.registry import FamilyDefinition, FamilyEfficiency, FamilySection, Mechanism, register_family
from archsim.workloads.trace import Op


class SystolicSection(FamilySection):
    """A TPU-style chip: cores of systolic arrays (MXUs) fed from ifmap/filter/ofmap SRAM."""

    peak_counts = ("cores", "arrays_per_core", "array_rows", "array_cols")

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

    def macs_per_clock(self, precision: Precision) -> int | None:
        """MACs per clock of every PE of every array at ``precision`` (None: the PEs do not run it)."""
        per_pe = self.mac_per_pe_per_clock.get(precision)
        if per_pe is None:
            return None
        return self.cores * self.arrays_per_core * self.array_rows * self.array_cols * per_pe

    def onchip_bytes(self) -> int:
        """The operand SRAMs of every array."""
        return self.cores * self.arrays_per_core * (self.ifmap_sram + self.filter_sram + self.ofmap_sram)

    def latches_partial_sums(self) -> bool:
        """Weight- and input-stationary arrays pass partial sums between PEs."""
        return self.dataflow is not Dataflow.OUTPUT_STATIONARY


def matrix_layer(op: Op, element_bytes: float) -> MatrixLayer:
    """One product of a matrix op's batch, with the unique words of its operands.

    A forward convolution keeps its input geometry, so that its input is read through footprints
    rather than as its im2col expansion.
    """
    g = gemm_of(op)
    if len(op.reads) < 2:
        layer = MatrixLayer.gemm(g.m, g.n, g.k)
    else:
        a, b, _ = operand_bytes(op, element_bytes)
        per_product = g.batch * element_bytes
        layer = MatrixLayer(g.m, g.n, g.k, max(1, int(a // per_product)), max(1, int(b // per_product)), g.m * g.n)
    window = forward_window(op)
    if window is not None:
        layer = MatrixLayer(layer.m, layer.n, layer.k, layer.ifmap_words, layer.filter_words, layer.ofmap_words, window)
    return layer


@dataclass(frozen=True, slots=True)
class SplitChoice:
    """How a matrix op runs: its streamed dimension cut into ``parts`` slices, and what that costs."""

    parts: int
    cycles: int
    """Cycles of the busiest array."""
    compute_s: float
    fill_s: float
    """The part of ``compute_s`` spent filling and draining the array between folds."""
    dram_bytes: int
    memory_s: float
    cached_bytes: int = 0
    """Operand bytes the chip's on-chip cache serves instead of main memory."""

    @property
    def time_s(self) -> float:
        """Time with compute and main-memory traffic overlapped."""
        return max(self.compute_s, self.memory_s)


class SystolicModel:
    """Fold model of one systolic-array chip at one precision."""

    separate_units = True

    def __init__(self, chip: ChipSpec, efficiency: FamilyEfficiency, precision: Precision) -> None:
        self.chip = chip
        self.precision = precision
        self.sys: SystolicSection = chip.section_of(SystolicSection)
        self.eff = efficiency
        vector = self.sys.vector_ops_per_clock.get(precision, 0) * self.sys.cores * chip.clock
        self.rates = chip_rates(chip, efficiency, precision, vector)
        self.arrays = self.sys.cores * self.sys.arrays_per_core
        s, words = self.sys, precision.elements_in
        sizes = words(s.ifmap_sram), words(s.filter_sram), words(s.ofmap_sram)
        # the arrays of one core are fed from its one memory (module docstring of systolic_map)
        self.array = ArrayConfig(s.array_rows, s.array_cols, s.dataflow, *sizes, s.arrays_per_core)
        self._splits_chosen: dict[object, SplitChoice] = {}
        """:meth:`best_split`'s choices by what it reads of an op and the bandwidth."""

    def best_split(self, op: Op, dram_bytes_per_s: float) -> SplitChoice:
        """The cut of the streamed dimension into slices that finishes first (ties: fewer slices).

        Candidates are 1, 2, 4, ... slices while a slice still streams at least ``rows`` operands;
        the candidates do not depend on the SRAM sizes, so more SRAM is never slower.
        """
        # what the candidates read of the op (networks repeat their layer shapes), as SystolicBatch keys them
        key = (matrix_shape_key(op), dram_bytes_per_s)
        choice = self._splits_chosen.get(key)
        if choice is None:
            # min keeps the first of equal candidates: the fewer slices
            choice = self._splits_chosen[key] = min(self._splits(op, dram_bytes_per_s), key=lambda c: c.time_s)
        return choice

    def _splits(self, op: Op, dram_bytes_per_s: float) -> Iterator[SplitChoice]:
        """The candidate cuts of :meth:`best_split`, one slice first."""
        batch = gemm_of(op).batch
        e = self.precision.element_bytes
        eff = self.eff
        layer = matrix_layer(op, e)
        reads = op.reads
        extras = operand_bytes(op, e)[2] if len(reads) >= 2 else 0
        cached_extras = sum(t.bytes for t in reads[2:] if t.cached)
        # an operand the on-chip cache holds is read from it, every re-read included
        ifmap_cached = len(reads) >= 2 and reads[0].cached
        filter_cached = len(reads) >= 2 and reads[1].cached
        macs_per_pe = self.sys.mac_per_pe_per_clock[self.precision]
        stream = fold_grid(layer, self.array.rows, self.array.cols, self.array.dataflow).t
        parts = 1
        while parts == 1 or (parts <= stream and ceil_div(stream, parts) >= self.array.rows):  # rows may be 1
            piece = split_stream(layer, self.array.dataflow, parts)
            grid = fold_grid(piece, self.array.rows, self.array.cols, self.array.dataflow)
            folds = ceil_div(batch * parts * grid.folds, self.arrays)
            cycles = folds * grid.fold_cycles
            words = dram_words(piece, self.array)
            on_chip = (words.ifmap_reads if ifmap_cached else 0) + (words.filter_reads if filter_cached else 0)
            moved = words.ifmap_reads + words.filter_reads + words.ofmap_reads + words.ofmap_writes - on_chip
            dram = round(moved * e) * batch * parts + extras - cached_extras
            cached = round(on_chip * e) * batch * parts + cached_extras
            seconds_per_cycle = 1 / macs_per_pe / eff.compute / self.chip.clock
            fill_s = folds * (grid.fold_cycles - grid.t) * seconds_per_cycle
            compute_s = cycles * seconds_per_cycle
            yield SplitChoice(parts, cycles, compute_s, fill_s, dram, dram / dram_bytes_per_s, cached)
            if self.array.dataflow is Dataflow.OUTPUT_STATIONARY:
                break
            parts *= 2

    def cost(self, op: Op) -> OpCost:
        """Price one op on the arrays (matrix) or the vector unit."""
        eff = self.eff
        dram_bw = self.rates.dram_bytes_per_s * eff.memory_bandwidth
        if op.gemm is not None:
            choice = self.best_split(op, dram_bw)
            return finish(
                self.rates,
                op,
                choice.compute_s,
                choice.memory_s,
                eff.op_overhead,
                choice.dram_bytes,
                Unit.MATRIX,
                choice.fill_s,
                choice.cached_bytes,
            )
        compute_s = op.flops / (self.rates.vector_flops_per_s * eff.vector)
        cached = op.cached_bytes
        dram = op.bytes - cached
        return finish(self.rates, op, compute_s, dram / dram_bw, eff.op_overhead, dram, Unit.VECTOR, 0.0, cached)


def build(chip: ChipSpec, efficiency: FamilyEfficiency, precision: Precision, footprint_bytes: int) -> SystolicModel:
    """The family's model factory (the whole footprint lives in main memory, so it is not needed)."""
    return SystolicModel(chip, efficiency, precision)


register_family(
    FamilyDefinition(
        "systolic",
        SystolicSection,
        FamilyEfficiency,
        Mechanism.PROGRAM_LAUNCH,
        build,
        "TPU-style systolic arrays",
        batch="archsim.models.systolic_batch",
        reads_cache=True,
    )
)
