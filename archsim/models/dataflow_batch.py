"""The spatial-dataflow model over many chips at once: :class:`~archsim.models.dataflow.DataflowModel` on arrays.

A sweep of processing elements, on-chip memory, fabric or main-memory bandwidth prices the same op
on many variants of one dataflow chip. Whether the trace's footprint is resident is decided per
variant; an op's compute, streamed, fabric and on-chip terms are the one-chip model's own formula,
:func:`~archsim.models.dataflow.terms`, called on arrays with one entry per variant, so each entry is
the float it gives, bit for bit (see :mod:`archsim.models.batch`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from archsim.models.batch import ARRAYS, EXACT, BatchCost, batch_rates, floats, ints
from archsim.models.dataflow import DataflowEfficiency, DataflowSection, terms, weight_bytes
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Precision
from archsim.workloads.trace import Op


def group_key(chip: ChipSpec) -> str:
    """Every variant of a dataflow chip can be priced with every other: all its numbers are arrays here."""
    return chip.family


class DataflowBatch:
    """:class:`~archsim.models.dataflow.DataflowModel` of many variants of one chip at one precision."""

    separate_units = False

    def __init__(
        self, chips: Sequence[ChipSpec], efficiency: DataflowEfficiency, precision: Precision, footprint_bytes: int
    ) -> None:
        self.eff = efficiency
        fabrics = [c.section_of(DataflowSection) for c in chips]
        pairs = zip(fabrics, chips, strict=True)
        vector = floats(
            [f.vector_flops_per_pe_per_clock.get(precision, 1) * f.processing_elements * c.clock for f, c in pairs]
        )
        rates = batch_rates(chips, precision, vector)
        # every byte an op touches passes through the PEs' SRAM: its roofline uses that bandwidth
        self.rates = dataclasses.replace(rates, dram_bytes_per_s=floats([f.onchip_bandwidth for f in fabrics]))
        self.main_bytes_per_s = floats([c.memory.main.bandwidth for c in chips])
        self.fabric_bytes_per_s = floats([f.fabric_bandwidth for f in fabrics])
        self.resident = footprint_bytes <= ints([f.onchip_memory for f in fabrics])

    def cost(self, op: Op) -> BatchCost | None:
        """Compute against streamed, fabric and on-chip traffic, plus the op cost; None past :data:`EXACT`."""
        eff, rates = self.eff, self.rates
        weights = weight_bytes(op)
        if weights >= EXACT:
            return None
        streamed = np.where(self.resident, 0, weights)
        roofline_s = rates.roofline_s(op)
        compute_s, unit, memory_s, fabric_s, busy_s = terms(
            ARRAYS,
            op,
            eff,
            (rates.matrix_flops_per_s, rates.vector_flops_per_s),
            (self.main_bytes_per_s, self.fabric_bytes_per_s),
            streamed,
            roofline_s,
        )
        overhead_s = np.full(busy_s.shape, eff.op_overhead)
        return BatchCost(
            time_s=busy_s + overhead_s,
            compute_s=np.broadcast_to(compute_s, busy_s.shape),
            memory_s=memory_s,
            overhead_s=overhead_s,
            dram_bytes=streamed,
            roofline_s=roofline_s,
            unit=unit,
            communication_s=fabric_s,
            fill_s=np.zeros(busy_s.shape),
        )


def build_batch(
    chips: Sequence[ChipSpec], efficiency: DataflowEfficiency, precision: Precision, footprint_bytes: int
) -> DataflowBatch:
    """The family's batch-model factory: the footprint decides, per variant, whether the weights stream."""
    return DataflowBatch(chips, efficiency, precision, footprint_bytes)
