"""Invariants every family's cost model keeps, on random ops and on scaled chips."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsim.api import Target, run_trace
from archsim.models import CostModel, cost_model_for
from archsim.models.base import Bound
from archsim.spec.chip import ChipSpec
from archsim.spec.common import replace_path
from archsim.spec.library import Library
from archsim.stack import default_efficiency
from archsim.testing.strategies import gemm_ops, ops, traces
from archsim.workloads.trace import Gemm, Mode, Op, OpKind, Phase, Role, TensorAccess, Trace

CHIPS = ["v100", "a100", "h100", "gc2", "ipu", "ascend910", "tpu-v2", "tpu-v3", "tpu-v4", "systolic-32x32"]
CHIPS += ["cerebras-wse2", "sambanova-sn10"]
LIBRARY = Library(use_env=False)


def model(chip: ChipSpec, footprint: int = 0) -> CostModel:
    efficiency = default_efficiency(LIBRARY, chip)
    return cost_model_for(chip, efficiency, chip.default_precision, footprint)


def scaled(chip: ChipSpec, path: str, factor: float) -> ChipSpec:
    value = chip
    for part in path.split("."):
        if isinstance(value, dict):
            value = value[part]
        else:  # a family section is addressed by its key in the chip file, as replace_path does
            value = value.section if part == chip.family and value is chip else getattr(value, part)  # type: ignore[attr-defined]
    new = type(value)(value * factor)
    return replace_path(chip, path, new)


def section_paths(chip: ChipSpec) -> list[str]:
    """Fields that add compute units, bandwidth or buffer space to this chip."""
    paths = ["memory.main.bandwidth"]
    if chip.family == "tensorcore":
        paths += ["tensorcore.sm_count", "tensorcore.l2_cache", "tensorcore.shared_memory_per_sm"]
    if chip.family == "ipu":
        paths += ["ipu.exchange_bandwidth", "memory.onchip.bandwidth", "ipu.tile_sram"]
    if chip.family == "cube":
        paths += ["cube.ai_cores", "cube.l0a", "cube.l0b", "cube.l0c", "cube.l1"]
    if chip.family == "dataflow":
        paths += ["dataflow.processing_elements", "dataflow.onchip_memory", "dataflow.fabric_bandwidth"]
        paths += ["dataflow.onchip_bandwidth"]
    if chip.family == "systolic":
        # a larger array is not "more units": its fill and drain grow, and small products do get slower
        paths += ["systolic.arrays_per_core", "systolic.cores"]
        paths += ["systolic.ifmap_sram", "systolic.filter_sram", "systolic.ofmap_sram"]
    return paths


@pytest.mark.parametrize("name", CHIPS)
@settings(max_examples=60, deadline=None)
@given(op=ops())
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
@given(op=ops())
def test_more_resources_never_slower(name: str, op: Op) -> None:
    """Every kind of op, every convolution pass, training batch-norms (which re-read beyond on-chip memory)."""
    chip = LIBRARY.chip(name)
    base = model(chip).cost(op).time_s
    for path in section_paths(chip):
        bigger = scaled(chip, path, 2)
        assert model(bigger).cost(op).time_s <= base * (1 + 1e-12), path


@pytest.mark.parametrize("name", ["gc2", "ipu"])
@settings(max_examples=40, deadline=None)
@given(op=gemm_ops(), fill=st.floats(min_value=0.0, max_value=1.5))
def test_ipu_more_tile_sram_or_streaming_bandwidth_never_slower(name: str, op: Op, fill: float) -> None:
    """With the resident data filling ``fill`` of the in-processor memory, partitions spill."""
    chip = LIBRARY.chip(name)
    assert chip.memory.onchip is not None
    footprint = int(fill * chip.memory.onchip.capacity)
    base = model(chip, footprint).cost(op).time_s
    for path in ("ipu.tile_sram", "memory.main.bandwidth", "ipu.exchange_bandwidth"):
        assert model(scaled(chip, path, 2), footprint).cost(op).time_s <= base * (1 + 1e-12), path


@pytest.mark.parametrize("name", CHIPS)
@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_utilization_never_above_one(name: str, data: st.DataObject) -> None:
    chip = LIBRARY.chip(name)
    trace: Trace = data.draw(traces(chip.default_precision))
    result = run_trace(Target(chip.name, chip), trace, LIBRARY)
    assert 0 <= result.utilization <= 1


TERMS = {
    Bound.COMPUTE: "compute_s",
    Bound.MEMORY: "memory_s",
    Bound.COMMUNICATION: "communication_s",
    Bound.OVERHEAD: "overhead_s",
}


@pytest.mark.parametrize("name", CHIPS)
@pytest.mark.parametrize("software", [None, "framework"])
@settings(max_examples=40, deadline=None)
@given(op=ops())
def test_the_bound_label_names_the_largest_term(name: str, software: str | None, op: Op) -> None:
    """Issue 13.3: never ``compute`` when another term is larger; no main-memory bytes, never ``memory``."""
    chip = LIBRARY.chip(name)
    framework_s = 0.0 if software is None else 15e-6  # an eager framework's dispatch on top of the family's
    cost = cost_model_for(chip, default_efficiency(LIBRARY, chip), chip.default_precision, 0, framework_s).cost(op)
    terms = cost.terms()  # a systolic array's fill and drain count as overhead, not arithmetic
    assert set(terms) == set(TERMS)
    assert terms[cost.bound] == max(terms.values())
    if cost.dram_bytes == 0:
        assert cost.bound is not Bound.MEMORY


def decode_product(chip_name: str) -> tuple[ChipSpec, Op]:
    """A decode step's weight product on ``chip_name``: m = 1, about one FLOP per byte."""
    chip = LIBRARY.chip(chip_name)
    size = chip.default_precision.nbytes
    op = Op(
        "decode",
        OpKind.MATMUL,
        Phase.FORWARD,
        2 * 4096 * 4096,
        (TensorAccess("x", size(4096)), TensorAccess("w", size(4096 * 4096), Role.WEIGHT)),
        (TensorAccess("y", size(4096)),),
        gemm=Gemm(1, 1, 4096, 4096),
    )
    return chip, op


