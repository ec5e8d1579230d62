"""A toy chip family, registered from outside archsim: the example of README "Adding a chip family".

``units`` identical multiply-accumulate units behind one SRAM, priced as a roofline with the
family's efficiencies: a matrix op at ``compute`` of the units' peak, any other op at ``vector`` of
the vector peak, overlapped with its main-memory traffic at ``memory_bandwidth`` of the bandwidth,
plus the software's per-op cost. Importing the module registers the family ``toy`` with its
efficiency values and its software stack (``DEFAULTS``): the family is this module and a chip file.
"""

from __future__ import annotations

from archsim.models.base import ChipRates, OpCost, Unit, chip_rates, finish
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Bytes, Count, Precision
from archsim.spec.registry import (
    FamilyDefaults,
    FamilyDefinition,
    FamilyEfficiency,
    FamilySection,
    Mechanism,
    register_family,
)
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


DEFAULTS = FamilyDefaults(
    efficiency={"compute": 0.8, "memory_bandwidth": 0.8, "vector": 0.5},
    software={
        "name": "toy-runtime",
        "description": "toy runtime launching one kernel per op",
        "dispatch": {
            "mechanism": "kernel-launch",
            "per_op": "5 us",
            "framework": "0 s",
            "host": "2 us",
            "per_step": "0 s",
        },
        "sources": {"dispatch": "example values"},
    },
    sources={"efficiency": "example values, not fitted"},
)
"""The family's efficiency values and its one software stack (what a family file and a software file would say)."""

register_family(
    FamilyDefinition(
        "toy", ToySection, FamilyEfficiency, Mechanism.KERNEL_LAUNCH, build, "Toy roofline chips (a plug-in family)",
        DEFAULTS,
    )
)  # fmt: skip
