"""The tensor-core model over many GPUs at once: :class:`~archsim.models.tensorcore.TensorCoreModel` on arrays.

A sweep of SM counts, clocks, shared memory or HBM bandwidth prices the same op on thousands of
variants of one GPU. What depends on a variant alone (its blocks per SM for each tile shape, its SM
MAC rate, CUDA-core rate and persistent on-chip bytes) is computed per variant by the scalar
model's own functions; the cost of each candidate kernel (tile shape and split-K factor) is the scalar
model's own formula, :func:`~archsim.models.tensorcore.tile_cost`, called on arrays with one entry per
variant, and the choice of the candidate that finishes first is the same comparison in the same
order, so that each entry is the float the one-GPU model gives, bit for bit (see
:mod:`archsim.models.batch`).

A candidate infeasible on a variant (no block of its shape fits an SM) is skipped there, as the
scalar model skips it; a variant on which none fits gets NaN, and the caller runs it on the event
path, where the model refuses the chip in its own words. The tile choice of an op is memoized by the
same key as :meth:`~archsim.models.tensorcore.TensorCoreModel.best_tile`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from archsim.models.base import Unit, gemm_of
from archsim.models.batch import ARRAYS, EXACT, BatchCost, Floats, Ints, batch_rates, finish, floats, ints, largest
from archsim.models.tensorcore import (
    MIN_K_PER_SPLIT,
    SPLIT_K,
    TILE_SHAPES,
    TensorCoreEfficiency,
    TensorCoreSection,
    blocks_per_sm,
    cuda_core_flops_per_s,
    data_gradient_fraction,
    may_split_k,
    persistent_bytes,
    sm_macs_per_clock,
    staged_bytes,
    statistics_bytes,
    tile_cost,
)
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Precision
from archsim.workloads.trace import Op


def group_key(chip: ChipSpec) -> str:
    """Every variant of a GPU can be priced with every other: all its numbers are arrays here."""
    return chip.family


class TensorCoreBatch:
    """:class:`~archsim.models.tensorcore.TensorCoreModel` of many variants of one GPU at one precision."""

    separate_units = False

    def __init__(self, chips: Sequence[ChipSpec], efficiency: TensorCoreEfficiency, precision: Precision) -> None:
        self.eff, self.precision = efficiency, precision
        sections = [c.section_of(TensorCoreSection) for c in chips]
        pairs = list(zip(sections, chips, strict=True))
        self.rates = batch_rates(
            chips, precision, floats([cuda_core_flops_per_s(s, c.clock, precision) for s, c in pairs])
        )
        self.sm_count = ints([s.sm_count for s in sections])
        self.onchip_bytes = ints([persistent_bytes(s) for s in sections])
        self.sm_macs = ints([sm_macs_per_clock(s, precision) for s in sections])
        self.data_gradient = floats([data_gradient_fraction(s, efficiency, precision) for s in sections])
        self.blocks = {shape: ints([blocks_per_sm(s, precision, *shape) for s in sections]) for shape in TILE_SHAPES}
        self.memo: dict[object, tuple[Floats, Floats, Ints, Ints] | None] = {}

    def cost(self, op: Op) -> BatchCost | None:
        """Price one op (matrix ops as tiled kernels, the rest as streaming kernels); None past :data:`EXACT`."""
        eff, rates = self.eff, self.rates
        dram_bw = rates.dram_bytes_per_s * eff.memory_bandwidth
        if op.gemm is not None:
            key = (op.gemm, tuple(t.bytes for t in op.reads), op.bytes_written, op.conv is not None, op.phase)
            if key not in self.memo:
                self.memo[key] = self._best_tile(op, dram_bw)
            found = self.memo[key]
            if found is None:
                return None
            compute_s, memory_s, dram, staged = found
            return finish(rates, op, compute_s, memory_s, eff.op_overhead, dram, Unit.MATRIX, onchip_bytes=staged)
        compute_s = op.flops / (rates.vector_flops_per_s * eff.vector)
        dram = op.bytes + np.maximum(0, statistics_bytes(op) - self.onchip_bytes)
        if largest(dram) >= EXACT:
            return None
        return finish(rates, op, compute_s, dram / dram_bw, eff.op_overhead, dram, Unit.VECTOR)

    def _best_tile(self, op: Op, dram_bytes_per_s: Floats) -> tuple[Floats, Floats, Ints, Ints] | None:
        """The feasible candidate that finishes first on each variant (ties: the earlier), as ``best_tile``."""
        k = gemm_of(op).k
        shape = self.sm_count.shape
        best_key = np.full(shape, np.inf)
        best_compute, best_memory = np.full(shape, np.nan), np.full(shape, np.nan)
        best_dram, best_staged = np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=np.int64)
        for tile_m, tile_n, threads in TILE_SHAPES:
            staged = staged_bytes(op, tile_m, tile_n, self.precision)
            if staged >= EXACT:
                return None
            for split in SPLIT_K:
                if split > 1 and (not may_split_k(op) or k < split * MIN_K_PER_SPLIT):
                    break
                found = self._tile(op, tile_m, tile_n, threads, split, dram_bytes_per_s)
                if found is None:
                    return None
                feasible, compute_s, dram, memory_s = found
                time_s = np.maximum(compute_s, memory_s)
                # min() keeps the first of equal candidates: only a strictly shorter one replaces it
                better = feasible & (time_s < best_key)
                best_key = np.where(better, time_s, best_key)
                best_compute = np.where(better, compute_s, best_compute)
                best_memory = np.where(better, memory_s, best_memory)
                best_dram = np.where(better, dram, best_dram)
                best_staged = np.where(better, staged, best_staged)
        return best_compute, best_memory, best_dram, best_staged

    def _tile(
        self, op: Op, tile_m: int, tile_n: int, threads: int, split: int, dram_bytes_per_s: Floats
    ) -> tuple[npt.NDArray[np.bool_], Floats, Ints, Floats] | None:
        """``TensorCoreModel._tile`` on every variant: (feasible, compute_s, dram_bytes, memory_s)."""
        blocks = self.blocks[(tile_m, tile_n, threads)]
        feasible = blocks >= 1
        safe_blocks = np.where(feasible, blocks, 1)  # (an infeasible variant's numbers are not used)
        tiles, macs, compute_s, dram, memory_s = tile_cost(
            ARRAYS,
            op,
            (tile_m, tile_n, threads, split),
            (self.sm_count, safe_blocks, self.sm_macs, self.rates.clock_hz, self.data_gradient),
            self.eff,
            self.precision.element_bytes,
            dram_bytes_per_s,
        )
        if max(tiles, largest(macs, dram)) >= EXACT:
            return None
        return feasible, compute_s, np.broadcast_to(dram, feasible.shape), memory_s


def build_batch(
    chips: Sequence[ChipSpec], efficiency: TensorCoreEfficiency, precision: Precision, footprint_bytes: int
) -> TensorCoreBatch:
    """The family's batch-model factory (the footprint lives in main memory, so it is not needed)."""
    return TensorCoreBatch(chips, efficiency, precision)
