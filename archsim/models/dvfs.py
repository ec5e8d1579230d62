"""The power limit's throttle: the clock and the supply voltage fall together, as a GPU's DVFS lowers them.

When a step's average power (its dynamic energy over its time, plus the static power) would pass
the chip's power limit (its published TDP), the chip runs the step at a lower clock, a fraction
``s`` of nominal (``clock_scale``), and at the lower supply voltage its DVFS pairs with that clock.

**The voltage-frequency rule.** The voltage follows one published measurement of a GPU's voltage
against its clock under load (``dvfs`` in ``energy/cmos.yaml``: two points, the top of the curve
``(f0, V0)`` and its low end ``(f1, V1)``, and the lowest voltage the GPU uses, ``Vmin``), taken
relative to its top and applied to every chip at its own nominal clock::

    V(s) / V0 = max(Vmin / V0, 1 - k (1 - s)),    k = (1 - V1 / V0) / (1 - f1 / f0)

a straight line through the two measured points, held at the floor below the clock where it reaches
``Vmin`` (:class:`VoltageRule`). The measured GPU's curve stands for every chip's: no accelerator in
the library publishes its own, and the relative shape of a CMOS voltage-frequency curve near its top
is set by the transistors' delay against their supply, much alike across the nodes and vendors measured.

**Energy at the lower voltage.** The dynamic energy of an action on the chip's own supply (its
arithmetic, register, SRAM and L2 accesses, lane activation and instruction issue: ``core_j``)
scales with ``(V/V0)^2`` (``C V^2`` per switched capacitance); main-memory and link energies are
paid on the memory's and the links' own supplies and keep their energy per bit (``other_j``). The
whole step stretches to ``T / s``, so its dynamic power is::

    P(s) = s / T x (core_j (V(s)/V0)^2 + other_j)

which rises with ``s``; :func:`throttle` solves ``P(s) = limit - static`` for ``s`` (in closed form
on the floor, where ``P`` is linear in ``s``; by bisection above it, to machine precision, a fixed
number of halvings: deterministic). Static power (leakage and idle clocking) is held at its nominal
figure, an upper bound (leakage falls with the voltage too). The whole step is taken to slow with
the clock, which overstates the slowdown of memory-bound ops.
"""

from __future__ import annotations

from dataclasses import dataclass

from archsim.errors import SpecError
from archsim.spec.energy import VoltageCurve

BISECTION_STEPS = 64
"""Halvings of the clock interval: past a double's 53-bit mantissa, so the answer is exact to rounding."""


@dataclass(frozen=True, slots=True)
class VoltageRule:
    """Supply voltage as a fraction of nominal, against the clock as a fraction of nominal."""

    slope: float
    """``k``: the fall of ``V/V0`` per unit fall of ``f/f0`` (the measured curve's slope at its top)."""
    floor: float
    """``Vmin/V0``: the lowest voltage fraction; the voltage stops falling below the clock that reaches it."""

    @classmethod
    def of(cls, curve: VoltageCurve) -> VoltageRule:
        """The rule through a measured curve's two points, held at its lowest voltage."""
        slope = (1.0 - curve.low_voltage / curve.nominal_voltage) / (1.0 - curve.low_clock / curve.nominal_clock)
        return cls(slope, curve.floor_voltage / curve.nominal_voltage)

    @property
    def knee(self) -> float:
        """The clock fraction at which the line reaches the floor (0 when it never does above zero clock)."""
        return max(0.0, 1.0 - (1.0 - self.floor) / self.slope)

    def voltage_scale(self, clock_scale: float) -> float:
        """``V/V0`` at ``clock_scale`` (a fraction of nominal in (0, 1])."""
        return max(self.floor, 1.0 - self.slope * (1.0 - clock_scale))


@dataclass(frozen=True, slots=True)
class Throttle:
    """What the power limit did to a step: the clock's and the voltage's fraction of nominal, the step's length."""

    clock_scale: float
    """1.0 when the modelled power stays within the limit."""
    step_time_s: float
    voltage_scale: float = 1.0
    """The supply voltage's fraction of nominal at ``clock_scale`` (:meth:`VoltageRule.voltage_scale`)."""

    @property
    def core_energy_scale(self) -> float:
        """The factor on the dynamic energy of every action on the chip's own supply: ``(V/V0)^2``."""
        return self.voltage_scale**2


def throttle(
    core_j: float, other_j: float, static_w: float, step_time_s: float, limit_w: float | None, rule: VoltageRule
) -> Throttle:
    """Lower the clock and the voltage (``rule``) until the step's average power is ``limit_w``.

    ``core_j``: the step's dynamic energy on the chip's own supply at nominal voltage; ``other_j``:
    its main-memory and link energy (see the module docstring). Without a published limit, or within
    it, nothing throttles. A limit at or below the static power cannot be met: a SpecError.
    """
    dynamic_j = core_j + other_j
    if limit_w is None or step_time_s <= 0.0 or dynamic_j / step_time_s + static_w <= limit_w:
        return Throttle(1.0, step_time_s)
    if limit_w <= static_w:
        raise SpecError("", "tdp", f"{limit_w:g} W is at or below the modelled static power {static_w:.3g} W")
    budget_j = (limit_w - static_w) * step_time_s  # s x (energy at s's voltage) must equal it

    def spent(s: float) -> float:
        return s * (core_j * rule.voltage_scale(s) ** 2 + other_j)

    knee = rule.knee
    if spent(knee) >= budget_j:  # on the floor: the voltage is fixed, the energy too
        scale = budget_j / (core_j * rule.floor**2 + other_j)
    else:
        low, high = knee, 1.0
        for _ in range(BISECTION_STEPS):
            middle = 0.5 * (low + high)
            low, high = (middle, high) if spent(middle) < budget_j else (low, middle)
        scale = low
    return Throttle(scale, step_time_s / scale, rule.voltage_scale(scale))
