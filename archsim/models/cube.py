"""Cost model of Huawei Ascend Da Vinci chips (Ascend 910).

Matrix products are cut into fractals of the cube's shape (16x16x16 at fp16); the output fractals
are spread over the AI cores and each core runs ``ceil(K / k_fractal)`` cube operations per output
fractal, one per clock. Memory-transfer engines move the next tiles while the cube computes, so
compute and main-memory traffic overlap; each core's output tile of ``CORE_TILE`` squared shares
operand panels with the other cores' tiles as in :mod:`archsim.models.memory`. Element-wise ops run
on the vector unit of each core, which is a separate resource from the cube, so the engine can
overlap them with independent matrix ops.
"""

from __future__ import annotations

from archsim.models.base import OpCost, Unit, ceil_div, chip_rates, finish
from archsim.models.memory import matrix_dram_bytes
from archsim.spec.chip import ChipSpec, CubeSection, Efficiency
from archsim.spec.common import Precision, parse_shape
from archsim.workloads.trace import Op

CORE_TILE = 128
"""Output tile of one AI core (rows and columns) held in L0C while operand slabs stream through L1."""


class CubeModel:
    """Fractal-tiling model of one Da Vinci chip at one precision."""

    separate_units = True

    def __init__(self, chip: ChipSpec, efficiency: Efficiency, precision: Precision) -> None:
        assert chip.cube is not None
        self.chip = chip
        self.precision = precision
        self.cube: CubeSection = chip.cube
        vector = self.cube.vector_ops_per_clock.get(precision, 0) * self.cube.ai_cores * chip.clock
        self.rates = chip_rates(chip, efficiency, precision, vector)
        self.frac_m, self.frac_n, _ = parse_shape(self.cube.cube_shape, 3)
        # the cube does frac_m x frac_n outputs per clock; its depth in K follows from its MAC rate
        self.frac_k = max(1, self.cube.cube_mac_per_clock[precision] // (self.frac_m * self.frac_n))

    def cost(self, op: Op) -> OpCost:
        """Price one op on the cube (matrix) or the vector unit."""
        eff = self.rates.efficiency
        assert eff.compute
        assert eff.vector
        assert eff.memory_bandwidth
        assert eff.op_overhead is not None
        dram_bw = self.rates.dram_bytes_per_s * eff.memory_bandwidth
        if op.gemm is not None:
            g = op.gemm
            fractals = g.batch * ceil_div(g.m, self.frac_m) * ceil_div(g.n, self.frac_n)
            per_core = ceil_div(fractals, self.cube.ai_cores) * ceil_div(g.k, self.frac_k)
            compute_s = per_core / eff.compute / self.chip.clock
            dram = matrix_dram_bytes(op, ceil_div(g.m, CORE_TILE), ceil_div(g.n, CORE_TILE), self.cube.ai_cores)
            return finish(self.rates, op, compute_s, dram / dram_bw, eff.op_overhead, dram, Unit.MATRIX)
        compute_s = op.flops / (self.rates.vector_flops_per_s * eff.vector)
        return finish(self.rates, op, compute_s, op.bytes / dram_bw, eff.op_overhead, op.bytes, Unit.VECTOR)
