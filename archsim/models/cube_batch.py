"""The Da Vinci cube model over many chips at once: :class:`~archsim.models.cube.CubeModel` on arrays.

A sweep of AI-core counts, buffer sizes, clocks or HBM bandwidth prices the same op on many variants
of one Ascend chip. Which core tiles fit a variant's L0A/L0B/L0C/L1 is decided per variant by the
scalar model's own :func:`~archsim.models.cube.tile_fits`; the cost of each tile is the scalar
model's own formula, :func:`~archsim.models.cube.tile_cost`, called on arrays with one entry per
variant, and the choice of the one that finishes first (ties: less cube time, then the larger tile)
is the same comparison in the same order, so each entry is the float the one-chip model gives, bit
for bit (see :mod:`archsim.models.batch`). Variants priced together share their cube's ``MxN``
fractal (:func:`group_key`); a variant on which no tile fits gets NaN and runs on the event path.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from archsim.models.base import Unit
from archsim.models.batch import (
    ARRAYS,
    EXACT,
    BatchCost,
    Floats,
    Ints,
    batch_rates,
    finish,
    floats,
    ints,
    largest,
)
from archsim.models.cube import TILE_SIDES, CubeSection, tile_cost, tile_fits
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Precision, parse_shape
from archsim.spec.registry import FamilyEfficiency
from archsim.workloads.trace import Op


def group_key(chip: ChipSpec) -> tuple[int, ...]:
    """Variants priced together share the cube's fractal (which tile sides are whole fractals)."""
    return parse_shape(chip.section_of(CubeSection).cube_shape, 3)


class CubeBatch:
    """:class:`~archsim.models.cube.CubeModel` of many variants of one Ascend chip at one precision."""

    separate_units = True

    def __init__(self, chips: Sequence[ChipSpec], efficiency: FamilyEfficiency, precision: Precision) -> None:
        self.eff, self.precision = efficiency, precision
        cubes = [c.section_of(CubeSection) for c in chips]
        pairs = zip(cubes, chips, strict=True)
        vector = floats([cube.vector_ops_per_clock.get(precision, 0) * cube.ai_cores * c.clock for cube, c in pairs])
        self.rates = batch_rates(chips, precision, vector)
        self.frac_m, self.frac_n, _ = group_key(chips[0])
        frac_k = [max(1, cube.cube_mac_per_clock[precision] // (self.frac_m * self.frac_n)) for cube in cubes]
        self.frac_k = ints(frac_k)
        self.ai_cores = ints([cube.ai_cores for cube in cubes])
        e = precision.element_bytes
        self.fits = {
            (m, n): np.array([tile_fits(cube, m, n, k, e) for cube, k in zip(cubes, frac_k, strict=True)])
            for m in TILE_SIDES
            for n in TILE_SIDES
        }
        self.memo: dict[object, tuple[Floats, Floats, Ints] | None] = {}

    def cost(self, op: Op) -> BatchCost | None:
        """Price one op on the cube (matrix) or the vector unit; None past :data:`EXACT`."""
        eff, rates = self.eff, self.rates
        dram_bw = rates.dram_bytes_per_s * eff.memory_bandwidth
        if op.gemm is not None:
            key = (op.gemm, tuple(t.bytes for t in op.reads), op.bytes_written)
            if key not in self.memo:
                self.memo[key] = self._best_tile(op, dram_bw)
            found = self.memo[key]
            if found is None:
                return None
            compute_s, memory_s, dram = found
            return finish(rates, op, compute_s, memory_s, eff.op_overhead, dram, Unit.MATRIX)
        compute_s = op.flops / (rates.vector_flops_per_s * eff.vector)
        dram = np.full(dram_bw.shape, op.bytes, dtype=np.int64)
        return finish(rates, op, compute_s, op.bytes / dram_bw, eff.op_overhead, dram, Unit.VECTOR)

    def _best_tile(self, op: Op, dram_bytes_per_s: Floats) -> tuple[Floats, Floats, Ints] | None:
        """``CubeModel.best_tile`` on every variant: (compute_s, memory_s, dram_bytes) of the chosen tile."""
        shape = self.ai_cores.shape
        best_time, best_compute = np.full(shape, np.nan), np.full(shape, np.nan)
        best_memory, best_dram = np.full(shape, np.nan), np.zeros(shape, dtype=np.int64)
        chosen = np.zeros(shape, dtype=bool)
        for tile_m in TILE_SIDES[::-1]:
            for tile_n in TILE_SIDES[::-1]:
                if tile_m % self.frac_m or tile_n % self.frac_n:
                    continue
                tiles, cycles, dram, compute_s, memory_s = tile_cost(
                    ARRAYS,
                    op,
                    (tile_m, tile_n),
                    (self.frac_m, self.frac_n, self.frac_k),
                    (self.ai_cores, self.rates.clock_hz),
                    self.eff.compute,
                    self.precision.element_bytes,
                    dram_bytes_per_s,
                )
                dram = np.broadcast_to(dram, shape)
                if max(tiles, largest(cycles, dram)) >= EXACT:
                    return None
                time_s = np.maximum(compute_s, memory_s)
                # (time, compute) < (best time, best compute), as tuples compare
                shorter = (time_s < best_time) | ((time_s == best_time) & (compute_s < best_compute))
                better = self.fits[(tile_m, tile_n)] & (~chosen | shorter)
                chosen |= better
                best_time = np.where(better, time_s, best_time)
                best_compute = np.where(better, compute_s, best_compute)
                best_memory = np.where(better, memory_s, best_memory)
                best_dram = np.where(better, dram, best_dram)
        return best_compute, best_memory, best_dram


def build_batch(
    chips: Sequence[ChipSpec], efficiency: FamilyEfficiency, precision: Precision, footprint_bytes: int
) -> CubeBatch:
    """The family's batch-model factory (the footprint lives in main memory, so it is not needed)."""
    return CubeBatch(chips, efficiency, precision)
