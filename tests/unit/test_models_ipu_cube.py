"""The IPU partition (whole AMP blocks per tile, K splits, spills) and the Ascend core-tile choice."""

from __future__ import annotations

import pytest

from archsim.models.cube import CubeModel, tile_fits
from archsim.models.ipu import AMP_BLOCK, AMP_K_GRAIN, IpuEfficiency, IpuModel, IpuSection
from archsim.spec.chip import ChipSpec
from archsim.spec.common import replace_path
from archsim.spec.library import Library
from archsim.spec.registry import FamilyEfficiency
from archsim.stack import default_efficiency
from archsim.workloads.trace import Gemm, Op, OpKind, Phase, Role, TensorAccess

LIBRARY = Library(use_env=False)


def gemm_op(m: int, n: int, k: int, batch: int = 1) -> Op:
    e = 2
    return Op(
        "gemm",
        OpKind.MATMUL,
        Phase.FORWARD,
        2 * batch * m * n * k,
        (TensorAccess("a", batch * m * k * e), TensorAccess("b", batch * k * n * e, Role.WEIGHT)),
        (TensorAccess("c", batch * m * n * e),),
        gemm=Gemm(batch, m, n, k),
    )


def ipu(footprint: int = 0, chip: ChipSpec | None = None) -> IpuModel:
    chip = chip or LIBRARY.chip("gc200")
    efficiency = default_efficiency(LIBRARY, chip)
    return IpuModel(chip, IpuEfficiency.resolve(efficiency, chip.name), chip.default_precision, footprint)


def test_a_tile_gets_whole_amp_blocks() -> None:
    model = ipu()
    tiles = model.ipu.tiles
    exact = model._partition(gemm_op(AMP_BLOCK * tiles, AMP_BLOCK, 4096), tiles, 1, 1)
    one_more = model._partition(gemm_op(AMP_BLOCK * (tiles + 1), AMP_BLOCK, 4096), tiles + 1, 1, 1)
    assert exact.units_per_tile == 1
    # one block more does not spread evenly: some tile computes two blocks, so compute doubles
    assert one_more.units_per_tile == 2
    assert one_more.compute_s == pytest.approx(2 * exact.compute_s)


def test_the_planner_splits_k_when_blocks_do_not_spread_evenly() -> None:
    model = ipu()
    tiles = model.ipu.tiles
    op = gemm_op(AMP_BLOCK * (tiles + 1), AMP_BLOCK, 4096)
    unsplit = model._partition(op, tiles + 1, 1, 1)
    best = model.partition(op)
    assert best.split > 1
    assert best.reduce_s > 0
    assert best.time_s < unsplit.time_s


def test_small_outputs_split_k_over_idle_tiles() -> None:
    model = ipu()
    part = model.partition(gemm_op(16, 16, 16 * AMP_K_GRAIN * 64))
    assert part.split > 1
    assert part.reduce_s > 0
    assert part.time_s < model._partition(gemm_op(16, 16, 16 * AMP_K_GRAIN * 64), 1, 1, 1).time_s


def test_partitions_that_overflow_tile_sram_take_serial_steps_or_spill() -> None:
    op = gemm_op(1024, 1024, 4096)
    chip = LIBRARY.chip("gc200")
    assert chip.memory.onchip is not None
    assert ipu().partition(op).serial == 1  # an empty IPU holds the 4096-deep slabs at once
    # with resident data filling 80% of every tile, the slabs are walked in chunks of K instead
    model = ipu(int(0.8 * chip.memory.onchip.capacity))
    part = model.partition(op)
    assert part.serial > 1 and part.spill_bytes == 0
    tiny = replace_path(chip, "ipu.tile_sram", 2 * 1024)
    starved = ipu(0, tiny).partition(op)
    assert starved.spill_bytes > 0 and starved.stream_s > 0
    assert ipu(0, tiny).cost(op).time_s > model.cost(op).time_s


