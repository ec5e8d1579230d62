"""Invariants every family's cost model keeps, on random ops and on scaled chips."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from archsim.models import CostModel, cost_model_for
from archsim.spec.chip import ChipSpec
from archsim.spec.common import replace_path
from archsim.spec.library import Library
from archsim.workloads.trace import Op
from tests.strategies import any_ops, gemm_ops

CHIPS = ["v100", "a100", "h100", "gc2", "ipu", "ascend910", "tpu-v2", "tpu-v3", "tpu-v4", "systolic-32x32"]
LIBRARY = Library(use_env=False)


def model(chip: ChipSpec, footprint: int = 0) -> CostModel:
    efficiency = LIBRARY.family(chip.family).efficiency.merged(chip.efficiency)
    return cost_model_for(chip, efficiency, chip.default_precision, footprint)


def scaled(chip: ChipSpec, path: str, factor: float) -> ChipSpec:
    value = chip
    for part in path.split("."):
        value = value[part] if isinstance(value, dict) else getattr(value, part)  # type: ignore[index]
    new = type(value)(value * factor)
    return replace_path(chip, path, new)


def section_paths(chip: ChipSpec) -> list[str]:
    """Fields that add compute units, bandwidth or buffer space to this chip."""
    paths = ["memory.main.bandwidth"]
    if chip.tensorcore is not None:
        paths += ["tensorcore.sm_count", "tensorcore.l2_cache", "tensorcore.shared_memory_per_sm"]
    if chip.ipu is not None:
        paths += ["ipu.exchange_bandwidth", "memory.onchip.bandwidth"]
    if chip.cube is not None:
        paths += ["cube.ai_cores"]
    if chip.systolic is not None:
        # a larger array is not "more units": its fill and drain grow, and small products do get slower
        paths += ["systolic.arrays_per_core", "systolic.cores"]
    return paths


@pytest.mark.parametrize("name", CHIPS)
@settings(max_examples=60, deadline=None)
@given(op=any_ops())
def test_never_below_roofline(name: str, op: Op) -> None:
    chip = LIBRARY.chip(name)
    cost = model(chip).cost(op)
    peak = chip.derived_peak(chip.default_precision)
    assert peak is not None
    assert cost.time_s >= cost.roofline_s > 0
    if op.gemm is not None:
        # cycles never below the ideal MAC count over the peak MACs per cycle
        assert cost.time_s >= op.flops / peak * (1 - 1e-12)


@pytest.mark.parametrize("name", CHIPS)
@settings(max_examples=40, deadline=None)
@given(op=gemm_ops())
def test_more_resources_never_slower(name: str, op: Op) -> None:
    chip = LIBRARY.chip(name)
    base = model(chip).cost(op).time_s
    for path in section_paths(chip):
        bigger = scaled(chip, path, 2)
        assert model(bigger).cost(op).time_s <= base * (1 + 1e-12), path
