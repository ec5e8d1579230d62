"""Energy per action, static power and die area of a chip: an Accelergy-style model.

Energy is counted, never fitted. Every op's dynamic energy comes from the counts its cost model
already produced (:class:`archsim.models.base.OpCost` and the op itself):

* the matrix unit's multiply-accumulates (``flops / 2``) times the energy of one MAC at the run's
  precision, or the vector unit's operations (``flops``) times one element-wise operation;
* the matrix unit's operand traffic through its registers: the MACs times the bits each MAC moves
  through them (:func:`operand_bits_per_mac`, from the unit's published shape), at the register energy
  per bit;
* the op's main-memory bytes times the memory technology's ``energy_per_bit`` (an interface figure
  for HBM or DDR, given in ``memory/*.yaml``), plus the same bytes written into and read back out
  of an on-chip SRAM buffer once each (``2 x bytes`` at the SRAM energy per bit), the staging every
  family does between memory and its compute units.
* the operand bytes a tiled GPU matrix kernel stages from the L2 into shared memory (the tensor-core
  cost model's count: every tile's A and B panels over its K loop), read once from the L2 at
  ``l2_read`` and written into and read out of shared memory once each at the SRAM energy per bit.

* while a matrix op runs, the matrix unit's lane activation: every MAC lane of the chip (its MACs
  per clock at its default precision) for every clock of the op, busy or not, at
  ``matrix_lane_cycle`` (AccelWattch's measured lane-activation power of a V100, per lane and clock).
  Only matrix units issued one ``MxNxK`` instruction at a time (tensor cores, Ascend cubes: those
  with a matrix instruction shape) pay it, the kind of unit AccelWattch measured; systolic arrays,
  IPU AMP units and dataflow fabrics have no published figure and pay none.

* work on a GPU's SIMT cores (CUDA cores, SIMD lanes: :meth:`~archsim.spec.registry.FamilySection.
  simt_ops_per_instruction`) -- element-wise ops, and matrix products at a precision the matrix unit
  lacks (every precision on a P100, fp32 on a V100) -- pays ``simt_instruction`` per lane instruction
  (fetch, decode, scheduling and operand fetch, so no separate register energy), and a matrix op run
  there pays the SIMT lanes' activation (``simt_lane_cycle``, AccelWattch's INT+FP category) instead of
  the matrix unit's.

* while an element-wise op runs on a GPU's SIMT cores, the same SIMT lane activation: every FP32 lane
  of the chip for every clock of the op. AccelWattch's static model charges each sample whose warps
  use the INT and FP units the INT+FP category's lane-activation power (``static_cat2``, the figure
  ``simt_lane_cycle`` is derived from), whatever the kernel; an element-wise kernel (its address
  arithmetic and its FP operation) is such a kernel. Vector units without a SIMT core (systolic
  chips, IPUs, cubes' vector units) pay none: no published figure.

* an element-wise op on a GPU's SIMT cores moves its main-memory bytes through the L2, which sits
  between the SMs and memory (every read fills an L2 line, every write lands in one before it is
  written back): each byte is written into and read out of the L2 once, ``2 x bytes`` at ``l2_read``.
  A tiled matrix kernel's L2 reads are already its staged panels (the count above).

The L2's traffic with main memory under a tiled matrix kernel, the load and store instructions of
element-wise kernels, the operand networks and wires are not counted per action, and neither is the
issue of matrix instructions (a tensor-core MMA amortizes it over its MxNxK MACs): no cost model
produces those counts, so the dynamic energy is a lower bound of what the silicon spends.

**Process-node scaling.** Logic and SRAM figures are given at the technology's ``reference_node``
(45 nm). At node ``L`` an energy is ``E x P(L) / P(L_ref)`` (:func:`energy_scale`), ``P`` the
node's contacted gate pitch (``gate_pitch``): switched capacitance shrinks with the physical
dimensions of the cells and wires, while the supply voltage, about 0.9 V at 45 nm, has stopped
scaling (Horowitz ISSCC 2014; the supply a chip runs at is priced separately, below). Below about
20 nm a node's name is no longer a physical length (TSMC
"12 nm" has 16 nm's 90 nm pitch; "4 nm" N5's 51 nm), so scaling by the name, as this model once
did, priced a 4 nm MAC at a third of what its pitch implies. Between two nodes of the table the
pitch is interpolated on log scales; above the largest node it grows in proportion to the name
(the planar nodes, where name and pitch still scaled together); below the smallest it is held at
the smallest node's pitch (3 nm and 2 nm are not in the table, so their energies are overstated
by their pitch shrink, about 6%). An area is ``A x (L / L_ref)^2`` by the node's name. A chip whose
process is not published is priced at ``default_node``.

**Area.** The published die area where there is one; else, where the chip publishes its transistor
count, that count at the die area per transistor of shipped dies of its node (whole dies: logic,
SRAM, I/O and wiring); otherwise the modelled area: MAC units (one per whole-chip MAC per clock at
the chip's default precision) plus on-chip SRAM bitcells (see :func:`onchip_memory_bytes`), each at
the node's area. I/O and wiring are not modelled, so a modelled area is a lower bound; it grows with
the array and the SRAM, as does static power. A variant of a chip with a published or estimated
whole-die area (a sweep's) has that area plus the change in modelled area.

**Supply voltage.** Horowitz's figures are at 0.9 V (``reference_voltage``), and the lane-activation
figures derived from AccelWattch's GV100 are brought to it. A GPU's published clock is a boost clock
(:attr:`~archsim.spec.registry.FamilyDefinition.boost_clock`), which it reaches at the top of its
voltage-frequency curve: its supply there is taken to be the measured curve's top
(``dvfs.nominal_voltage``, 1.068 V), so every action on it spends ``(1.068 / 0.9)^2 = 1.41`` times its
0.9 V energy (:func:`supply_scale`). Two measurements of a GV100 at 1447 MHz bound the factor: a
tensor-core GEMM and an SGEMM (``tests/validation/test_power.py``) both hold within 15% only for a
factor of 1.10 to 1.24 there, and the curve puts a V100 at 1447 MHz (0.946 of its nominal clock) at
0.996 V, a factor of 1.23. A chip of a family with a fixed clock (systolic arrays, IPUs, cubes,
dataflow fabrics) is priced at the reference voltage: Google's measured TPU v4 power (mean 170 W,
maximum 192 W) is what its 0.9 V energies give, and the GPU curve's top would put it past 192 W. Main
memory and links are on their own supplies and keep their energy per bit, and the static power is a
measured idle draw, not scaled. No datacenter accelerator publishes its own voltage.

**Static power** (leakage and idle clocking) is ``static_power_density x area`` while the chip is
powered, the whole step.

**Power limit.** Where a step would pass the chip's TDP, the clock and the supply voltage fall
together along a published voltage-frequency curve, and every action on the chip's own supply
spends ``(V/V0)^2`` of its energy: :mod:`archsim.models.dvfs` (:attr:`ChipEnergy.voltage`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from archsim.models.dvfs import VoltageRule
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Precision, parse_shape
from archsim.spec.energy import EnergySpec
from archsim.spec.registry import family_definition

BITS_PER_BYTE = 8
ACCUMULATOR_BITS = 32
"""Matrix units accumulate in fp32 (int32 for int8 and int4): a partial sum moves 32 bits."""
SRAM_ACCESSES_PER_DRAM_BYTE = 2
"""Each byte from main memory is written into an on-chip buffer once and read out of it once."""
L2_ACCESSES_PER_DRAM_BYTE = 2
"""An element-wise op's byte from or to a GPU's main memory is written into its L2 once and read out once."""


def onchip_memory_bytes(chip: ChipSpec) -> int:
    """SRAM bytes on one chip: its family section's and its on-chip cache's (``memory.cache``).

    The section's (:meth:`~archsim.spec.registry.FamilySection.onchip_bytes`): the operand SRAMs of
    every array (systolic), tile memory (IPU), shared memory and L2 (GPU), the L0/L1/unified buffers
    of every core and L2 (Ascend). The cache: TPU v4's CMEM.
    """
    cache = chip.memory.cache
    return chip.section.onchip_bytes() + (0 if cache is None else cache.capacity)


def operand_bits_per_mac(chip: ChipSpec, precision: Precision) -> float:
    """Bits one MAC of the matrix unit moves through its registers, from the unit's shape.

    * tensor cores and Ascend cubes (an ``MxNxK`` operation per instruction): the ``A`` (``MxK``) and
      ``B`` (``KxN``) operands read at the element width, the ``C`` accumulators read and ``D`` written at
      32 bits, over the ``MxNxK`` MACs;
    * systolic arrays: each PE latches one operand from each neighbour per MAC -- ifmap and filter
      (``os``, the partial sum stays), or one operand and a 32-bit partial sum (``ws``, ``is``);
    * IPU AMP units (whose shape is not published): both operands at the element width, no reuse.
    """
    element = precision.bits
    shape = chip.section.matrix_instruction_shape()
    if shape is not None:
        m, n, k = parse_shape(shape, 3)
        return ((m * k + k * n) * element + 2 * m * n * ACCUMULATOR_BITS) / (m * n * k)
    if chip.section.latches_partial_sums():
        return float(element + ACCUMULATOR_BITS)
    return float(2 * element)


def process_nm(chip: ChipSpec, tech: EnergySpec) -> float:
    """The chip's process node in nm, or the technology's ``default_node`` when not published."""
    return chip.process if isinstance(chip.process, float) else tech.default_node


def _log_interpolate(table: dict[float, float], node: float) -> float:
    """``table``'s value at ``node`` (within its nodes), interpolated on log scales between two nodes."""
    nodes = sorted(table)
    below = max(n for n in nodes if n <= node)
    above = min(n for n in nodes if n >= node)
    if below == above:
        return table[below]
    weight = math.log(node / below) / math.log(above / below)
    return float(table[below] * (table[above] / table[below]) ** weight)


