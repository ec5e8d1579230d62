"""Cost model of spatial dataflow chips (Cerebras WSE-2, SambaNova SN10 RDU).

A dataflow chip is a fabric of processing elements (Cerebras cores, SambaNova pattern compute units),
each beside its own SRAM, joined by an on-chip mesh. Its compiler maps the layers of a step to
regions of the fabric in proportion to their work and streams activations from region to region, so
the layers run as a pipeline rather than one after another; the whole step is compiled ahead of time
and no op is dispatched on its own. The model keeps that mechanism and nothing finer:

* Compute. Each op's region gets the share of the fabric its work asks for, so summed over a step
  the arithmetic runs at the whole fabric's rate: a matrix op at ``compute`` of the fabric's MAC
  peak (``processing_elements x macs_per_pe_per_clock x clock``), any other op at ``vector`` of the
  vector peak.
* Where the weights live. When the trace's footprint (weights, activations in flight, in training
  gradients and optimizer state) fits ``onchip_memory``, everything is resident: no op moves a byte
  to or from main memory. Otherwise the weights are streamed (Cerebras' weight streaming, SambaNova's
  DDR-backed tensors): every op reads its weight, gradient and optimizer-state tensors from main
  memory each step at ``memory_bandwidth`` of its bandwidth, while activations stay on the chip.
* Fabric. An op's outputs travel to the region of the op that reads them over the mesh, at
  ``exchange`` of ``fabric_bandwidth``.
* On-chip bandwidth. Every byte an op touches is read from or written to the PEs' SRAM: that traffic
  is charged at the roofline of the published ``onchip_bandwidth`` (each PE reads its own SRAM).

An op takes ``max(compute, streamed bytes / main-memory bandwidth, fabric traffic / fabric bandwidth,
roofline) + op overhead``, where the roofline is the larger of its FLOPs over the published peak and
its compulsory bytes over the on-chip bandwidth: never faster than a peak, never below the roofline.
The pipelining shows as the software's per-op cost, which is zero for a compiled graph.

Limits, stated: there is no placement or routing model (regions are assumed to be sized exactly in
proportion to work, and their traffic never to contend on the mesh), no pipeline fill and drain, no
model of a region too small to hold its layer's weights, and activations are assumed to fit on chip
when weights stream. The family's efficiencies are not fitted (no calibration row exists), so every
result carries the extrapolation flag.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from archsim.models.base import SCALAR, Arith, OpCost, Unit, bound_of, chip_rates
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Bandwidth, Bytes, Count, Precision
from archsim.spec.registry import FamilyDefinition, FamilyEfficiency, FamilySection, Mechanism, register_family
from archsim.workloads.trace import Op, Phase, Role

STREAMED_ROLES = (Role.WEIGHT, Role.GRADIENT, Role.STATE)
"""Tensors that live in main memory, and are streamed each step, when the footprint does not fit on chip."""


class DataflowSection(FamilySection):
    """The ``dataflow:`` section of a chip file: a fabric of processing elements, their SRAM and mesh."""

    peak_counts = ("processing_elements",)

    processing_elements: Count
    """Compute units of the fabric (Cerebras cores, SambaNova PCUs)."""
    macs_per_pe_per_clock: dict[Precision, Count]
    """Dense multiply-accumulates per clock of one processing element, by precision."""
    vector_flops_per_pe_per_clock: dict[Precision, Count]
    """Element-wise floating-point operations per clock of one processing element, by precision."""
    onchip_memory: Bytes
    """SRAM of all processing elements (or memory units) together."""
    onchip_bandwidth: Bandwidth
    """Aggregate bandwidth of that SRAM (all PEs reading their own memory at once)."""
    fabric_bandwidth: Bandwidth
    """Aggregate bandwidth of the on-chip mesh between processing elements."""

    def macs_per_clock(self, precision: Precision) -> int | None:
        """MACs per clock of the whole fabric at ``precision`` (None: not supported)."""
        per_pe = self.macs_per_pe_per_clock.get(precision)
        return None if per_pe is None else per_pe * self.processing_elements

    def onchip_bytes(self) -> int:
        """The processing elements' SRAM."""
        return self.onchip_memory

    def check_chip(self, chip: ChipSpec) -> None:
        """``memory.onchip``, when given, is this SRAM; the SRAM is never slower than main memory."""
        onchip = chip.memory.onchip
        if onchip is not None and abs(onchip.capacity - self.onchip_memory) > 0.01 * self.onchip_memory:
            raise ValueError("dataflow.onchip_memory disagrees with memory.onchip.capacity")
        if onchip is not None and abs(onchip.bandwidth - self.onchip_bandwidth) > 0.01 * self.onchip_bandwidth:
            raise ValueError("dataflow.onchip_bandwidth disagrees with memory.onchip.bandwidth")
        if self.onchip_bandwidth < chip.memory.main.bandwidth:
            raise ValueError("dataflow.onchip_bandwidth: must be at least memory.main.bandwidth")


