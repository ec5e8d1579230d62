"""Cost model of Graphcore IPUs (GC2, GC200).

An IPU runs a program of bulk-synchronous supersteps. Each op is one superstep: every tile computes
on its own SRAM (the AMP unit for matrix products, the vector path for the rest), then all tiles
synchronise, then data moves between tiles over the on-chip exchange. The three phases do not
overlap, so an op takes ``compute + exchange + sync``. Matrix products are spread evenly over all
tiles; their activation operands are exchanged to the tiles that need them (weights live where they
are used). Element-wise work is tile-local.

Capacity: weights, activations and optimizer state must fit in the in-processor memory (the sum of
tile SRAMs). What does not fit is served from streaming memory at its bandwidth: each op then loads
that share of its bytes from streaming memory in a phase of its own.
"""

from __future__ import annotations

from dataclasses import replace

from archsim.models.base import Bound, OpCost, Unit, ceil_div, chip_rates
from archsim.spec.chip import ChipSpec, Efficiency, IpuSection
from archsim.spec.common import Precision
from archsim.workloads.trace import Op, Role


class IpuModel:
    """Bulk-synchronous model of one IPU at one precision."""

    separate_units = False

    def __init__(self, chip: ChipSpec, efficiency: Efficiency, precision: Precision, footprint_bytes: int) -> None:
        assert chip.ipu is not None
        assert chip.memory.onchip is not None
        self.chip = chip
        self.precision = precision
        self.ipu: IpuSection = chip.ipu
        vector_per_tile = self.ipu.vector_flops_per_clock.get(precision, 0)
        rates = chip_rates(chip, efficiency, precision, vector_per_tile * self.ipu.tiles * chip.clock)
        # the working set lives in the in-processor memory: the roofline uses its bandwidth
        self.rates = replace(rates, dram_bytes_per_s=chip.memory.onchip.bandwidth)
        capacity = chip.memory.onchip.capacity
        self.overflow_fraction = max(0.0, (footprint_bytes - capacity) / footprint_bytes) if footprint_bytes else 0.0

    def cost(self, op: Op) -> OpCost:
        """Price one op as one superstep: compute, sync, exchange, plus any streaming-memory phase."""
        eff = self.rates.efficiency
        assert eff.compute
        assert eff.vector
        assert eff.exchange
        assert eff.memory_bandwidth
        assert eff.op_overhead is not None
        clock = self.chip.clock
        if op.gemm is not None:
            macs_per_tile = ceil_div(op.gemm.macs, self.ipu.tiles)
            per_tile_rate = self.ipu.amp_mac_per_clock[self.precision] * eff.compute
            compute_s = macs_per_tile / per_tile_rate / clock
            exchanged = sum(t.bytes for t in op.reads if t.role is Role.ACTIVATION)
            unit = Unit.MATRIX
        else:
            compute_s = op.flops / (self.rates.vector_flops_per_s * eff.vector)
            exchanged = 0
            unit = Unit.VECTOR
        exchange_s = exchanged / (self.ipu.exchange_bandwidth * eff.exchange)
        streamed = int(op.bytes * self.overflow_fraction)
        stream_s = streamed / (self.chip.memory.main.bandwidth * eff.memory_bandwidth)
        overhead_s = self.ipu.sync_latency + eff.op_overhead
        roofline_s = self.rates.roofline_s(op)
        busy_s = max(compute_s + exchange_s + stream_s, roofline_s)
        return OpCost(
            time_s=busy_s + overhead_s,
            compute_s=compute_s,
            memory_s=exchange_s + stream_s,
            overhead_s=overhead_s,
            dram_bytes=streamed,
            roofline_s=roofline_s,
            bound=Bound.COMPUTE if compute_s >= exchange_s + stream_s else Bound.MEMORY,
            unit=unit,
        )
