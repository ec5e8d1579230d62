"""Per-layer statistics of one systolic array, as SCALE-Sim reports them, from closed forms.

:func:`simulate_layer` gives a :class:`LayerStats` record: cycles, stall cycles, mapping efficiency,
compute and overall utilization, SRAM and main-memory (DRAM) reads and writes, and their average
bandwidths in words per cycle. Two models:

* ``StallModel.SCALESIM`` reproduces SCALE-Sim 3.0's "Total Cycles": ``folds * fold_cycles - 1``
  (SCALE-Sim reports the index of the cycle in which the last output is written, counting from
  cycle 0). With ``InterfaceBandwidth: CALC`` it never stalls: its ifmap and filter buffers are
  always hit in that mode and its ofmap buffer drains ``cols`` words per cycle, while no cycle of
  any dataflow writes more than ``cols`` outputs. Its utilizations and SRAM counts are SCALE-Sim's.
* ``StallModel.ARCHSIM`` counts cycles (``folds * fold_cycles`` plus stalls, so utilization never
  exceeds 1) and, when port bandwidths are given, schedules the folds against main memory with
  double-buffered SRAMs (:mod:`archsim.kernels.fold_schedule`): the first fold's reads and the last
  fold's writes are exposed, and every fold waits for its operands when a port is too slow.

SCALE-Sim's ``USER`` mode stalls come from its address-level read-buffer simulation, which archsim
does not reproduce; with port bandwidths both models use archsim's fold schedule for stalls and the
record says it is not exact. Main-memory words always come from archsim's reuse model
(:mod:`archsim.models.systolic_map`), not from SCALE-Sim's address traces: they agree on operands
read once, and archsim counts partial sums that stay in the ofmap SRAM once where SCALE-Sim counts
them in every fold.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from archsim.errors import LimitError
from archsim.limits import MAX_SCHEDULED_FOLDS
from archsim.models.systolic_map import (
    ArrayConfig,
    ConvWindow,
    FoldWords,
    MatrixLayer,
    TrafficModel,
    fold_classes,
    fold_grid,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from archsim.spec.scalesim import TopologyLayer


class StallModel(enum.StrEnum):
    """How cycles and stalls are counted (see the module docstring)."""

    SCALESIM = "scalesim"
    ARCHSIM = "archsim"


@dataclass(frozen=True, slots=True)
class LayerStats:
    """One layer on one array: cycles, efficiencies, and words moved (SCALE-Sim's report items)."""

    name: str
    cycles: int
    """Cycles of the layer, stalls included (SCALE-Sim's "Total Cycles" under ``StallModel.SCALESIM``)."""
    stall_cycles: int
    folds: int
    fold_cycles: int
    """Cycles of one fold without stalls."""
    macs: int
    mapping_efficiency: float
    """Fraction of PEs mapped, averaged over folds (0..1)."""
    compute_utilization: float
    """MACs over PE-cycles within folds, averaged over folds (0..1)."""
    overall_utilization: float
    """MACs over PE-cycles of the whole layer, stalls included."""
    sram_ifmap_reads: int
    sram_filter_reads: int
    sram_ofmap_writes: int
    dram_ifmap_reads: int
    dram_filter_reads: int
    dram_ofmap_reads: int
    """Partial sums read back from main memory (archsim only; SCALE-Sim does not count them)."""
    dram_ofmap_writes: int
    exact: bool
    """True when ``cycles`` is SCALE-Sim 3.0's number for the same files (CALC mode, SCALE-Sim model)."""

    def bandwidth(self, words: int) -> float:
        """Average words per cycle of ``words`` over the layer."""
        return words / max(1, self.cycles)

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict; bandwidths in words per cycle."""
        return {
            "name": self.name,
            "cycles": self.cycles,
            "stall_cycles": self.stall_cycles,
            "folds": self.folds,
            "fold_cycles": self.fold_cycles,
            "macs": self.macs,
            "mapping_efficiency": self.mapping_efficiency,
            "compute_utilization": self.compute_utilization,
            "overall_utilization": self.overall_utilization,
            "sram": {
                "ifmap_reads": self.sram_ifmap_reads,
                "filter_reads": self.sram_filter_reads,
                "ofmap_writes": self.sram_ofmap_writes,
            },
            "dram": {
                "ifmap_reads": self.dram_ifmap_reads,
                "filter_reads": self.dram_filter_reads,
                "ofmap_reads": self.dram_ofmap_reads,
                "ofmap_writes": self.dram_ofmap_writes,
            },
            "avg_bandwidth_words_per_cycle": {
                "sram_ifmap": self.bandwidth(self.sram_ifmap_reads),
                "sram_filter": self.bandwidth(self.sram_filter_reads),
                "sram_ofmap": self.bandwidth(self.sram_ofmap_writes),
                "dram_ifmap": self.bandwidth(self.dram_ifmap_reads),
                "dram_filter": self.bandwidth(self.dram_filter_reads),
                "dram_ofmap": self.bandwidth(self.dram_ofmap_reads + self.dram_ofmap_writes),
            },
            "exact": self.exact,
        }


def matrix_layer(layer: TopologyLayer) -> MatrixLayer:
    """The matrix product of a topology layer, with the input rows and columns its windows touch."""
    used_h = min(layer.ifmap_h, (layer.ofmap_h - 1) * layer.stride + layer.filter_h)
    used_w = min(layer.ifmap_w, (layer.ofmap_w - 1) * layer.stride + layer.filter_w)
    window = ConvWindow(
        1, used_h, used_w, layer.channels, layer.filter_h, layer.filter_w, layer.stride, layer.ofmap_h, layer.ofmap_w
    )
    return MatrixLayer(
        layer.m, layer.n, layer.k, used_h * used_w * layer.channels, layer.k * layer.n, layer.m * layer.n, window
    )


def fold_arrays(traffic: TrafficModel) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Per-fold ``(reads (folds, 3), writes (folds,))`` in execution order, built from fold classes."""
    import numpy as np  # here, not at the top: the engine path never needs numpy

    grid = traffic.grid
    row_classes = fold_classes(grid.row_folds)
    passes = []
    for col_fold, col_count in fold_classes(grid.col_folds):
        words = [_row(traffic.fold(row_fold, col_fold)) for row_fold, _ in row_classes]
        one_pass = np.repeat(np.array(words, dtype=np.float64), [n for _, n in row_classes], axis=0)
        passes.append(np.tile(one_pass, (col_count, 1)))
    folds = np.concatenate(passes)
    return np.ascontiguousarray(folds[:, :3]), np.ascontiguousarray(folds[:, 3])


def _row(words: FoldWords) -> tuple[float, float, float, float]:
    return (words.ifmap_reads, words.filter_reads, words.ofmap_reads, words.ofmap_writes)


def simulate_layer(
    name: str,
    layer: MatrixLayer,
    array: ArrayConfig,
    bandwidth: tuple[float, float, float] | None = None,
    model: StallModel = StallModel.SCALESIM,
) -> LayerStats:
    """Statistics of ``layer`` on ``array``.

    ``bandwidth`` is the ``(ifmap, filter, ofmap)`` main-memory port bandwidth in words per cycle,
    or None for SCALE-Sim's ``CALC`` mode (ports never stall). One array, SCALE-Sim's case: its folds
    are scheduled one by one, so no other array shares its reads.
    """
    if array.fed_together != 1:
        raise ValueError(f"simulate_layer models one array, not {array.fed_together} fed together")
    grid = fold_grid(layer, array.rows, array.cols, array.dataflow)
    traffic = TrafficModel(layer, array)
    total = traffic.total()
    stalls = 0
    if bandwidth is not None:
        from archsim.kernels.fold_schedule import fold_schedule  # imports numba on first use

        if grid.folds > MAX_SCHEDULED_FOLDS:
            raise LimitError(
                name,
                "folds",
                f"{grid.folds} folds to schedule one by one (USER bandwidth), more than {MAX_SCHEDULED_FOLDS}",
            )
        reads, writes = fold_arrays(traffic)
        stalls = fold_schedule(grid.fold_cycles, reads, writes, bandwidth) - grid.compute_cycles
    # SCALE-Sim reports the index of the last busy cycle, counting from 0
    first_cycle = 0 if model is StallModel.SCALESIM else 1
    cycles = grid.compute_cycles - 1 + first_cycle + stalls
    sram_ifmap, sram_filter, sram_ofmap = grid.sram_accesses()
    pes = array.rows * array.cols
    return LayerStats(
        name=name,
        cycles=cycles,
        stall_cycles=stalls,
        folds=grid.folds,
        fold_cycles=grid.fold_cycles,
        macs=layer.macs,
        mapping_efficiency=grid.mapping_efficiency,
        compute_utilization=grid.compute_utilization,
        overall_utilization=layer.macs / (max(1, cycles) * pes),
        sram_ifmap_reads=sram_ifmap,
        sram_filter_reads=sram_filter,
        sram_ofmap_writes=sram_ofmap,
        dram_ifmap_reads=round(total.ifmap_reads),
        dram_filter_reads=round(total.filter_reads),
        dram_ofmap_reads=round(total.ofmap_reads),
        dram_ofmap_writes=round(total.ofmap_writes),
        exact=model is StallModel.SCALESIM and bandwidth is None,
    )