@pytest.mark.parametrize("name", ["v100", "a100", "h100", "ascend910"])
def test_a_decode_matrix_vector_product_is_memory_bound(name: str) -> None:
    chip, op = decode_product(name)
    assert model(chip).cost(op).bound is Bound.MEMORY


@pytest.mark.parametrize("name", ["tpu-v3", "tpu-v4", "tpu-v5p"])
def test_a_decode_product_is_never_compute_bound_on_an_array(name: str) -> None:
    """On a weight-stationary array (the TPUs') each fold of an m = 1 product streams one row: its
    cycles are almost all fill, drain and weight loading, which the label counts as overhead (issue
    13.3), not arithmetic. (An output-stationary array streams K instead, with one PE row busy: that
    is occupancy of the array, and compute it stays.)"""
    chip, op = decode_product(name)
    cost = model(chip).cost(op)
    assert cost.bound in (Bound.MEMORY, Bound.OVERHEAD)
    assert cost.fill_s > cost.compute_s - cost.fill_s


def test_vector_units_faster_than_the_matrix_units_are_held_to_the_peak() -> None:
    """A 1x1 systolic array beside its 32-lane vector unit: element-wise work never passes the chip's peak."""
    library = Library(use_env=False)
    base = library.chip("systolic-32x32")
    tiny = base.model_copy(update={"section": base.section.model_copy(update={"array_rows": 1, "array_cols": 1})})
    peak = tiny.peak_flops(tiny.default_precision)
    op = Op(
        "add",
        OpKind.ELEMENTWISE,
        Phase.FORWARD,
        flops=10**9,
        reads=(TensorAccess("x", 1024),),
        writes=(TensorAccess("y", 1024),),
    )
    trace = Trace("one-add", Mode.INFER, 1, tiny.default_precision, (op,), 0, 0)
    result = run_trace(Target(tiny.name, tiny), trace, library)
    assert result.layers[0].end_s - result.layers[0].start_s >= op.flops / peak
    assert 0 < result.utilization <= 1
