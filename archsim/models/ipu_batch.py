"""The IPU model over many chips at once: :class:`~archsim.models.ipu.IpuModel` on arrays.

A sweep of tile counts, tile SRAM, exchange or streaming-memory bandwidth prices the same op on many
variants of one IPU. The partition search of :meth:`~archsim.models.ipu.IpuModel.partition` is walked
once for all variants: its candidates (``split`` 1, 2, 4, ... over the ``K`` grains, ``serial`` 1, 2,
4, ...) depend on the op alone, and where the one-IPU search stops raising ``serial`` (the partition
no longer spills) a variant stops taking part for that ``split``, while the others go on. Every phase
of a partition, the capacity model and the streaming-memory traffic are the same arithmetic on arrays
with one entry per variant, in the same order, so each entry is the float the one-IPU model gives,
bit for bit (see :mod:`archsim.models.batch`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from archsim.models.base import Unit, ceil_div, gemm_of, matrix_shape_key
from archsim.models.batch import EXACT, BatchCost, Floats, Ints, batch_rates, cdiv, floats, ints, isqrt, largest
from archsim.models.ipu import AMP_BLOCK, AMP_K_GRAIN, PARTIAL_BYTES, IpuEfficiency, IpuSection
from archsim.models.systolic_map import ConvWindow, forward_window
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Precision
from archsim.workloads.trace import Op, Phase, Role


def group_key(chip: ChipSpec) -> str:
    """Every variant of an IPU can be priced with every other: all its numbers are arrays here."""
    return chip.family


def footprint_words(window: ConvWindow, pixels: Ints) -> Ints:
    """:meth:`~archsim.models.systolic_map.ConvWindow.footprint_words` of each entry of ``pixels``."""
    out_rows = np.minimum(window.images * window.out_h, (pixels + window.out_w - 2) // window.out_w + 1)
    cols = np.minimum(window.in_w, (pixels - 1) * window.stride + window.filter_w)
    one_row = window.filter_h * cols * window.channels
    images = np.minimum(window.images, cdiv(out_rows, window.out_h) + 1)
    in_rows = np.minimum(images * window.in_h, (out_rows - 1) * window.stride + window.filter_h)
    return np.asarray(np.where(out_rows == 1, one_row, in_rows * window.in_w * window.channels))


@dataclass(frozen=True)
class _Partition:
    """:class:`~archsim.models.ipu.IpuPartition`'s fields the cost reads, on every variant."""

    compute_s: Floats
    exchange_s: Floats
    spill_bytes: Ints
    stream_s: Floats
    reduce_s: Floats

    @property
    def time_s(self) -> Floats:
        """As :attr:`~archsim.models.ipu.IpuPartition.time_s`."""
        return self.compute_s + self.exchange_s + self.stream_s + self.reduce_s

    def where(self, mask: npt.NDArray[np.bool_], other: _Partition) -> _Partition:
        """Its entries where ``mask`` holds, ``other``'s elsewhere."""
        return _Partition(
            *(np.where(mask, getattr(self, f.name), getattr(other, f.name)) for f in dataclasses.fields(self))
        )