def test_resident_data_beyond_tile_sram_streams() -> None:
    chip = LIBRARY.chip("gc200")
    assert chip.memory.onchip is not None
    capacity = chip.memory.onchip.capacity
    op = gemm_op(512, 512, 512)
    assert ipu(capacity // 2).cost(op).dram_bytes == 0
    assert ipu(2 * capacity).cost(op).dram_bytes >= op.bytes // 2


def cube(chip: ChipSpec | None = None) -> CubeModel:
    chip = chip or LIBRARY.chip("ascend910")
    efficiency = default_efficiency(LIBRARY, chip)
    return CubeModel(chip, FamilyEfficiency.resolve(efficiency, chip.name), chip.default_precision)


def update_op(state_bytes: int, other_bytes: int) -> Op:
    state = TensorAccess("adam.state", state_bytes, Role.STATE)
    grads = TensorAccess("parameters.grad", other_bytes, Role.GRADIENT)
    return Op("adam.update", OpKind.OPTIMIZER, Phase.UPDATE, 1000, (grads, state), (state,))


def test_update_only_state_stays_in_free_sram_and_streams_the_rest() -> None:
    chip = LIBRARY.chip("gc200")
    section = chip.section_of(IpuSection)
    sram = section.tiles * section.tile_sram
    roomy = ipu(footprint=sram // 4)
    # the whole state fits the SRAM the resident data leaves free: nothing streams
    assert roomy.cost(update_op(sram // 8, 4096)).dram_bytes == 0
    full = ipu(footprint=sram)
    offloaded = full.cost(update_op(sram // 8, 4096))
    # no SRAM is free: the state is read and written in streaming memory, the gradients are resident
    assert offloaded.dram_bytes == 2 * (sram // 8)
    half = ipu(footprint=sram - sram // 16)
    assert 0 < half.cost(update_op(sram // 8, 4096)).dram_bytes < offloaded.dram_bytes


def test_resident_footprint_leaves_out_the_state_only_the_update_touches() -> None:
    from archsim.spec.common import Precision
    from archsim.workloads import build_trace
    from archsim.workloads.memory import resident_bytes, update_only_bytes
    from archsim.workloads.trace import Mode

    trace = build_trace("bert-base", LIBRARY, Mode.TRAIN, 2, Precision.FP16, 128)
    # LAMB keeps two fp32 moments, and mixed precision an fp32 master weight, per parameter
    assert update_only_bytes(trace.ops) == trace.parameters * (8 + 4)
    assert resident_bytes(trace) == trace.memory_bytes - trace.parameters * 12
    inference = build_trace("resnet50", LIBRARY, Mode.INFER, 2, Precision.FP16, None)
    # running statistics are state the forward ops read: they stay resident
    assert update_only_bytes(inference.ops) == 0


def test_core_tiles_fit_the_buffers() -> None:
    model = cube()
    assert model.frac_k == 16
    assert tile_fits(model.cube, 256, 128, 16, 2)
    assert not tile_fits(model.cube, 256, 256, 16, 2)  # 2 x 256 x 256 fp32 accumulators > 256 KiB L0C
    tile = model.best_tile(gemm_op(4096, 4096, 4096), 1e12)
    assert tile_fits(model.cube, tile.tile_m, tile.tile_n, 16, 2)
    # a bigger L0C admits the 256 x 256 tile, which moves less HBM traffic
    chip = replace_path(LIBRARY.chip("ascend910"), "cube.l0c", 1024 * 1024)
    bigger = cube(chip).best_tile(gemm_op(4096, 4096, 4096), 1e9)
    assert (bigger.tile_m, bigger.tile_n) == (256, 256)


def test_fractal_counts_and_small_products() -> None:
    model = cube()
    # with memory never the limit, a 32 x 32 product runs as four 16 x 16 tiles on four cores,
    # each one fractal wide and 4 deep in K: 4 cube clocks
    tile = model.best_tile(gemm_op(32, 32, 64), 1e18)
    assert (tile.tile_m, tile.tile_n, tile.tiles, tile.cube_cycles) == (16, 16, 4, 4)
    # on a large product, larger tiles re-read less from HBM and win when memory is slow
    big = gemm_op(4096, 4096, 4096)
    chosen, smallest = model.best_tile(big, 1e9), model._tile(big, 16, 16, 1e9)
    assert chosen.dram_bytes < smallest.dram_bytes and chosen.time_s < smallest.time_s
    wide = model.best_tile(gemm_op(4096, 4096, 4096), 1e12)
    assert wide.cube_cycles >= 4096**3 // (16**3 * model.cube.ai_cores)
