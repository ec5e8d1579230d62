"""Cost model of Huawei Ascend Da Vinci chips (Ascend 910).

A matrix product is cut into fractals of the cube's shape (16x16x16 at fp16): the cube multiplies a
``16 x 16`` fractal of ``A`` by a ``16 x 16`` fractal of ``B`` into a ``16 x 16`` block of ``C`` each
clock. Each AI core owns output tiles of ``tile_m x tile_n`` (whole fractals), spread over the cores
so that the busiest core runs ``ceil(tiles / cores)`` of them; a tile takes
``(tile_m / 16) * (tile_n / 16) * ceil(K / k_fractal)`` cube clocks (an edge tile costs as much as a
full one: the cube works on whole fractals).

The buffers decide which tiles are possible (:func:`tile_fits`): ``L0A`` and ``L0B`` hold two
(double-buffered) ``16``-deep slabs of the tile's ``A`` rows and ``B`` columns, ``L0C`` two copies of
its fp32 accumulators (one being filled, one being moved out), and ``L1`` two staging panels of
:data:`L1_K_STEP` elements of ``K`` for both operands. Among the tiles that fit, the model picks the
one that finishes first (ties: the one whose cube finishes first, then the larger tile).

The memory-transfer engines (MTE) move the next panels from HBM into L1 and L0 while the cube
computes, so cube time and HBM time overlap; HBM traffic follows the wave model of
:mod:`archsim.models.memory` (the tiles running at once share their panels through the 32 MiB L2).
Element-wise ops run on the vector unit of each core, a separate resource from the cube, so the
engine can overlap them with independent matrix ops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import model_validator

from archsim.models.base import SCALAR, Arith, OpCost, Unit, ceil_div, chip_rates, finish, gemm_of
from archsim.models.memory import tiled_dram_bytes
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Bytes, Count, Precision, parse_shape
from archsim.spec.registry import FamilyDefinition, FamilyEfficiency, FamilySection, Mechanism, register_family
from archsim.workloads.trace import Op

TILE_SIDES = (16, 32, 64, 128, 256)
"""Candidate output-tile sides of one AI core, in elements (whole fractals)."""
ACCUMULATOR_BYTES = 4
"""The cube accumulates in fp32 (int32 for int8 and int4) in L0C."""
L1_K_STEP = 256
"""Elements of ``K`` one L1 staging panel holds, so that each refill feeds the cube for at least
``L1_K_STEP / k_fractal`` clocks per fractal pair (estimate: long enough to hide an MTE transfer)."""


@dataclass(frozen=True, slots=True)
class CubeTile:
    """An output tile of one AI core and what running the product with it costs."""

    tile_m: int
    tile_n: int
    tiles: int
    cube_cycles: int
    """Cube clocks of the busiest core."""
    dram_bytes: int
    compute_s: float
    memory_s: float

    @property
    def time_s(self) -> float:
        """Time with the MTEs overlapping the cube."""
        return max(self.compute_s, self.memory_s)


class CubeSection(FamilySection):
    """A Huawei Da Vinci chip: AI cores, each a cube unit, a vector unit and L0/L1/unified buffers."""

    peak_counts = ("ai_cores",)

    ai_cores: Count
    cube_shape: str
    cube_mac_per_clock: dict[Precision, Count]
    """Multiply-accumulates per clock per AI core on the cube unit, by precision."""
    vector_ops_per_clock: dict[Precision, Count]
    """Element-wise operations per clock per AI core on the vector unit, by precision."""
    l0a: Bytes
    l0b: Bytes
    l0c: Bytes
    l1: Bytes
    unified_buffer: Bytes
    l2_cache: Bytes

    @model_validator(mode="after")
    def _shape(self) -> CubeSection:
        parse_shape(self.cube_shape, 3)
        return self

    def macs_per_clock(self, precision: Precision) -> int | None:
        """Cube MACs per clock of all AI cores at ``precision`` (None: the cube does not run it)."""
        per_core = self.cube_mac_per_clock.get(precision)
        return None if per_core is None else per_core * self.ai_cores

    def onchip_bytes(self) -> int:
        """The L0/L1/unified buffers of every core and the L2."""
        return self.ai_cores * (self.l0a + self.l0b + self.l0c + self.l1 + self.unified_buffer) + self.l2_cache

    def matrix_instruction_shape(self) -> str | None:
        """The cube's ``MxNxK``."""
        return self.cube_shape


def tile_fits(cube: CubeSection, tile_m: int, tile_n: int, frac_k: int, element_bytes: float) -> bool:
    """True when a ``tile_m x tile_n`` core tile fits L0A, L0B, L0C and L1 (double-buffered)."""
    return (
        2 * tile_m * frac_k * element_bytes <= cube.l0a
        and 2 * frac_k * tile_n * element_bytes <= cube.l0b
        and 2 * tile_m * tile_n * ACCUMULATOR_BYTES <= cube.l0c
        and 2 * (tile_m + tile_n) * L1_K_STEP * element_bytes <= cube.l1
    )


