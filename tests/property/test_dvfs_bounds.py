"""The DVFS throttle's bounds: held at the limit, never worse than fixed voltage, monotone, energy-consistent."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsim import simulate
from archsim.models.dvfs import VoltageRule, throttle
from archsim.models.energy import energy_scale
from archsim.results.power import with_energy
from archsim.spec.library import Library

LIBRARY = Library(use_env=False)
TECH = LIBRARY.energy()
RULE = VoltageRule.of(TECH.dvfs)
H100 = LIBRARY.chip("h100")
HBM3_BIT_J = LIBRARY.memory(H100.memory.main.technology).energy_per_bit or 0.0
joules = st.floats(0.0, 1e4, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(
    core=joules, other=joules, static=st.floats(0.0, 500.0), seconds=st.floats(1e-6, 10.0), limit=st.floats(1.0, 1e4)
)
def test_a_throttled_step_draws_its_limit_and_loses_no_more_clock_than_at_fixed_voltage(
    core: float, other: float, static: float, seconds: float, limit: float
) -> None:
    if limit <= static:
        return
    held = throttle(core, other, static, seconds, limit, RULE)
    assert 0.0 < held.clock_scale <= 1.0 and RULE.floor <= held.voltage_scale <= 1.0
    assert held.step_time_s == pytest.approx(seconds / held.clock_scale)
    power = (core * held.core_energy_scale + other) / held.step_time_s + static
    assert power <= limit * (1 + 1e-9)
    if held.clock_scale < 1.0:
        assert power == pytest.approx(limit, rel=1e-9)
        fixed = (limit - static) * seconds / (core + other)  # each action keeping its energy
        assert held.clock_scale >= fixed * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(core=joules, other=joules, low=st.floats(10.0, 1e3), high=st.floats(10.0, 1e3))
def test_a_higher_limit_never_gives_a_slower_clock_or_a_lower_voltage(
    core: float, other: float, low: float, high: float
) -> None:
    low, high = sorted((low, high))
    slower = throttle(core, other, 5.0, 1.0, low, RULE)
    faster = throttle(core, other, 5.0, 1.0, high, RULE)
    assert slower.clock_scale <= faster.clock_scale and slower.voltage_scale <= faster.voltage_scale


@settings(max_examples=8, deadline=None)
@given(tdp=st.integers(150, 800), side=st.sampled_from([1024, 2048, 4096]))
def test_a_throttled_gemm_never_costs_less_than_its_macs_at_the_lowest_voltage(tdp: int, side: int) -> None:
    entry = LIBRARY.find(["chip"], "h100")
    capped = LIBRARY.with_specs({entry: H100.model_copy(update={"tdp": float(tdp)})})
    run = simulate("h100", f"gemm:{side}x{side}x{side}", library=capped)
    cheapest = min(TECH.mac.values()) * energy_scale(H100, TECH) * RULE.floor**2
    assert run.energy_breakdown_j["compute"] >= run.flops / 2 * cheapest * (1 - 1e-12)
    assert run.power_w <= tdp * (1 + 1e-9)


@settings(max_examples=8, deadline=None)
@given(layer=st.integers(0, 10**6), factor=st.integers(2, 1000))
def test_a_throttled_run_whose_op_moves_more_bytes_never_uses_less_energy(layer: int, factor: int) -> None:
    # more bytes raise the power, so the throttle lowers the voltage further: the step still costs more
    run = simulate("h100", "resnet50", batch=8, library=LIBRARY)
    throttled = with_energy(run, H100.model_copy(update={"tdp": 200.0}), TECH, HBM3_BIT_J, {})
    assert throttled.clock_scale < 1.0
    index = layer % len(run.layers)
    layers = list(run.layers)
    layers[index] = replace(layers[index], bytes=layers[index].bytes * factor + 1)
    heavier = with_energy(
        replace(run, layers=tuple(layers)), H100.model_copy(update={"tdp": 200.0}), TECH, HBM3_BIT_J, {}
    )
    assert heavier.energy_j >= throttled.energy_j * (1 - 1e-12)