def gate_pitch_nm(node_nm: float, tech: EnergySpec) -> float:
    """Contacted gate pitch (nm) of a process node, from ``tech.gate_pitch`` (see the module docstring).

    Interpolated on log scales between two nodes of the table; above its largest node, in proportion
    to the node's name; below its smallest, the smallest node's pitch.
    """
    nodes = sorted(tech.gate_pitch)
    if node_nm > nodes[-1]:
        return tech.gate_pitch[nodes[-1]] * node_nm / nodes[-1]
    return _log_interpolate(tech.gate_pitch, max(node_nm, nodes[0]))


def energy_scale(chip: ChipSpec, tech: EnergySpec) -> float:
    """Logic and SRAM energy at ``chip``'s node over the reference node's: the ratio of their gate pitches."""
    return gate_pitch_nm(process_nm(chip, tech), tech) / gate_pitch_nm(tech.reference_node, tech)


def supply_scale(tech: EnergySpec) -> float:
    """Energy of an action on a boosting chip's supply at its nominal clock over the same at ``reference_voltage``.

    ``C V^2``: a chip whose published clock is a boost clock runs it at the top of the measured
    voltage-frequency curve (``dvfs.nominal_voltage``), above the 0.9 V of Horowitz's table (see the
    module docstring).
    """
    return (tech.dvfs.nominal_voltage / tech.reference_voltage) ** 2


