"""The systolic model's matrix-op cost for many arrays at once, over numpy arrays of configurations.

A sweep of array shapes, SRAM sizes and bandwidths prices the same op on thousands of arrays. Here
each quantity that depends on the array (rows, columns, SRAM halves, arrays, MACs per PE, clock,
bandwidth) is an array with one entry per configuration, and every step of
:meth:`~archsim.models.systolic.SystolicModel.best_split`, :func:`~archsim.models.systolic_map.fold_grid`
and :class:`~archsim.models.systolic_map.TrafficModel` is written as the same arithmetic on those
arrays, in the same order, so that each entry is the float the one-configuration model gives, bit
for bit (IEEE-754 operations on float64 are the same in numpy as in Python). Branches become
:func:`numpy.where` on both sides; the fold classes of a layer (first, middle, last) are always
three, a missing class counting zero folds (adding ``0.0`` changes no sum).

Python divides integers exactly where numpy first converts them to float64, so the two agree only
while every integer stays below 2**53: :func:`exact_integers` says whether they do, and callers
price the configurations that fail it one at a time.

:class:`SystolicBatch` is the family's batch model (:mod:`archsim.models.batch`): matrix ops through
:func:`matrix_costs`, element-wise ops on the vector unit, as :meth:`~archsim.models.systolic.SystolicModel.cost`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from archsim.models.base import Unit, matrix_shape_key, operand_bytes
from archsim.models.batch import BatchCost, batch_rates, finish, floats
from archsim.models.systolic import SystolicSection, matrix_layer
from archsim.models.systolic_map import MatrixLayer, fold_grid, split_stream
from archsim.spec.chip import ChipSpec, Dataflow
from archsim.spec.common import Precision
from archsim.spec.registry import FamilyEfficiency
from archsim.workloads.trace import Op

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
EXACT = 2**53
"""Integers below this convert to float64 exactly."""


@dataclass(frozen=True)
class ArrayBatch:
    """The arrays of many configurations of one dataflow: one entry per configuration.

    SRAM sizes are in words of the run's precision (``sram // element_bytes``), as in
    :class:`~archsim.models.systolic_map.ArrayConfig`.
    """

    dataflow: Dataflow
    rows: Ints
    cols: Ints
    ifmap_sram_words: Ints
    filter_sram_words: Ints
    ofmap_sram_words: Ints
    arrays: Ints
    """``cores * arrays_per_core``."""
    fed_together: Ints
    """``arrays_per_core``: arrays fed from one memory (``ArrayConfig.fed_together``)."""
    macs_per_pe: Ints
    clock_hz: Floats


@dataclass(frozen=True)
class MatrixCosts:
    """The chosen split of one matrix op on every configuration (see :class:`~archsim.models.systolic.SplitChoice`)."""

    compute_s: Floats
    fill_s: Floats
    dram_bytes: Ints
    memory_s: Floats
    largest_integer: int
    """The largest integer an exact price needed (compare with :data:`EXACT`)."""


def _cdiv(a: Ints | int, b: Ints | int) -> Ints:
    return np.asarray(-(-np.asarray(a) // np.asarray(b)), dtype=np.int64)


class _Traffic:
    """:class:`~archsim.models.systolic_map.TrafficModel` of one layer on every configuration."""

    def __init__(self, layer: MatrixLayer, batch: ArrayBatch, row_folds: Ints, col_folds: Ints, sr: int, sc: int):
        self.layer, self.batch = layer, batch
        self.sr, self.sc = sr, sc
        self.row_folds, self.col_folds = row_folds, col_folds
        self.half_ifmap = batch.ifmap_sram_words // 2
        self.half_filter = batch.filter_sram_words // 2
        self.half_ofmap = batch.ofmap_sram_words // 2
        self.ifmap_unique = max(1, min(layer.ifmap_words, layer.m * layer.k))
        run = batch.rows if batch.dataflow is Dataflow.OUTPUT_STATIONARY else batch.cols
        runs = _cdiv(layer.m, run)
        last_run = layer.m - (runs - 1) * run
        full_run = np.minimum(run, layer.m)
        self.footprint_full = self._footprint(full_run)
        self.footprint_sum = (runs - 1) * self.footprint_full + self._footprint(last_run)
        self.halo_fits = 2 * self.footprint_full <= self.half_ifmap
        self.footprint_fits = self.footprint_full <= self.half_ifmap
        self.ifmap_resident = self.ifmap_unique <= self.half_ifmap
        self.filter_resident = layer.filter_words <= self.half_filter
        self.largest = max(int(np.max(self.footprint_sum)), int(np.max(self.footprint_full)) * self.ifmap_unique)

    def _footprint(self, pixels: Ints) -> Ints:
        im2col = pixels * self.layer.k
        conv = self.layer.conv
        if conv is None:
            return np.asarray(im2col, dtype=np.int64)
        out_rows = np.minimum(conv.images * conv.out_h, (pixels + conv.out_w - 2) // conv.out_w + 1)
        cols = np.minimum(conv.in_w, (pixels - 1) * conv.stride + conv.filter_w)
        one_row = conv.filter_h * cols * conv.channels
        images = np.minimum(conv.images, _cdiv(out_rows, conv.out_h) + 1)
        in_rows = np.minimum(images * conv.in_h, (out_rows - 1) * conv.stride + conv.filter_h)
        several = in_rows * conv.in_w * conv.channels
        return np.asarray(np.minimum(im2col, np.where(out_rows == 1, one_row, several)), dtype=np.int64)

    def _run_input(self, pixels: Ints) -> Floats:
        footprint = self._footprint(pixels)
        halo = footprint * self.ifmap_unique / self.footprint_sum
        shared = footprint * np.maximum(1.0, self.ifmap_unique / self.footprint_sum)
        streamed = np.maximum((pixels * self.layer.k).astype(np.float64), shared)
        return np.asarray(np.where(self.halo_fits, halo, np.where(self.footprint_fits, shared, streamed)))

    def _partial_sums(
        self, block: Ints, first_row: npt.NDArray[np.bool_], last_row: npt.NDArray[np.bool_]
    ) -> tuple[Floats, Floats]:
        fits = block <= self.half_ofmap
        blockf = block.astype(np.float64)
        reads = np.where(fits | first_row, 0.0, blockf)
        writes = np.where(fits, np.where(last_row, blockf, 0.0), blockf)
        return reads, writes

    def fold(self, row_fold: Ints, col_fold: Ints) -> tuple[Floats, Floats, Floats, Floats]:
        """Words of fold ``(row_fold, col_fold)`` of each configuration (ifmap, filter, psum reads, writes)."""
        b, layer = self.batch, self.layer
        rows = np.minimum(b.rows, self.sr - row_fold * b.rows)
        cols = np.minimum(b.cols, self.sc - col_fold * b.cols)
        first_row, last_row = row_fold == 0, row_fold == self.row_folds - 1
        later_col = col_fold > 0
        zero = np.zeros(rows.shape)
        if b.dataflow is Dataflow.OUTPUT_STATIONARY:
            ifmap = np.where(later_col & self.ifmap_resident, 0.0, self._run_input(rows))
            block = (layer.k * cols).astype(np.float64)
            weights = np.where(first_row | (block > self.half_filter), block, 0.0)
            return ifmap, weights, zero, (rows * cols).astype(np.float64)
        if b.dataflow is Dataflow.WEIGHT_STATIONARY:
            resident = self.ifmap_resident
            ifmap = np.where(
                later_col & resident,
                0.0,
                np.where(
                    resident,
                    self.ifmap_unique * rows / layer.k,
                    np.minimum(layer.m * rows, self.ifmap_unique).astype(np.float64),
                ),
            )
            reads, writes = self._partial_sums(layer.m * cols, first_row, last_row)
            return ifmap, (rows * cols).astype(np.float64), reads, writes
        ifmap = self._run_input(cols) * rows / layer.k
        weights = np.where(later_col & self.filter_resident, 0.0, (rows * layer.n).astype(np.float64))
        reads, writes = self._partial_sums(cols * layer.n, first_row, last_row)
        return ifmap, weights, reads, writes

    def total(self) -> tuple[Floats, Floats, Floats, Floats]:
        """Words of the whole layer, summed over fold classes in the one-configuration order."""
        totals = [np.zeros(self.row_folds.shape) for _ in range(4)]
        for row_fold, row_count in _classes(self.row_folds):
            for col_fold, col_count in _classes(self.col_folds):
                count = row_count * col_count
                for total, words in zip(totals, self.fold(row_fold, col_fold), strict=True):
                    total += words * count
        # the per-pass operand read once per group of arrays fed together, as TrafficModel._shared
        col_folds, fed = self.col_folds, self.batch.fed_together
        share = np.where((fed > 1) & (col_folds > 1), _cdiv(col_folds, fed) / col_folds, 1.0)
        if self.batch.dataflow is Dataflow.INPUT_STATIONARY:
            totals[1] = np.where(self.filter_resident, totals[1], totals[1] * share)
        else:
            totals[0] = np.where(self.ifmap_resident, totals[0], totals[0] * share)
        return totals[0], totals[1], totals[2], totals[3]


def _classes(folds: Ints) -> list[tuple[Ints, Ints]]:
    """The first, a middle and the last fold, with how many each stands for (0 where a class is missing)."""
    one = np.ones_like(folds)
    return [
        (np.zeros_like(folds), one),
        (one, np.where(folds >= 3, folds - 2, 0)),
        (folds - 1, np.where(folds >= 2, 1, 0)),
    ]


def matrix_costs(
    op: Op, batch: ArrayBatch, element_bytes: float, compute: float, dram_bytes_per_s: Floats
) -> MatrixCosts:
    """The split of ``op``'s streamed dimension that finishes first on each configuration, and its cost.

    ``compute`` is the family's compute efficiency and ``dram_bytes_per_s`` the reachable bandwidth
    (published times the memory efficiency) of each configuration.
    """
    g = op.gemm
    assert g is not None
    layer = matrix_layer(op, element_bytes)
    extras = operand_bytes(op, element_bytes)[2] if len(op.reads) >= 2 else 0
    dataflow = batch.dataflow
    stream = fold_grid(layer, 1, 1, dataflow).t  # T does not depend on the array
    seconds_per_cycle = 1 / batch.macs_per_pe / compute / batch.clock_hz
    shape = batch.rows.shape
    best_compute, best_fill = np.zeros(shape), np.zeros(shape)
    best_memory, best_dram = np.zeros(shape), np.zeros(shape, dtype=np.int64)
    largest = 0
    parts = 1
    while True:
        active = np.ones(shape, dtype=bool) if parts == 1 else (parts <= stream) & (_cdiv(stream, parts) >= batch.rows)
        if not active.any():
            break
        piece = split_stream(layer, dataflow, parts)
        grid = fold_grid(piece, 1, 1, dataflow)
        sr, sc, t = grid.sr, grid.sc, grid.t
        row_folds, col_folds = _cdiv(sr, batch.rows), _cdiv(sc, batch.cols)
        if dataflow is Dataflow.OUTPUT_STATIONARY:
            fold_cycles = t + (batch.rows + batch.cols - 2)
        else:
            fold_cycles = t + (2 * batch.rows + batch.cols - 2)
        folds = _cdiv(g.batch * parts * (row_folds * col_folds), batch.arrays)
        cycles = folds * fold_cycles
        traffic = _Traffic(piece, batch, row_folds, col_folds, sr, sc)
        ifmap, weights, reads, writes = traffic.total()
        moved = ifmap + weights + reads + writes
        dram = np.rint(moved * element_bytes).astype(np.int64) * g.batch * parts + extras
        compute_s = cycles * seconds_per_cycle
        fill_s = folds * (fold_cycles - t) * seconds_per_cycle
        memory_s = dram / dram_bytes_per_s
        largest = max(largest, traffic.largest, int(np.max(cycles)), int(np.max(dram)))
        if parts == 1:
            better = active
        else:
            better = active & (np.maximum(compute_s, memory_s) < np.maximum(best_compute, best_memory))
        best_compute = np.where(better, compute_s, best_compute)
        best_fill = np.where(better, fill_s, best_fill)
        best_memory = np.where(better, memory_s, best_memory)
        best_dram = np.where(better, dram, best_dram)
        if dataflow is Dataflow.OUTPUT_STATIONARY:
            break
        parts *= 2
    return MatrixCosts(best_compute, best_fill, best_dram, best_memory, largest)


def exact_integers(costs: MatrixCosts) -> bool:
    """True when every integer of the pricing converts to float64 exactly (see the module docstring)."""
    return costs.largest_integer < EXACT


def group_key(chip: ChipSpec) -> Dataflow:
    """Configurations of one dataflow are priced together (:class:`ArrayBatch` holds one)."""
    return chip.section_of(SystolicSection).dataflow


class SystolicBatch:
    """:class:`~archsim.models.systolic.SystolicModel` of many arrays of one dataflow at one precision."""

    separate_units = True

    def __init__(self, chips: Sequence[ChipSpec], efficiency: FamilyEfficiency, precision: Precision) -> None:
        self.eff, self.precision = efficiency, precision
        words = precision.elements_in
        sections = [c.section_of(SystolicSection) for c in chips]

        def ints(values: list[int]) -> npt.NDArray[np.int64]:
            return np.array(values, dtype=np.int64)

        self.batch = ArrayBatch(
            dataflow=sections[0].dataflow,
            rows=ints([s.array_rows for s in sections]),
            cols=ints([s.array_cols for s in sections]),
            ifmap_sram_words=ints([words(s.ifmap_sram) for s in sections]),
            filter_sram_words=ints([words(s.filter_sram) for s in sections]),
            ofmap_sram_words=ints([words(s.ofmap_sram) for s in sections]),
            arrays=ints([s.cores * s.arrays_per_core for s in sections]),
            fed_together=ints([s.arrays_per_core for s in sections]),
            macs_per_pe=ints([s.mac_per_pe_per_clock[precision] for s in sections]),
            clock_hz=floats([c.clock for c in chips]),
        )
        pairs = zip(sections, chips, strict=True)
        vector = floats([s.vector_ops_per_clock.get(precision, 0) * s.cores * c.clock for s, c in pairs])
        self.rates = batch_rates(chips, precision, vector)
        self.memo: dict[object, MatrixCosts] = {}

    def cost(self, op: Op) -> BatchCost | None:
        """Price one op on the arrays (matrix) or the vector unit; None past :data:`EXACT`."""
        eff, rates = self.eff, self.rates
        dram_bw = rates.dram_bytes_per_s * eff.memory_bandwidth
        if op.gemm is not None:
            # what matrix_costs reads of the op: networks repeat the same layer shapes many times
            key = matrix_shape_key(op)
            if key not in self.memo:
                self.memo[key] = matrix_costs(op, self.batch, self.precision.element_bytes, eff.compute, dram_bw)
            costs = self.memo[key]
            if not exact_integers(costs):
                return None
            return finish(
                rates, op, costs.compute_s, costs.memory_s, eff.op_overhead, costs.dram_bytes, Unit.MATRIX, costs.fill_s
            )
        compute_s = op.flops / (rates.vector_flops_per_s * eff.vector)
        dram = np.full(dram_bw.shape, op.bytes, dtype=np.int64)
        return finish(rates, op, compute_s, op.bytes / dram_bw, eff.op_overhead, dram, Unit.VECTOR)


def build_batch(
    chips: Sequence[ChipSpec], efficiency: FamilyEfficiency, precision: Precision, footprint_bytes: int
) -> SystolicBatch:
    """The family's batch-model factory (the footprint lives in main memory, so it is not needed)."""
    return SystolicBatch(chips, efficiency, precision)