class IpuBatch:
    """:class:`~archsim.models.ipu.IpuModel` of many variants of one IPU at one precision."""

    separate_units = False

    def __init__(
        self, chips: Sequence[ChipSpec], efficiency: IpuEfficiency, precision: Precision, footprint_bytes: int
    ) -> None:
        self.eff, self.precision = efficiency, precision
        ipus = [c.section_of(IpuSection) for c in chips]
        self.tiles = ints([i.tiles for i in ipus])
        self.tile_sram = ints([i.tile_sram for i in ipus])
        self.clock = floats([c.clock for c in chips])
        self.vector_per_tile = ints([i.vector_flops_per_clock.get(precision, 0) for i in ipus])
        self.amp_mac = ints([i.amp_mac_per_clock[precision] for i in ipus])
        self.exchange_bytes_per_s = floats([i.exchange_bandwidth for i in ipus])
        self.sync_s = floats([i.sync_latency for i in ipus])
        self.main_bytes_per_s = floats([c.memory.main.bandwidth for c in chips])
        pairs = zip(ipus, chips, strict=True)
        rates = batch_rates(
            chips, precision, floats([i.vector_flops_per_clock.get(precision, 0) * i.tiles * c.clock for i, c in pairs])
        )
        # the working set lives in the in-processor memory: the roofline uses its bandwidth (IpuModel
        # refuses a chip without one; IpuSection.check_chip already has)
        onchip = [c.memory.onchip for c in chips]
        self.rates = dataclasses.replace(rates, dram_bytes_per_s=floats([o.bandwidth if o else np.nan for o in onchip]))
        self.free_bytes = np.maximum(0, self.tile_sram * self.tiles - footprint_bytes)
        resident_per_tile = footprint_bytes / self.tiles
        self.free_per_tile = np.maximum(0.0, self.tile_sram - resident_per_tile)
        with np.errstate(divide="ignore", invalid="ignore"):
            overflow = np.maximum(0.0, (resident_per_tile - self.tile_sram) / resident_per_tile)
        self.overflow_fraction = np.where(resident_per_tile != 0, overflow, 0.0)
        self.largest = max(footprint_bytes, largest(self.tile_sram * self.tiles))
        self.memo: dict[object, _Partition | None] = {}

    def cost(self, op: Op) -> BatchCost | None:
        """Price one op as its supersteps plus any streaming-memory phase; None past :data:`EXACT`."""
        eff = self.eff
        if max(self.largest, op.bytes, op.flops) >= EXACT:
            return None
        stream_bw = self.main_bytes_per_s * eff.memory_bandwidth
        resident_streamed = np.trunc(op.bytes * self.overflow_fraction).astype(np.int64)
        if op.gemm is not None:
            key = (matrix_shape_key(op), op.bytes)
            if key not in self.memo:
                self.memo[key] = self.partition(op)
            part = self.memo[key]
            if part is None:
                return None
            compute_s, exchange_s = part.compute_s + part.reduce_s, part.exchange_s
            streamed = resident_streamed + part.spill_bytes
            unit = Unit.MATRIX
        else:
            vector_rate = np.maximum(1, self.vector_per_tile) * eff.vector * self.clock
            compute_s = np.ceil(op.flops / self.tiles) / vector_rate
            exchange_s, streamed, unit = np.zeros(self.clock.shape), resident_streamed, Unit.VECTOR
            if op.phase is Phase.UPDATE:
                streamed = self._update_streamed(op)
        stream_s = streamed / stream_bw
        overhead_s = self.sync_s + eff.op_overhead
        roofline_s = self.rates.roofline_s(op)
        busy_s = np.maximum(compute_s + exchange_s + stream_s, roofline_s)
        return BatchCost(
            time_s=busy_s + overhead_s,
            compute_s=compute_s,
            memory_s=stream_s,
            overhead_s=overhead_s,
            dram_bytes=streamed,
            roofline_s=roofline_s,
            unit=unit,
            communication_s=exchange_s,
            fill_s=np.zeros(self.clock.shape),
        )

    def _update_streamed(self, op: Op) -> Ints:
        """``IpuModel._update_streamed`` on every variant."""
        state_read = sum(t.bytes for t in op.reads if t.role is Role.STATE)
        state = state_read + sum(t.bytes for t in op.writes if t.role is Role.STATE)
        other = op.bytes - state
        offloaded = 1.0 - np.minimum(1.0, self.free_bytes / state_read) if state_read else np.zeros(self.clock.shape)
        streamed: Ints = np.trunc(state * offloaded + other * self.overflow_fraction).astype(np.int64)
        return streamed

    def partition(self, op: Op) -> _Partition | None:
        """The partition that finishes first on each variant (ties: the earlier), as ``IpuModel.partition``."""
        g = gemm_of(op)
        blocks = g.batch * ceil_div(g.m, AMP_BLOCK) * ceil_div(g.n, AMP_BLOCK)
        k_grains = ceil_div(g.k, AMP_K_GRAIN)
        best = self._partition(op, blocks, 1, 1)
        if best is None:
            return None
        split = 1
        while split <= max(1, k_grains):
            serial = 1
            active = np.ones(self.tiles.shape, dtype=bool)  # variants still raising serial at this split
            while serial <= ceil_div(k_grains, split) and active.any():
                candidate = best if split == serial == 1 else self._partition(op, blocks, split, serial)
                if candidate is None:
                    return None
                best = candidate.where(active & (candidate.time_s < best.time_s), best)
                active &= candidate.spill_bytes != 0
                serial *= 2
            split *= 2
        return best

    def _partition(self, op: Op, blocks: int, split: int, serial: int) -> _Partition | None:
        g = gemm_of(op)
        eff, tiles, e, clock = self.eff, self.tiles, self.precision.element_bytes, self.clock
        units = blocks * split
        per_tile = cdiv(units, tiles)
        tiles_used = np.minimum(tiles, units)
        k_slice = ceil_div(ceil_div(g.k, AMP_K_GRAIN), split) * AMP_K_GRAIN
        k_chunk = ceil_div(ceil_div(k_slice, AMP_K_GRAIN), serial) * AMP_K_GRAIN
        amp_rate = self.amp_mac * eff.compute
        compute_s = per_tile * AMP_BLOCK * AMP_BLOCK * k_slice / amp_rate / clock  # (checked below)
        grid_m, grid_n = ceil_div(g.m, AMP_BLOCK), ceil_div(g.n, AMP_BLOCK)
        products = cdiv(per_tile, grid_m * grid_n)
        rows = np.minimum(grid_m, isqrt(per_tile - 1) + 1)
        cols = np.minimum(grid_n, cdiv(per_tile, rows))
        rows = np.minimum(grid_m, cdiv(per_tile, cols))
        whole = per_tile >= grid_m * grid_n
        rows, cols = np.where(whole, products * grid_m, rows), np.where(whole, products * grid_n, cols)
        window = forward_window(op)
        if window is None:
            activations = rows * AMP_BLOCK * k_chunk * e
        else:
            patch = footprint_words(window, np.minimum(g.m, rows * AMP_BLOCK))
            activations = np.minimum(rows * AMP_BLOCK * k_chunk, cdiv(patch * k_chunk, g.k)) * e
        weights = cols * AMP_BLOCK * k_chunk * e
        outputs = per_tile * AMP_BLOCK * AMP_BLOCK * (PARTIAL_BYTES if split > 1 else e)
        operands = activations + weights
        tile_bytes = np.ceil(operands + outputs).astype(np.int64)
        macs = per_tile * AMP_BLOCK * AMP_BLOCK * k_slice
        if largest(tile_bytes * tiles_used, macs, outputs * split, serial * operands) >= EXACT:
            return None
        tile_exchange_bw = self.exchange_bytes_per_s * eff.exchange / tiles
        exchange_s = serial * operands / tile_exchange_bw + (serial - 1) * self.sync_s
        free = np.minimum(self.tile_sram, self.free_per_tile + op.bytes / tiles)
        spill_per_tile = np.maximum(0.0, tile_bytes - free)
        spill = np.trunc(spill_per_tile * tiles_used).astype(np.int64)
        stream_s = spill / (self.main_bytes_per_s * eff.memory_bandwidth)
        reduce_s = np.zeros(tiles.shape)
        if split > 1:
            partials = outputs * (split - 1) / split
            adds = per_tile * AMP_BLOCK * AMP_BLOCK
            reduce_s = (
                self.sync_s
                + partials / tile_exchange_bw
                + adds / (np.maximum(1, self.vector_per_tile) * eff.vector * clock)
            )
        return _Partition(compute_s, exchange_s, spill, stream_s, reduce_s)


def build_batch(
    chips: Sequence[ChipSpec], efficiency: IpuEfficiency, precision: Precision, footprint_bytes: int
) -> IpuBatch:
    """The family's batch-model factory: the footprint sets each variant's free SRAM and overflow."""
    return IpuBatch(chips, efficiency, precision, footprint_bytes)
