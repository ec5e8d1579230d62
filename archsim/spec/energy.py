"""Energy and area technology descriptions (``energy/NAME.yaml``, ``kind: energy``).

One file describes a process technology the way Accelergy's energy tables do: what one action costs
(a multiply-accumulate by precision, an element-wise operation, a bit read from registers or on-chip
SRAM) and what one unit of silicon occupies (a MAC by precision, an SRAM bit). Per-op figures are
given at ``reference_node`` and scaled to a chip's ``process`` by the rule stated in
:mod:`archsim.models.energy`. Off-chip memory and link energies are interface figures, not scaled,
and live with what they price: ``energy_per_bit`` of each memory technology
(:class:`archsim.spec.memory.MemorySpec`) and link type (:class:`archsim.spec.link.LinkSpec`). Every
number cites its source in ``sources``, keyed by its YAML path. ``dvfs`` holds the published
voltage-frequency measurement the power limit's throttle follows (:mod:`archsim.models.dvfs`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import ValidationInfo, field_validator, model_validator

from archsim.spec.common import (
    STORED_PRECISIONS,
    Area,
    Energy,
    EnergyPerBit,
    Frequency,
    Length,
    Name,
    PowerDensity,
    Precision,
    Spec,
    Voltage,
)


class VoltageCurve(Spec):
    """One GPU's measured supply voltage against its clock under load: two points and the lowest voltage.

    ``nominal_*``: the top of the curve (the highest clock under load, and the voltage there);
    ``low_*``: the lowest clock under load, and its voltage; ``floor_voltage``: the lowest voltage
    the GPU runs at (its idle state's), below which the voltage stops falling with the clock.
    """

    nominal_clock: Frequency
    nominal_voltage: Voltage
    low_clock: Frequency
    low_voltage: Voltage
    floor_voltage: Voltage

    @field_validator("low_clock", "low_voltage", "floor_voltage")
    @classmethod
    def _below(cls, value: float, info: ValidationInfo) -> float:
        """Each point lies below the one before it: the curve falls from its top to its floor."""
        above = {"low_clock": "nominal_clock", "low_voltage": "nominal_voltage", "floor_voltage": "low_voltage"}
        name = above[str(info.field_name)]
        top = info.data.get(name)
        if top is not None and (value > top if info.field_name == "floor_voltage" else value >= top):
            relation = "at or below" if info.field_name == "floor_voltage" else "below"
            raise ValueError(f"must be {relation} {name}, got {value:g} against {top:g}")
        return value


class EnergySpec(Spec):
    """A process technology's per-action energies and per-unit areas."""

    schema_version: Literal[1]
    kind: Literal["energy"]
    name: Name
    aliases: tuple[Name, ...] = ()
    description: str
    reference_node: Length
    """Process node (nm) at which ``mac``, ``vector_op``, ``sram_read`` and the areas are given."""
    reference_voltage: Voltage
    """Supply voltage at which every per-action energy here is given (Horowitz's table's); a chip's
    own supply prices them at ``(dvfs.nominal_voltage / reference_voltage)^2`` at its nominal clock
    (see :func:`archsim.models.energy.supply_scale`)."""
    default_node: Length
    """Node assumed for a chip whose ``process`` is not published."""
    mac: dict[Precision, Energy]
    """One multiply-accumulate (a multiply and an add) at the reference node, by operand precision."""
    vector_op: dict[Precision, Energy]
    """One element-wise floating-point (or integer) operation at the reference node."""
    register_read: EnergyPerBit
    """One bit read from or written to the registers that feed the matrix unit, at the reference node."""
    sram_read: EnergyPerBit
    """One bit read from or written to an on-chip SRAM buffer at the reference node."""
    l2_read: EnergyPerBit
    """One bit read from a chip-wide last-level SRAM cache (a GPU's L2) at the reference node."""
    mac_area: dict[Precision, Area]
    """Silicon of one MAC unit (multiplier and adder) at the reference node."""
    sram_bit_area: Area
    """Silicon of one SRAM bit (bitcell) at the reference node."""
    transistor_area: dict[Length, Area]
    """Die area per transistor of shipped dies, by process node: the whole die (logic, SRAM, I/O,
    wiring) over its transistor count. Estimates the die of a chip that publishes its transistors
    but not its area (see :func:`archsim.models.energy.die_area`)."""
    static_power_density: PowerDensity
    """Leakage and idle power of one mm^2 of die, whatever the node (static power = density x area)."""
    gate_pitch: dict[Length, Length]
    """Contacted gate pitch of each process node, by the node's name: the physical length that logic
    and SRAM energies scale with (see :func:`archsim.models.energy.energy_scale`)."""
    matrix_lane_cycle: Energy
    """One MAC lane of the matrix unit for one clock while the unit runs an op, whether the lane does
    a MAC or not (lane activation: clocking, operand staging and control), at the reference node."""
    simt_instruction: Energy
    """One lane of one instruction issued on a SIMT core (a GPU's CUDA cores or SIMD lanes): its
    fetch, decode, scheduling and operand fetch from the register file, beside the arithmetic itself,
    at the reference node."""
    simt_lane_cycle: Energy
    """One lane of a SIMT core's floating-point pipeline for one clock while it runs an op (lane
    activation, as ``matrix_lane_cycle`` for the matrix unit), at the reference node."""
    dvfs: VoltageCurve
    """The voltage-frequency curve every chip's power-limit throttle follows, relative to its top; its
    top voltage is every chip's supply at its nominal clock (see :mod:`archsim.models.dvfs`)."""
    sources: dict[str, str]

    @model_validator(mode="after")
    def _complete(self) -> EnergySpec:
        for table in ("mac", "vector_op", "mac_area"):
            missing = [p.value for p in STORED_PRECISIONS if p not in getattr(self, table)]
            if missing:
                raise ValueError(f"{table}: needs every precision, missing {', '.join(missing)}")
        if not self.gate_pitch:
            raise ValueError("gate_pitch: needs at least one node")
        return self