class CubeModel:
    """Fractal-tiling model of one Da Vinci chip at one precision."""

    separate_units = True

    def __init__(self, chip: ChipSpec, efficiency: FamilyEfficiency, precision: Precision) -> None:
        self.chip = chip
        self.precision = precision
        self.cube: CubeSection = chip.section_of(CubeSection)
        self.eff = efficiency
        vector = self.cube.vector_ops_per_clock.get(precision, 0) * self.cube.ai_cores * chip.clock
        self.rates = chip_rates(chip, efficiency, precision, vector)
        self.frac_m, self.frac_n, _ = parse_shape(self.cube.cube_shape, 3)
        # the cube does frac_m x frac_n outputs per clock; its depth in K follows from its MAC rate
        self.frac_k = max(1, self.cube.cube_mac_per_clock[precision] // (self.frac_m * self.frac_n))
        e = precision.element_bytes
        self._fitting = [  # whole fractals that fit the buffers, largest first
            (tile_m, tile_n)
            for tile_m in TILE_SIDES[::-1]
            for tile_n in TILE_SIDES[::-1]
            if not (tile_m % self.frac_m or tile_n % self.frac_n)
            and tile_fits(self.cube, tile_m, tile_n, self.frac_k, e)
        ]
        self._tile_memo: dict[object, CubeTile] = {}

    def cost(self, op: Op) -> OpCost:
        """Price one op on the cube (matrix) or the vector unit."""
        eff = self.eff
        dram_bw = self.rates.dram_bytes_per_s * eff.memory_bandwidth
        if op.gemm is not None:
            tile = self.best_tile(op, dram_bw)
            return finish(self.rates, op, tile.compute_s, tile.memory_s, eff.op_overhead, tile.dram_bytes, Unit.MATRIX)
        compute_s = op.flops / (self.rates.vector_flops_per_s * eff.vector)
        return finish(self.rates, op, compute_s, op.bytes / dram_bw, eff.op_overhead, op.bytes, Unit.VECTOR)

    def best_tile(self, op: Op, dram_bytes_per_s: float) -> CubeTile:
        """The core tile that fits the buffers and finishes first (ties: less cube time, then larger).

        The choice depends on the product's shape and its tensors' sizes only, so it is kept for the
        model's later ops of the same shape (networks repeat layer shapes many times).
        """
        key = (op.gemm, tuple(t.bytes for t in op.reads), op.bytes_written, dram_bytes_per_s)
        found = self._tile_memo.get(key)
        if found is None:
            found = self._tile_memo[key] = self._best_tile(op, dram_bytes_per_s)
        return found

    def _best_tile(self, op: Op, dram_bytes_per_s: float) -> CubeTile:
        best: CubeTile | None = None
        for tile_m, tile_n in self._fitting:
            tile = self._tile(op, tile_m, tile_n, dram_bytes_per_s)
            if best is None or (tile.time_s, tile.compute_s) < (best.time_s, best.compute_s):
                best = tile
        if best is None:
            raise ValueError(f"{self.chip.name}: no core tile fits L0A/L0B/L0C/L1 at {self.precision.value}")
        return best

    def _tile(self, op: Op, tile_m: int, tile_n: int, dram_bytes_per_s: float) -> CubeTile:
        tiles, cycles, dram, compute_s, memory_s = tile_cost(
            SCALAR,
            op,
            (tile_m, tile_n),
            (self.frac_m, self.frac_n, self.frac_k),
            (self.cube.ai_cores, self.chip.clock),
            self.eff.compute,
            self.precision.element_bytes,
            dram_bytes_per_s,
        )
        return CubeTile(tile_m, tile_n, tiles, cycles, dram, compute_s, memory_s)


def tile_cost(
    arith: Arith,
    op: Op,
    tile: tuple[int, int],
    fractal: tuple[int, int, Any],
    chip: tuple[Any, Any],
    compute: float,
    element_bytes: float,
    dram_bytes_per_s: Any,
) -> tuple[int, Any, Any, Any, Any]:
    """A core tile's cost: its tiles, the busiest core's cube cycles, HBM bytes, compute_s and memory_s.

    ``tile`` is ``(tile_m, tile_n)``, ``fractal`` the cube's ``(frac_m, frac_n, frac_k)`` and ``chip``
    ``(ai_cores, clock_hz)``: numbers of one chip (``arith`` :data:`~archsim.models.base.SCALAR`) or
    arrays of many (:mod:`archsim.models.cube_batch`), one formula for both; ``compute`` is the
    family's compute efficiency.
    """
    (tile_m, tile_n), (frac_m, frac_n, frac_k), (ai_cores, clock_hz) = tile, fractal, chip
    g = gemm_of(op)
    m_tiles, n_tiles = ceil_div(g.m, tile_m), ceil_div(g.n, tile_n)
    tiles = g.batch * m_tiles * n_tiles
    fractal_ops = (tile_m // frac_m) * (tile_n // frac_n) * ceil_div(g.k, frac_k)
    cycles = ceil_div(tiles, ai_cores) * fractal_ops
    dram = tiled_dram_bytes(arith, op, m_tiles, n_tiles, ai_cores, element_bytes)
    compute_s = cycles / compute / clock_hz
    return tiles, cycles, dram, compute_s, dram / dram_bytes_per_s


def build(chip: ChipSpec, efficiency: FamilyEfficiency, precision: Precision, footprint_bytes: int) -> CubeModel:
    """The family's model factory (the whole footprint lives in main memory, so it is not needed)."""
    return CubeModel(chip, efficiency, precision)


register_family(
    FamilyDefinition(
        "cube",
        CubeSection,
        FamilyEfficiency,
        Mechanism.TASK_DISPATCH,
        build,
        "Huawei Ascend Da Vinci",
        batch="archsim.models.cube_batch",
    )
)