def boosts(chip: ChipSpec) -> bool:
    """Whether ``chip``'s family publishes boost clocks (``boost_clock`` of its family definition)."""
    return family_definition(chip.family).boost_clock


def modelled_area_mm2(chip: ChipSpec, tech: EnergySpec) -> float:
    """Die area from MAC units and SRAM bitcells at the chip's node (a lower bound: no I/O, no wiring)."""
    area_scale = (process_nm(chip, tech) / tech.reference_node) ** 2
    macs = chip.macs_per_clock(chip.default_precision) or 0
    logic = macs * tech.mac_area[chip.default_precision]
    sram = onchip_memory_bytes(chip) * BITS_PER_BYTE * tech.sram_bit_area
    return (logic + sram) * area_scale


@dataclass(frozen=True, slots=True)
class ChipEnergy:
    """One chip's per-action energies (J) at one precision, its area (mm^2) and static power (W)."""

    mac_j: float
    vector_op_j: float
    register_mac_j: float
    """Register traffic of one MAC: :func:`operand_bits_per_mac` at the register energy per bit."""
    sram_bit_j: float
    dram_bit_j: float
    matrix_active_w: float
    """Lane activation while a matrix op runs: the matrix unit's lanes x clock x ``matrix_lane_cycle``,
    or, where the precision's matrix work runs on SIMT cores, their lanes x clock x ``simt_lane_cycle``."""
    vector_active_w: float
    """Lane activation while an element-wise op runs on SIMT cores: their FP32 lanes x clock x
    ``simt_lane_cycle`` (0 on a chip whose element-wise work runs on no SIMT core)."""
    area_mm2: float
    area_source: str
    """How ``area_mm2`` was found: ``published``, ``from transistors``, either ``, resized``, or ``modelled``."""
    static_w: float
    voltage: VoltageRule
    """How the supply voltage follows the clock when the power limit throttles it (:mod:`archsim.models.dvfs`)."""
    matrix_instruction_j: float = 0.0
    """SIMT instruction issue per MAC of a matrix op run on SIMT cores (0 on a matrix unit)."""
    vector_instruction_j: float = 0.0
    """SIMT instruction issue per FLOP of an element-wise op run on SIMT cores (0 elsewhere)."""
    l2_bit_j: float = 0.0
    """One bit read from the L2 (:attr:`~archsim.spec.energy.EnergySpec.l2_read`, node-scaled)."""
    vector_l2_bit_j: float = 0.0
    """L2 energy per main-memory bit of an element-wise op: one write into the L2 and one read out of
    it (``2 x l2_bit_j``) on a GPU, whose SIMT cores reach memory through the L2; 0 elsewhere."""

    @property
    def smallest_op_j(self) -> float:
        """The cheapest arithmetic action: a lower bound of the energy of each FLOP pair."""
        return min(self.mac_j, self.vector_op_j)

    def op_energy(self, matrix: bool, flops: int, dram_bytes: int, seconds: float, onchip_bytes: int = 0) -> OpEnergy:
        """Dynamic energy of one op from its counts and its time at the nominal clock (module docstring).

        ``onchip_bytes``: operand bytes staged from the L2 into shared memory (the cost model's count).
        """
        compute_j = flops / 2 * self.mac_j if matrix else flops * self.vector_op_j
        bits = dram_bytes * BITS_PER_BYTE
        staged = onchip_bytes * BITS_PER_BYTE
        return OpEnergy(
            compute_j=compute_j,
            register_j=flops / 2 * self.register_mac_j if matrix else 0.0,
            sram_j=SRAM_ACCESSES_PER_DRAM_BYTE * (bits + staged) * self.sram_bit_j,
            l2_j=staged * self.l2_bit_j + (0.0 if matrix else bits * self.vector_l2_bit_j),
            dram_j=bits * self.dram_bit_j,
            activation_j=(self.matrix_active_w if matrix else self.vector_active_w) * seconds,
            instruction_j=flops / 2 * self.matrix_instruction_j if matrix else flops * self.vector_instruction_j,
        )


