"""Energy bounds (issue 17): never below the MACs times the cheapest MAC; more bytes never less energy."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from archsim import simulate
from archsim.models.energy import chip_energy, energy_scale
from archsim.results.power import with_energy
from archsim.spec.library import Library

LIBRARY = Library(use_env=False)
TECH = LIBRARY.energy()
CHIPS = [e.name for e in LIBRARY.entries("chip")]
RESNET = simulate("v100", "resnet50", batch=2, library=LIBRARY)
HBM2_BIT_J = LIBRARY.memory("hbm2").energy_per_bit or 0.0


def _cheapest_mac_j(chip: str) -> float:
    """The smallest per-MAC energy of any precision at the chip's node."""
    return min(TECH.mac.values()) * energy_scale(LIBRARY.chip(chip), TECH)


@settings(max_examples=15, deadline=None)
@given(
    chip=st.sampled_from(CHIPS),
    m=st.integers(1, 2048),
    n=st.integers(1, 2048),
    k=st.integers(1, 2048),
)
def test_a_gemm_never_costs_less_than_its_macs_at_the_cheapest_mac(chip: str, m: int, n: int, k: int) -> None:
    run = simulate(chip, f"gemm:{m}x{n}x{k}", library=LIBRARY)
    macs = run.flops / 2
    assert run.energy_j >= macs * _cheapest_mac_j(chip)
    assert run.energy_breakdown_j["compute"] >= macs * _cheapest_mac_j(chip) * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(
    chip=st.sampled_from(CHIPS),
    matrix=st.booleans(),
    flops=st.integers(0, 10**15),
    dram_bytes=st.integers(0, 10**12),
    more=st.integers(0, 10**12),
    seconds=st.floats(0.0, 10.0),
    longer=st.floats(0.0, 10.0),
)
def test_more_bytes_or_a_longer_op_never_cost_less_energy(
    chip: str, matrix: bool, flops: int, dram_bytes: int, more: int, seconds: float, longer: float
) -> None:
    spec = LIBRARY.chip(chip)
    energy = chip_energy(
        spec, TECH, spec.default_precision, LIBRARY.memory(spec.memory.main.technology).energy_per_bit or 0.0
    )
    base = energy.op_energy(matrix, flops, dram_bytes, seconds)
    assert energy.op_energy(matrix, flops, dram_bytes + more, seconds).total_j >= base.total_j
    assert energy.op_energy(matrix, flops, dram_bytes, seconds + longer).total_j >= base.total_j
    if matrix:
        assert base.compute_j >= flops / 2 * _cheapest_mac_j(chip) * (1 - 1e-12)


@settings(max_examples=10, deadline=None)
@given(layer=st.integers(0, 10**6), factor=st.integers(2, 1000))
def test_a_run_whose_op_moves_more_bytes_never_uses_less_energy(layer: int, factor: int) -> None:
    run = RESNET
    index = layer % len(run.layers)
    layers = list(run.layers)
    layers[index] = replace(layers[index], bytes=layers[index].bytes * factor + 1)
    heavier = with_energy(replace(run, layers=tuple(layers)), LIBRARY.chip("v100"), TECH, HBM2_BIT_J, {})
    assert heavier.energy_j >= run.energy_j
