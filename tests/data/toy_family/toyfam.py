"""A toy chip family, registered from outside archsim: the example of README "Adding a chip family".

``units`` identical multiply-accumulate units behind one SRAM, priced as a roofline with the
family's efficiencies: a matrix op at ``compute`` of the units' peak, any other op at ``vector`` of
the vector peak, overlapped with its main-memory traffic at ``memory_bandwidth`` of the bandwidth,
plus the software's per-op cost. Importing the module registers the family ``toy``.
"""

from __future__ import annotations

from archsim.models.base import ChipRates, OpCost, Unit, chip_rates, finish
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Bytes, Count, Precision
from archsim.spec.registry import FamilyDefinition, FamilyEfficiency, FamilySection, Mechanism, register_family
from archsim.workloads.trace import Op


class ToySection(FamilySection):
    """The ``toy:`` section of a chip file."""

    peak_counts = ("units",)

    units: Count
    mac_per_unit_per_clock: dict[Precision, Count]
    """Multiply-accumulates per clock of one unit, by precision."""
    vector_ops_per_clock: dict[Precision, Count]
    """Element-wise operations per clock of the whole chip, by precision."""
    sram: Bytes

    def macs_per_clock(self, precision: Precision) -> int | None:
        """MACs per clock of all units at ``precision`` (None: not supported)."""
        per_unit = self.mac_per_unit_per_clock.get(precision)
        return None if per_unit is None else per_unit * self.units

    def onchip_bytes(self) -> int:
        """The one SRAM."""
        return self.sram


class ToyModel:
    """Roofline cost model of a toy chip at one precision."""

    separate_units = False

    def __init__(self, chip: ChipSpec, efficiency: FamilyEfficiency, precision: Precision) -> None:
        section = chip.section_of(ToySection)
        self.chip = chip
        self.precision = precision
        self.eff = efficiency
        vector_flops = section.vector_ops_per_clock.get(precision, 1) * chip.clock
        self.rates: ChipRates = chip_rates(chip, efficiency, precision, vector_flops)

    def cost(self, op: Op) -> OpCost:
        """Compute at the efficiency of its unit, overlapped with its memory traffic, plus the per-op cost."""
        if op.kind.is_matrix:
            compute_s, unit = op.flops / (self.rates.matrix_flops_per_s * self.eff.compute), Unit.MATRIX
        else:
            compute_s, unit = op.flops / (self.rates.vector_flops_per_s * self.eff.vector), Unit.VECTOR
        memory_s = op.bytes / (self.rates.dram_bytes_per_s * self.eff.memory_bandwidth)
        return finish(self.rates, op, compute_s, memory_s, self.eff.op_overhead, op.bytes, unit)


def build(chip: ChipSpec, efficiency: FamilyEfficiency, precision: Precision, footprint_bytes: int) -> ToyModel:
    """The family's model factory (main memory holds the whole footprint)."""
    return ToyModel(chip, efficiency, precision)


register_family(
    FamilyDefinition("toy", ToySection, FamilyEfficiency, Mechanism.KERNEL_LAUNCH, build, "a toy roofline chip")
)