@dataclass(frozen=True, slots=True)
class OpEnergy:
    """Dynamic energy of one op on one chip, by where it was spent (J)."""

    compute_j: float
    register_j: float
    sram_j: float
    dram_j: float
    l2_j: float
    """The L2 reads of the operand bytes staged into shared memory, or an element-wise op's main-memory
    bytes passing through a GPU's L2 (0 where the model counts none)."""
    activation_j: float
    """Lane activation over the op's time: the matrix unit's (or the SIMT lanes' for matrix work run on
    them), or for an element-wise op the SIMT lanes' (0 where no SIMT core runs it)."""
    instruction_j: float = 0.0
    """SIMT instruction issue (fetch, decode, operand fetch) of an op run on SIMT cores."""

    @property
    def core_j(self) -> float:
        """What is spent on the chip's own supply (all but main memory): what a lower voltage lowers."""
        return self.total_j - self.dram_j

    def at_voltage(self, core_energy_scale: float) -> float:
        """The total at a lower supply voltage: ``core_j`` times ``(V/V0)^2``, main memory unchanged."""
        if core_energy_scale == 1.0:  # the nominal voltage: exactly :attr:`total_j`
            return self.total_j
        return self.core_j * core_energy_scale + self.dram_j

    @property
    def total_j(self) -> float:
        """All of it."""
        return (
            self.compute_j
            + self.register_j
            + self.sram_j
            + self.l2_j
            + self.dram_j
            + self.activation_j
            + self.instruction_j
        )


def transistor_area_mm2(chip: ChipSpec, tech: EnergySpec) -> float | None:
    """Die area estimated from the chip's published transistor count, or None without one.

    Each transistor takes the die area per transistor of shipped dies at the chip's node
    (``tech.transistor_area``; between two nodes of the table, interpolated on log scales; outside
    it, the nearest node's figure). None when the chip publishes no transistors or no node.
    """
    table = tech.transistor_area
    if chip.transistors is None or not isinstance(chip.process, float) or not table:
        return None
    nodes = sorted(table)
    node = min(max(chip.process, nodes[0]), nodes[-1])
    return float(chip.transistors * _log_interpolate(table, node))


