"""The dataflow family's cost model (archsim/models/dataflow.py): weights resident or streamed, fabric, roofline."""

from __future__ import annotations

import pytest

from archsim.models import cost_model_for
from archsim.models.base import Bound
from archsim.models.dataflow import DataflowModel, DataflowSection
from archsim.spec.chip import ChipSpec
from archsim.spec.library import Library
from archsim.spec.registry import BUILTIN_MODULES, family_definition
from archsim.stack import default_efficiency
from archsim.workloads.trace import Gemm, Op, OpKind, Phase, Role, TensorAccess

LIBRARY = Library(use_env=False)


def product(chip: ChipSpec, m: int, n: int, k: int) -> Op:
    """A forward matrix product ``m x k`` by a ``k x n`` weight."""
    size = chip.default_precision.nbytes
    return Op(
        "fc",
        OpKind.MATMUL,
        Phase.FORWARD,
        2 * m * n * k,
        (TensorAccess("x", size(m * k)), TensorAccess("w", size(k * n), Role.WEIGHT)),
        (TensorAccess("y", size(m * n)),),
        gemm=Gemm(1, m, n, k),
    )


def model(chip: ChipSpec, footprint: int) -> DataflowModel:
    efficiency = default_efficiency(LIBRARY, chip)
    built = cost_model_for(chip, efficiency, chip.default_precision, footprint)
    base = getattr(built, "base", built)
    assert isinstance(base, DataflowModel)
    return base


def test_the_family_is_built_in() -> None:
    assert "archsim.models.dataflow" in BUILTIN_MODULES
    definition = family_definition("dataflow")
    assert definition.section is DataflowSection
    assert definition.dispatch.value == "program-launch"


@pytest.mark.parametrize("name", ["cerebras-wse2", "sambanova-sn10"])
def test_a_footprint_that_fits_on_chip_moves_nothing_from_main_memory(name: str) -> None:
    chip = LIBRARY.chip(name)
    section = chip.section_of(DataflowSection)
    op = product(chip, 4096, 4096, 4096)
    cost = model(chip, section.onchip_memory).cost(op)
    assert cost.dram_bytes == 0 and cost.memory_s == 0.0
    # compute at the family's fraction of the fabric's peak, a near-zero per-op cost from the compiled graph
    efficiency = default_efficiency(LIBRARY, chip)
    assert efficiency.compute is not None
    assert cost.compute_s == pytest.approx(op.flops / (chip.peak_flops(chip.default_precision) * efficiency.compute))
    assert cost.time_s == pytest.approx(max(cost.compute_s, cost.roofline_s, cost.communication_s) + cost.overhead_s)
    assert cost.overhead_s < 1e-6
    assert cost.bound is Bound.COMPUTE


@pytest.mark.parametrize("name", ["cerebras-wse2", "sambanova-sn10"])
def test_a_footprint_beyond_the_sram_streams_the_weights_each_step(name: str) -> None:
    chip = LIBRARY.chip(name)
    section = chip.section_of(DataflowSection)
    op = product(chip, 8, 8192, 8192)  # one weight read per 8 rows: bound by streaming it
    streamed = model(chip, section.onchip_memory + 1).cost(op)
    weight = op.reads[1].bytes
    assert streamed.dram_bytes == weight  # activations stay on chip
    assert streamed.time_s >= weight / chip.memory.main.bandwidth
    assert streamed.bound is Bound.MEMORY
    resident = model(chip, section.onchip_memory).cost(op)
    assert resident.time_s < streamed.time_s


def test_the_optimizer_update_streams_all_its_tensors() -> None:
    chip = LIBRARY.chip("sambanova-sn10")
    e = 4
    update = Op(
        "adam",
        OpKind.OPTIMIZER,
        Phase.UPDATE,
        10 * 1024,
        (TensorAccess("w", 1024 * e, Role.WEIGHT), TensorAccess("m", 1024 * e, Role.STATE)),
        (TensorAccess("w'", 1024 * e, Role.WEIGHT),),
    )
    assert model(chip, 10**12).cost(update).dram_bytes == update.bytes
    assert model(chip, 0).cost(update).dram_bytes == 0


def test_outputs_cross_the_fabric_at_its_bandwidth() -> None:
    chip = LIBRARY.chip("cerebras-wse2")
    section = chip.section_of(DataflowSection)
    op = product(chip, 4096, 4096, 64)
    cost = model(chip, 0).cost(op)
    efficiency = default_efficiency(LIBRARY, chip)
    assert efficiency.exchange is not None
    assert cost.communication_s == pytest.approx(op.bytes_written / (section.fabric_bandwidth * efficiency.exchange))
