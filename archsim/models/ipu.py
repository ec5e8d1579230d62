"""Cost model of Graphcore IPUs (GC2, GC200).

An IPU runs a program of bulk-synchronous supersteps: every tile computes on its own SRAM, all tiles
synchronise, then data moves between tiles over the exchange. The phases do not overlap, so a
superstep takes ``compute + sync + exchange``, each set by the busiest tile.

Matrix products. The output is cut into blocks of :data:`AMP_BLOCK` x :data:`AMP_BLOCK` elements,
the granularity of the AMP (accumulating matrix product) unit's work; a tile gets whole blocks,
never a fraction, so the busiest tile computes ``ceil(units / tiles)`` of them at its AMP's
``amp_mac_per_clock`` (``K`` rounded up to :data:`AMP_K_GRAIN`). A product may also split ``K`` over
``split`` tiles per block, as Poplar's planner splits input channels: more tiles work on each block
and each receives a thinner slab of operands, at the cost of a second superstep that exchanges the
fp32 partial sums and adds them on the vector path. A tile may also walk its slice of ``K`` in ``serial``
supersteps (Poplar's serial splits), holding one chunk of operands at a time, at the cost of a sync
per step. The partition that finishes first is used. Before computing, each tile receives the ``A``
rows and ``B`` columns of its blocks over the exchange; a tile's share of the exchange bandwidth is
``exchange_bandwidth / tiles``.

Capacity, per tile. The program's resident data (the footprint the forward and backward ops work
with: weights, gradients, saved or live activations) is spread evenly over the tiles; what does not
fit a tile's SRAM lives in streaming memory and every op streams that fraction of its bytes. The state
only the optimizer update touches (fp32 master weights and moments, left out of that footprint) stays
in the SRAM that is still free and otherwise lives in streaming memory: the update reads and writes
the rest of it there (Poplar's optimizer-state offloading). The busiest tile holds
its partition of the op: the weights of its block columns, the activations of its block rows (for a
forward convolution, the input patch under its output pixels, see
:meth:`~archsim.models.systolic_map.ConvWindow.footprint_words`) and its output blocks. When that
does not fit the SRAM the resident data leaves (the op's own tensors, already part of the resident
share, are not counted twice), the partition spills: the overflow of every busy tile is served from
streaming memory at its bandwidth, in a phase of its own. Element-wise ops are tile-local and
spread evenly over the tiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from archsim.errors import SpecError
from archsim.models.base import OpCost, Unit, bound_of, ceil_div, chip_rates, gemm_of, matrix_shape_key
from archsim.models.systolic_map import forward_window
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Bandwidth, Bytes, Count, Precision, Time
from archsim.spec.registry import FamilyDefinition, FamilyEfficiency, FamilySection, Mechanism, register_family
from archsim.workloads.trace import Op, Phase, Role

AMP_BLOCK = 16
"""Rows and columns of the output block that is the unit of AMP work handed to a tile."""
AMP_K_GRAIN = 16
"""The AMP consumes ``K`` in groups of this many elements (input channels)."""
PARTIAL_BYTES = 4
"""Partial sums of a split ``K`` are exchanged and added in fp32."""


class IpuSection(FamilySection):
    """A Graphcore IPU: tiles, each a core with its own SRAM, joined by an all-to-all exchange."""

    peak_counts = ("tiles",)

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

    def macs_per_clock(self, precision: Precision) -> int | None:
        """AMP MACs per clock of all tiles at ``precision`` (None: the AMP does not run it)."""
        per_tile = self.amp_mac_per_clock.get(precision)
        return None if per_tile is None else per_tile * self.tiles

    def onchip_bytes(self) -> int:
        """The tiles' SRAM (the In-Processor Memory)."""
        return self.tiles * self.tile_sram

    def in_processor_bytes(self) -> int | None:
        """The In-Processor Memory holds a step's data; streaming memory is behind it."""
        return self.tiles * self.tile_sram

    def check_chip(self, chip: ChipSpec) -> None:
        """The tiles' SRAM is the chip's on-chip memory level."""
        if chip.memory.onchip is None:
            raise ValueError("memory.onchip: an IPU needs its In-Processor-Memory (the tiles' SRAM) described here")
        total = self.tiles * self.tile_sram
        if abs(total - chip.memory.onchip.capacity) > 0.01 * total:
            raise ValueError(f"ipu.tile_sram x tiles = {total} bytes disagrees with memory.onchip.capacity")


@dataclass(frozen=True, slots=True)
class IpuEfficiency(FamilyEfficiency):
    """The efficiency record of an IPU: the common values and the exchange's reachable fraction."""

    exchange: float