def _whole_die(chip: ChipSpec, tech: EnergySpec) -> tuple[float, str] | None:
    """The die's area from a published figure, else from its transistors, else None."""
    if isinstance(chip.die_area, float):
        return chip.die_area, "published"
    estimate = transistor_area_mm2(chip, tech)
    if estimate is None:
        return None
    return max(estimate, modelled_area_mm2(chip, tech)), "from transistors"


def die_area(chip: ChipSpec, tech: EnergySpec, original: ChipSpec | None = None) -> tuple[float, str]:
    """The chip's die area (mm^2) and how it was found.

    ``published``: the chip's published die area. ``from transistors``: no published area, but a
    published transistor count, at the area per transistor of its node (:func:`transistor_area_mm2`).
    ``..., resized``: ``chip`` is a variant of ``original`` (a sweep's, say) whose modelled area
    differs, so the whole die's area changes by the difference in modelled area (the silicon added
    or removed). ``modelled``: neither, :func:`modelled_area_mm2`.
    """
    whole = _whole_die(chip, tech)
    if whole is None:
        return modelled_area_mm2(chip, tech), "modelled"
    area, source = whole
    change = 0.0 if original is None else modelled_area_mm2(chip, tech) - modelled_area_mm2(original, tech)
    if change == 0.0:
        return area, source
    return max(area + change, modelled_area_mm2(chip, tech)), f"{source}, resized"


def chip_energy(
    chip: ChipSpec,
    tech: EnergySpec,
    precision: Precision,
    dram_bit_j: float,
    original: ChipSpec | None = None,
) -> ChipEnergy:
    """Resolve ``chip``'s per-action energies at ``precision`` from ``tech``.

    Every energy on the chip's own supply is scaled by :func:`energy_scale` (its node) and, on a
    chip that publishes a boost clock, :func:`supply_scale` (its voltage there).

    ``dram_bit_j`` is the ``energy_per_bit`` of the chip's main-memory technology (an interface
    figure, not scaled). ``original`` is the description ``chip`` varies, if any (see :func:`die_area`).
    """
    scale = energy_scale(chip, tech) * (supply_scale(tech) if boosts(chip) else 1.0)
    area, area_source = die_area(chip, tech, original)
    section = chip.section
    simt_matrix = section.simt_ops_per_instruction(precision, matrix=True)
    simt_vector = section.simt_ops_per_instruction(precision, matrix=False)
    issue_j = tech.simt_instruction * scale
    simt_active_w = section.simt_lanes() * chip.clock * tech.simt_lane_cycle * scale
    if simt_matrix is not None:  # matrix work on SIMT cores: operands fetched by each lane instruction
        register_mac_j, matrix_active_w = 0.0, simt_active_w
    else:
        # lane activation as AccelWattch measured it: matrix units issued an MxNxK instruction at a time
        instructed = section.matrix_instruction_shape() is not None
        lanes = (chip.macs_per_clock(chip.default_precision) or 0) if instructed else 0
        register_mac_j = operand_bits_per_mac(chip, precision) * tech.register_read * scale
        matrix_active_w = lanes * chip.clock * tech.matrix_lane_cycle * scale
    return ChipEnergy(
        mac_j=tech.mac[precision] * scale,
        vector_op_j=tech.vector_op[precision] * scale,
        register_mac_j=register_mac_j,
        sram_bit_j=tech.sram_read * scale,
        l2_bit_j=tech.l2_read * scale,
        dram_bit_j=dram_bit_j,
        matrix_active_w=matrix_active_w,
        vector_active_w=0.0 if simt_vector is None else simt_active_w,
        area_mm2=area,
        area_source=area_source,
        static_w=tech.static_power_density * area,
        voltage=VoltageRule.of(tech.dvfs),
        vector_l2_bit_j=0.0 if simt_vector is None else L2_ACCESSES_PER_DRAM_BYTE * tech.l2_read * scale,
        matrix_instruction_j=0.0 if simt_matrix is None else issue_j / simt_matrix,
        vector_instruction_j=0.0 if simt_vector is None else issue_j / simt_vector,
    )
