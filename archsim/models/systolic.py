"""Cost model of TPU-style systolic arrays (first-order fold model).

A matrix product maps onto ``arrays`` arrays of ``rows x cols`` processing elements. The stationary
operand is cut into folds of one array's size; each fold streams the moving operand through the
array and pays ``rows + cols - 1`` cycles of fill and drain:

* weight-stationary: folds ``ceil(K/rows) * ceil(N/cols)``, each streaming ``M`` rows;
* output-stationary: folds ``ceil(M/rows) * ceil(N/cols)``, each streaming ``K``;
* input-stationary: folds ``ceil(K/rows) * ceil(M/cols)``, each streaming ``N``.

Folds are spread over the arrays. The stationary operand is read from main memory once, the moving
one once per fold of the stationary one (:func:`stationary_tiles`); compute and main-memory traffic overlap
(double-buffered SRAMs). Element-wise ops run on the vector unit.
"""

from __future__ import annotations

from archsim.models.base import OpCost, Unit, ceil_div, chip_rates, finish
from archsim.models.memory import matrix_dram_bytes
from archsim.spec.chip import ChipSpec, Dataflow, Efficiency, SystolicSection
from archsim.spec.common import Precision
from archsim.workloads.trace import Gemm, Op


def fold_cycles(gemm: Gemm, rows: int, cols: int, arrays: int, dataflow: Dataflow) -> int:
    """Cycles of a matrix product on ``arrays`` arrays of ``rows x cols``, folds spread evenly."""
    if dataflow is Dataflow.WEIGHT_STATIONARY:
        folds, stream = ceil_div(gemm.k, rows) * ceil_div(gemm.n, cols), gemm.m
    elif dataflow is Dataflow.OUTPUT_STATIONARY:
        folds, stream = ceil_div(gemm.m, rows) * ceil_div(gemm.n, cols), gemm.k
    else:
        folds, stream = ceil_div(gemm.k, rows) * ceil_div(gemm.m, cols), gemm.n
    return ceil_div(gemm.batch * folds, arrays) * (stream + rows + cols - 1)


def stationary_tiles(gemm: Gemm, rows: int, cols: int, dataflow: Dataflow) -> tuple[int, int]:
    """Output tiles ``(m_tiles, n_tiles)`` whose operand panels are re-read.

    The stationary operand is read once, the moving one once per fold of the stationary one.
    """
    if dataflow is Dataflow.WEIGHT_STATIONARY:
        return 1, ceil_div(gemm.n, cols)
    if dataflow is Dataflow.OUTPUT_STATIONARY:
        return ceil_div(gemm.m, rows), ceil_div(gemm.n, cols)
    return ceil_div(gemm.m, cols), 1


class SystolicModel:
    """Fold model of one systolic-array chip at one precision."""

    separate_units = True

    def __init__(self, chip: ChipSpec, efficiency: Efficiency, precision: Precision) -> None:
        assert chip.systolic is not None
        self.chip = chip
        self.precision = precision
        self.sys: SystolicSection = chip.systolic
        vector = self.sys.vector_ops_per_clock.get(precision, 0) * self.sys.cores * chip.clock
        self.rates = chip_rates(chip, efficiency, precision, vector)
        self.arrays = self.sys.cores * self.sys.arrays_per_core

    def cost(self, op: Op) -> OpCost:
        """Price one op on the arrays (matrix) or the vector unit."""
        eff = self.rates.efficiency
        assert eff.compute
        assert eff.vector
        assert eff.memory_bandwidth
        assert eff.op_overhead is not None
        dram_bw = self.rates.dram_bytes_per_s * eff.memory_bandwidth
        if op.gemm is not None:
            s = self.sys
            macs_per_pe = s.mac_per_pe_per_clock[self.precision]
            cycles = fold_cycles(op.gemm, s.array_rows, s.array_cols, self.arrays, s.dataflow)
            compute_s = cycles / macs_per_pe / eff.compute / self.chip.clock
            m_tiles, n_tiles = stationary_tiles(op.gemm, s.array_rows, s.array_cols, s.dataflow)
            dram = matrix_dram_bytes(op, m_tiles, n_tiles, self.arrays)
            return finish(self.rates, op, compute_s, dram / dram_bw, eff.op_overhead, dram, Unit.MATRIX)
        compute_s = op.flops / (self.rates.vector_flops_per_s * eff.vector)
        return finish(self.rates, op, compute_s, op.bytes / dram_bw, eff.op_overhead, op.bytes, Unit.VECTOR)