@dataclass(frozen=True, slots=True)
class IpuPartition:
    """How a matrix op is spread over the tiles and the time of each phase (seconds)."""

    split: int
    """Tiles sharing one output block's ``K`` (1: no split)."""
    serial: int
    """Supersteps a tile takes over its slice of ``K``, one chunk of operands each (1: one step)."""
    tiles_used: int
    units_per_tile: int
    """Block-and-K-slice units on the busiest tile."""
    tile_bytes: int
    """Operand slabs and output blocks the busiest tile holds during the op."""
    compute_s: float
    exchange_s: float
    spill_bytes: int
    """Bytes served from streaming memory because the partition overflows tile SRAM."""
    stream_s: float
    reduce_s: float
    """Second superstep of a split ``K``: sync, exchange and addition of the partial sums."""

    @property
    def time_s(self) -> float:
        """Busy time of the op's supersteps, without the fixed sync and issue overhead."""
        return self.compute_s + self.exchange_s + self.stream_s + self.reduce_s


class IpuModel:
    """Bulk-synchronous model of one IPU at one precision."""

    separate_units = False

    def __init__(self, chip: ChipSpec, efficiency: IpuEfficiency, precision: Precision, footprint_bytes: int) -> None:
        self.chip = chip
        self.precision = precision
        self.ipu: IpuSection = chip.section_of(IpuSection)
        self.eff = efficiency
        self.vector_per_tile = self.ipu.vector_flops_per_clock.get(precision, 0)
        rates = chip_rates(chip, efficiency, precision, self.vector_per_tile * self.ipu.tiles * chip.clock)
        # the working set lives in the in-processor memory: the roofline uses its bandwidth
        onchip = chip.memory.onchip
        if onchip is None:
            raise SpecError(chip.name, "memory.onchip", "an IPU needs its In-Processor Memory described")
        self.rates = replace(rates, dram_bytes_per_s=onchip.bandwidth)
        self.free_bytes = max(0, self.ipu.tile_sram * self.ipu.tiles - footprint_bytes)
        """In-processor memory the resident footprint leaves free (for the update-only state)."""
        resident_per_tile = footprint_bytes / self.ipu.tiles
        self.free_per_tile = max(0.0, self.ipu.tile_sram - resident_per_tile)
        self.overflow_fraction = (
            max(0.0, (resident_per_tile - self.ipu.tile_sram) / resident_per_tile) if resident_per_tile else 0.0
        )
        self._partitions: dict[object, IpuPartition] = {}
        """:meth:`partition` by what it reads of an op (networks repeat their layer shapes), as IpuBatch keeps them."""

    def cost(self, op: Op) -> OpCost:
        """Price one op as its supersteps plus any streaming-memory phase."""
        eff = self.eff
        stream_bw = self.chip.memory.main.bandwidth * eff.memory_bandwidth
        resident_streamed = int(op.bytes * self.overflow_fraction)
        if op.gemm is not None:
            key = (matrix_shape_key(op), op.bytes)
            part = self._partitions.get(key)
            if part is None:
                part = self._partitions[key] = self.partition(op)
            compute_s, exchange_s = part.compute_s + part.reduce_s, part.exchange_s
            streamed = resident_streamed + part.spill_bytes
            unit = Unit.MATRIX
        else:
            vector_rate = max(1, self.vector_per_tile) * eff.vector * self.chip.clock
            compute_s = math.ceil(op.flops / self.ipu.tiles) / vector_rate
            exchange_s, streamed, unit = 0.0, resident_streamed, Unit.VECTOR
            if op.phase is Phase.UPDATE:
                streamed = self._update_streamed(op)
        stream_s = streamed / stream_bw
        overhead_s = self.ipu.sync_latency + eff.op_overhead
        roofline_s = self.rates.roofline_s(op)
        busy_s = max(compute_s + exchange_s + stream_s, roofline_s)
        return OpCost(
            time_s=busy_s + overhead_s,
            compute_s=compute_s,
            memory_s=stream_s,
            overhead_s=overhead_s,
            dram_bytes=streamed,
            roofline_s=roofline_s,
            bound=bound_of(compute_s, stream_s, overhead_s, exchange_s),
            unit=unit,
            communication_s=exchange_s,
        )

    def _update_streamed(self, op: Op) -> int:
        """Bytes the optimizer update moves to and from streaming memory.

        Its state tensors stay in the free SRAM as far as they fit, the rest is read and written in
        streaming memory; its other tensors (gradients, the weight copy) are resident data.
        """
        state_read = sum(t.bytes for t in op.reads if t.role is Role.STATE)
        state = state_read + sum(t.bytes for t in op.writes if t.role is Role.STATE)
        other = op.bytes - state
        offloaded = 1.0 - min(1.0, self.free_bytes / state_read) if state_read else 0.0
        return int(state * offloaded + other * self.overflow_fraction)

    def partition(self, op: Op) -> IpuPartition:
        """The partition that finishes first (ties: the earlier candidate).

        ``split`` runs 1, 2, 4, ... up to the number of ``K`` grains; for each, ``serial`` runs 1, 2,
        4, ... until the partition stops spilling (more serial steps would only add syncs).
        """
        g = gemm_of(op)
        blocks = g.batch * ceil_div(g.m, AMP_BLOCK) * ceil_div(g.n, AMP_BLOCK)
        k_grains = ceil_div(g.k, AMP_K_GRAIN)
        best = self._partition(op, blocks, 1, 1)
        split = 1
        while split <= max(1, k_grains):
            serial = 1
            while serial <= ceil_div(k_grains, split):
                candidate = best if split == serial == 1 else self._partition(op, blocks, split, serial)
                if candidate.time_s < best.time_s:
                    best = candidate
                if candidate.spill_bytes == 0:
                    break
                serial *= 2
            split *= 2
        return best

    def _partition(self, op: Op, blocks: int, split: int, serial: int) -> IpuPartition:
        g = gemm_of(op)
        eff = self.eff
        tiles, e, clock = self.ipu.tiles, self.precision.element_bytes, self.chip.clock
        units = blocks * split
        per_tile = ceil_div(units, tiles)
        tiles_used = min(tiles, units)
        k_slice = ceil_div(ceil_div(g.k, AMP_K_GRAIN), split) * AMP_K_GRAIN
        # a serial step holds one chunk of the slice's operands; the outputs accumulate in place
        k_chunk = ceil_div(ceil_div(k_slice, AMP_K_GRAIN), serial) * AMP_K_GRAIN
        amp_rate = self.ipu.amp_mac_per_clock[self.precision] * eff.compute
        compute_s = per_tile * AMP_BLOCK * AMP_BLOCK * k_slice / amp_rate / clock
        # the busiest tile's blocks form a near-square rectangle of a product's block grid, so they
        # share their A rows and B columns; a tile with more blocks than a product holds whole products
        grid_m, grid_n = ceil_div(g.m, AMP_BLOCK), ceil_div(g.n, AMP_BLOCK)
        if per_tile >= grid_m * grid_n:
            products = ceil_div(per_tile, grid_m * grid_n)
            rows, cols = products * grid_m, products * grid_n
        else:
            rows = min(grid_m, math.isqrt(per_tile - 1) + 1)
            cols = min(grid_n, ceil_div(per_tile, rows))
            rows = min(grid_m, ceil_div(per_tile, cols))
        window = forward_window(op)
        if window is None:
            activations = rows * AMP_BLOCK * k_chunk * e
        else:
            # a convolution's tile reads the input patch under its output pixels, not their im2col rows
            patch = window.footprint_words(min(g.m, rows * AMP_BLOCK))
            activations = min(rows * AMP_BLOCK * k_chunk, ceil_div(patch * k_chunk, g.k)) * e
        weights = cols * AMP_BLOCK * k_chunk * e
        outputs = per_tile * AMP_BLOCK * AMP_BLOCK * (PARTIAL_BYTES if split > 1 else e)
        operands = activations + weights
        tile_bytes = math.ceil(operands + outputs)
        tile_exchange_bw = self.ipu.exchange_bandwidth * eff.exchange / tiles
        exchange_s = serial * operands / tile_exchange_bw + (serial - 1) * self.ipu.sync_latency
        # the op's own tensors are part of the resident footprint, spread evenly: not counted twice
        free = min(self.ipu.tile_sram, self.free_per_tile + op.bytes / tiles)
        spill_per_tile = max(0.0, tile_bytes - free)
        spill = int(spill_per_tile * tiles_used)
        stream_s = spill / (self.chip.memory.main.bandwidth * eff.memory_bandwidth)
        reduce_s = 0.0
        if split > 1:
            partials = outputs * (split - 1) / split
            adds = per_tile * AMP_BLOCK * AMP_BLOCK
            reduce_s = (
                self.ipu.sync_latency
                + partials / tile_exchange_bw
                + adds / (max(1, self.vector_per_tile) * eff.vector * clock)
            )
        return IpuPartition(
            split, serial, tiles_used, per_tile, tile_bytes, compute_s, exchange_s, spill, stream_s, reduce_s
        )


register_family(
    FamilyDefinition(
        "ipu",
        IpuSection,
        IpuEfficiency,
        Mechanism.SUPERSTEP,
        IpuModel,
        "Graphcore IPUs",
        batch="archsim.models.ipu_batch",
    )
)