@dataclass(frozen=True, slots=True)
class DataflowEfficiency(FamilyEfficiency):
    """The efficiency record of a dataflow chip: the common values and the mesh's reachable fraction."""

    exchange: float


class DataflowModel:
    """Pipelined-region model of one dataflow chip at one precision (see the module docstring)."""

    separate_units = False

    def __init__(
        self, chip: ChipSpec, efficiency: DataflowEfficiency, precision: Precision, footprint_bytes: int
    ) -> None:
        self.chip = chip
        self.precision = precision
        self.fabric: DataflowSection = chip.section_of(DataflowSection)
        self.eff = efficiency
        vector_per_pe = self.fabric.vector_flops_per_pe_per_clock.get(precision, 1)
        vector_flops_per_s = vector_per_pe * self.fabric.processing_elements * chip.clock
        rates = chip_rates(chip, efficiency, precision, vector_flops_per_s)
        # every byte an op touches passes through the PEs' SRAM: its roofline uses that bandwidth
        self.rates = replace(rates, dram_bytes_per_s=self.fabric.onchip_bandwidth)
        self.resident = footprint_bytes <= self.fabric.onchip_memory
        """True when the whole footprint stays on chip; otherwise weights and their state are streamed."""

    def streamed_bytes(self, op: Op) -> int:
        """Bytes ``op`` moves to or from main memory: none when resident, else its weight-side tensors."""
        return 0 if self.resident else weight_bytes(op)

    def cost(self, op: Op) -> OpCost:
        """Compute at the family's efficiency against streamed, fabric and on-chip traffic, plus the op cost."""
        eff = self.eff
        streamed = self.streamed_bytes(op)
        roofline_s = self.rates.roofline_s(op)
        compute_s, unit, memory_s, fabric_s, busy_s = terms(
            SCALAR,
            op,
            eff,
            (self.rates.matrix_flops_per_s, self.rates.vector_flops_per_s),
            (self.chip.memory.main.bandwidth, self.fabric.fabric_bandwidth),
            streamed,
            roofline_s,
        )
        return OpCost(
            time_s=busy_s + eff.op_overhead,
            compute_s=compute_s,
            memory_s=memory_s,
            overhead_s=eff.op_overhead,
            dram_bytes=streamed,
            roofline_s=roofline_s,
            bound=bound_of(compute_s, memory_s, eff.op_overhead, fabric_s),
            unit=unit,
            communication_s=fabric_s,
        )


def weight_bytes(op: Op) -> int:
    """Bytes ``op`` moves to or from main memory when the weights stream: its weight-side tensors."""
    if op.phase is Phase.UPDATE:
        return op.bytes  # the optimizer update works on streamed tensors only
    return sum(t.bytes for t in (*op.reads, *op.writes) if t.role in STREAMED_ROLES)


def terms(
    arith: Arith,
    op: Op,
    efficiency: DataflowEfficiency,
    peaks: tuple[Any, Any],
    bandwidths: tuple[Any, Any],
    streamed: Any,
    roofline_s: Any,
) -> tuple[Any, Unit, Any, Any, Any]:
    """An op's compute, unit, streamed-memory and fabric seconds, and the longest of them and its roofline.

    ``peaks`` are the matrix and vector FLOP/s, ``bandwidths`` the main-memory and fabric bytes per
    second: numbers of one chip (``arith`` :data:`~archsim.models.base.SCALAR`) or arrays of many
    (:mod:`archsim.models.dataflow_batch`), one formula for both.
    """
    matrix_flops, vector_flops = peaks
    main_bytes_per_s, fabric_bytes_per_s = bandwidths
    if op.kind.is_matrix:
        compute_s, unit = op.flops / (matrix_flops * efficiency.compute), Unit.MATRIX
    else:
        compute_s, unit = op.flops / (vector_flops * efficiency.vector), Unit.VECTOR
    memory_s = streamed / (main_bytes_per_s * efficiency.memory_bandwidth)
    fabric_s = op.bytes_written / (fabric_bytes_per_s * efficiency.exchange)
    busy_s = arith.maximum(arith.maximum(arith.maximum(compute_s, memory_s), fabric_s), roofline_s)
    return compute_s, unit, memory_s, fabric_s, busy_s


register_family(
    FamilyDefinition(
        "dataflow",
        DataflowSection,
        DataflowEfficiency,
        Mechanism.PROGRAM_LAUNCH,
        DataflowModel,
        "spatial dataflow chips (wafer-scale and reconfigurable)",
        batch="archsim.models.dataflow_batch",
    )
)
