"""How a matrix product maps onto one systolic array, and the main-memory words each fold moves.

A layer is a matrix product ``C[m, n] = A[m, k] @ B[k, n]``: ``m`` output pixels (or rows), ``n``
filters (or columns), ``k`` the window (``filter_h * filter_w * channels``, or the inner dimension).
A is the ifmap operand, B the filter operand, C the ofmap. The dataflow decides which two dimensions
are spread over the array's ``rows x cols`` processing elements and which one streams in time
(SCALE-Sim's ``S_r``, ``S_c`` and ``T``):

==========  =======  =======  ======  ===========================
dataflow    ``S_r``  ``S_c``  ``T``   cycles of one fold
==========  =======  =======  ======  ===========================
``os``      m        n        k       ``T + rows + cols - 2``
``ws``      k        n        m       ``T + 2 rows + cols - 2``
``is``      k        m        n       ``T + 2 rows + cols - 2``
==========  =======  =======  ======  ===========================

The array works through ``ceil(S_r / rows) * ceil(S_c / cols)`` folds, column folds outside and row
folds inside (a *pass* is one column fold with all its row folds). Each fold streams ``T`` operands
and pays ``rows - 1`` plus ``cols - 1`` cycles of skewed fill and drain; the weight- and
input-stationary dataflows also spend ``rows`` cycles loading the stationary block. These are the
fold timings of SCALE-Sim 3.0, so :func:`FoldGrid.compute_cycles` is exactly its stall-free count.

Main-memory traffic (:func:`fold_words`, :func:`dram_words`) is archsim's own model, in words. Each
SRAM is double-buffered: half of it (the *working half*) holds what the array reads now, the other
half is filled for the next fold. An operand is re-read from main memory unless its reused part fits
a working half:

* the operand spread along ``S_c`` (OS filter columns, WS and IS stationary blocks are read once) is
  kept for a whole pass when its block fits, else streamed again in every fold;
* the operand spread along ``S_r`` is read once in total when it all fits, else once per pass; a
  convolution's input is read through its footprint (the input rows a tile of output pixels touches,
  halos kept when two footprints fit), never as its im2col expansion when the footprint fits;
* partial sums (WS, IS) stay in the ofmap SRAM for a whole pass when they fit, else every fold writes
  them out and the next reads them back. Final outputs are written once.

Arrays fed from one memory (``fed_together``: a core's ``arrays_per_core``, a TPU TensorCore's MXUs
behind its one vector memory) work on that many adjacent column folds at once, each with its own
stationary block, and the operand that is re-read per pass (the ``S_r`` operand of OS and WS, the
streamed filter of IS) is read once for the group: ``ceil(col_folds / fed_together)`` passes read it
instead of ``col_folds``. One array (SCALE-Sim's case) is unchanged.

No per-cycle or per-element matrix is ever built: every count is a closed form over fold classes.
"""

from __future__ import annotations

from dataclasses import dataclass

from archsim.models.base import ceil_div
from archsim.spec.chip import Dataflow
from archsim.workloads.trace import Op


@dataclass(frozen=True, slots=True)
class ArrayConfig:
    """One systolic array and its three double-buffered SRAMs (sizes in words of the operand type)."""

    rows: int
    cols: int
    dataflow: Dataflow
    ifmap_sram_words: int
    filter_sram_words: int
    ofmap_sram_words: int
    fed_together: int = 1
    """Arrays fed from one memory (a TPU TensorCore's MXUs from its vector memory), which work on
    adjacent column folds at once and share one read of the streamed operand (see the module)."""

    def __post_init__(self) -> None:
        if min(self.rows, self.cols, self.fed_together) < 1:
            raise ValueError(f"array must have at least one row and column, got {self.rows}x{self.cols}")
        if min(self.ifmap_sram_words, self.filter_sram_words, self.ofmap_sram_words) < 0:
            raise ValueError("SRAM sizes must not be negative")


@dataclass(frozen=True, slots=True)
class ConvWindow:
    """Geometry of a convolution's input, used for the input footprint of a run of output pixels.

    ``in_h x in_w`` is the (padded) input of one image that the windows cover, ``out_h x out_w`` its
    output; ``images`` images are stacked along ``m``.
    """

    images: int
    in_h: int
    in_w: int
    channels: int
    filter_h: int
    filter_w: int
    stride: int
    out_h: int
    out_w: int

    def footprint_words(self, pixels: int) -> int:
        """Input words that ``pixels`` consecutive output pixels (row-major) touch, at most.

        The run spans at most ``(pixels + out_w - 2) // out_w + 1`` output rows; a run inside one
        row touches ``filter_h`` input rows of ``(pixels - 1) * stride + filter_w`` columns, a longer
        one whole input rows. Every channel is read.
        """
        out_rows = min(self.images * self.out_h, (pixels + self.out_w - 2) // self.out_w + 1)
        if out_rows == 1:
            cols = min(self.in_w, (pixels - 1) * self.stride + self.filter_w)
            return self.filter_h * cols * self.channels
        images = min(self.images, ceil_div(out_rows, self.out_h) + 1)
        in_rows = min(images * self.in_h, (out_rows - 1) * self.stride + self.filter_h)
        return in_rows * self.in_w * self.channels


def forward_window(op: Op) -> ConvWindow | None:
    """The input geometry of a forward convolution whose GEMM view is ``m = N*P*Q, n = K, k = C*R*S``.

    None for any other op (backward passes, matrix products): their ``A`` operand has no windows.
    """
    g, c = op.gemm, op.conv
    if g is None or c is None or not op.phase.computes_forward:
        return None
    if (g.m, g.n, g.k) != (c.n * c.p * c.q, c.k, c.c * c.r * c.s):
        return None
    return ConvWindow(c.n, c.h + 2 * c.pad, c.w + 2 * c.pad, c.c, c.r, c.s, c.stride, c.p, c.q)


@dataclass(frozen=True, slots=True)
class MatrixLayer:
    """One matrix product and the unique words of its three tensors.

    ``ifmap_words`` is what the A operand holds without im2col duplication (the input of a
    convolution), capped at ``m * k``; ``filter_words`` and ``ofmap_words`` are ``k * n`` and
    ``m * n`` unless a caller knows better.
    """

    m: int
    n: int
    k: int
    ifmap_words: int
    filter_words: int
    ofmap_words: int
    conv: ConvWindow | None = None

    def __post_init__(self) -> None:
        if min(self.m, self.n, self.k) < 1:
            raise ValueError(f"matrix dimensions must be positive, got m={self.m} n={self.n} k={self.k}")

    @staticmethod
    def gemm(m: int, n: int, k: int) -> MatrixLayer:
        """A plain matrix product with no reuse inside its operands."""
        return MatrixLayer(m, n, k, m * k, k * n, m * n)

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the product."""
        return self.m * self.n * self.k


@dataclass(frozen=True, slots=True)
class FoldGrid:
    """The folds of one layer on one array: ``S_r``, ``S_c``, ``T`` and the cycles of each fold."""

    dataflow: Dataflow
    rows: int
    cols: int
    sr: int
    sc: int
    t: int
    row_folds: int
    col_folds: int
    fold_cycles: int
    """Cycles of one fold: its ``T`` streamed operands plus fill, drain and stationary loading."""

    @property
    def folds(self) -> int:
        """Number of folds."""
        return self.row_folds * self.col_folds

    @property
    def compute_cycles(self) -> int:
        """Cycles of the whole layer without stalls (folds run back to back)."""
        return self.folds * self.fold_cycles

    def rows_used(self, row_fold: int) -> int:
        """Array rows the ``row_fold``-th row fold occupies."""
        return min(self.rows, self.sr - row_fold * self.rows)

    def cols_used(self, col_fold: int) -> int:
        """Array columns the ``col_fold``-th column fold occupies."""
        return min(self.cols, self.sc - col_fold * self.cols)

    @property
    def mapping_efficiency(self) -> float:
        """Mean over folds of the fraction of processing elements mapped (SCALE-Sim's definition)."""
        return self.sr * self.sc / (self.folds * self.rows * self.cols)

    @property
    def compute_utilization(self) -> float:
        """Mean over folds of MACs over PE-cycles, SCALE-Sim's per-fold definition (at most 1).

        SCALE-Sim counts a weight- or input-stationary fold as ``T + 2 rows + 2 cols - 3`` cycles
        here (one ``cols - 1`` more than the fold takes); archsim keeps that for comparability.
        """
        if self.dataflow is Dataflow.OUTPUT_STATIONARY:
            cycles = self.t + self.rows + self.cols - 2
        else:
            cycles = self.t + 2 * self.rows + 2 * self.cols - 3
        return self.sr * self.sc * self.t / (self.folds * self.rows * self.cols * cycles)

    def sram_accesses(self) -> tuple[int, int, int]:
        """``(ifmap reads, filter reads, ofmap writes)`` between the array and its SRAMs, in words.

        These are SCALE-Sim 3.0's counts: the streamed operand is read once per fold of the other
        dimension, the stationary one once; output-stationary adds ``rows + cols`` writes per fold
        (as SCALE-Sim does), the stationary dataflows write partial sums once per row fold.
        """
        streamed_sr = self.t * self.sr * self.col_folds
        streamed_sc = self.t * self.sc * self.row_folds
        if self.dataflow is Dataflow.OUTPUT_STATIONARY:
            return streamed_sr, streamed_sc, self.sr * self.sc + self.folds * (self.rows + self.cols)
        if self.dataflow is Dataflow.WEIGHT_STATIONARY:
            return streamed_sr, self.sr * self.sc, streamed_sc
        return self.sr * self.sc, streamed_sr, streamed_sc


def fold_grid(layer: MatrixLayer, rows: int, cols: int, dataflow: Dataflow) -> FoldGrid:
    """The folds of ``layer`` on a ``rows x cols`` array in ``dataflow``."""
    if dataflow is Dataflow.OUTPUT_STATIONARY:
        sr, sc, t, fill = layer.m, layer.n, layer.k, rows + cols - 2
    elif dataflow is Dataflow.WEIGHT_STATIONARY:
        sr, sc, t, fill = layer.k, layer.n, layer.m, 2 * rows + cols - 2
    else:
        sr, sc, t, fill = layer.k, layer.m, layer.n, 2 * rows + cols - 2
    return FoldGrid(dataflow, rows, cols, sr, sc, t, ceil_div(sr, rows), ceil_div(sc, cols), t + fill)


@dataclass(frozen=True, slots=True)
class FoldWords:
    """Main-memory words one fold (or a whole layer) moves on each SRAM's port."""

    ifmap_reads: float
    filter_reads: float
    ofmap_reads: float
    """Partial sums read back (stationary dataflows whose partial sums do not fit the ofmap SRAM)."""
    ofmap_writes: float

    def scaled(self, count: int) -> FoldWords:
        """These words times ``count``."""
        return FoldWords(
            self.ifmap_reads * count, self.filter_reads * count, self.ofmap_reads * count, self.ofmap_writes * count
        )

    def plus(self, other: FoldWords) -> FoldWords:
        """Element-wise sum."""
        return FoldWords(
            self.ifmap_reads + other.ifmap_reads,
            self.filter_reads + other.filter_reads,
            self.ofmap_reads + other.ofmap_reads,
            self.ofmap_writes + other.ofmap_writes,
        )


class TrafficModel:
    """Per-fold main-memory words of one layer on one array (see the module docstring)."""

    def __init__(self, layer: MatrixLayer, array: ArrayConfig) -> None:
        self.layer = layer
        self.grid = grid = fold_grid(layer, array.rows, array.cols, array.dataflow)
        self.half_ifmap = array.ifmap_sram_words // 2
        self.half_filter = array.filter_sram_words // 2
        self.half_ofmap = array.ofmap_sram_words // 2
        self.ifmap_unique = max(1, min(layer.ifmap_words, layer.m * layer.k))
        # the run of output pixels one fold (OS) or one pass (IS) covers, and its input footprint
        run = grid.rows if array.dataflow is Dataflow.OUTPUT_STATIONARY else grid.cols
        last_run = layer.m - (ceil_div(layer.m, run) - 1) * run
        self.full_run, self.last_run = min(run, layer.m), last_run
        self.runs = ceil_div(layer.m, run)
        self.footprint_full = self._footprint(self.full_run)
        self.footprint_sum = (self.runs - 1) * self.footprint_full + self._footprint(last_run)
        # a sweep over all runs reads the input once when two footprints (a tile and its halo) fit,
        # else each run reads its own footprint when one fits, else its im2col rows stream through
        self.halo_fits = 2 * self.footprint_full <= self.half_ifmap
        self.footprint_fits = self.footprint_full <= self.half_ifmap
        self.ifmap_resident = self.ifmap_unique <= self.half_ifmap
        self.filter_resident = layer.filter_words <= self.half_filter
        self.fed_together = array.fed_together

    def _footprint(self, pixels: int) -> int:
        im2col = pixels * self.layer.k
        conv = self.layer.conv
        return im2col if conv is None else min(im2col, conv.footprint_words(pixels))

    def _run_input(self, pixels: int) -> float:
        """Input words a run of ``pixels`` output pixels (all of ``k``) reads from main memory.

        The three regimes only ever grow: halos kept (the sweep reads the input once), each
        footprint read once, or the im2col rows streamed.
        """
        footprint = self._footprint(pixels)
        if self.halo_fits:
            return footprint * self.ifmap_unique / self.footprint_sum
        shared = footprint * max(1.0, self.ifmap_unique / self.footprint_sum)
        if self.footprint_fits:
            return shared
        return max(float(pixels * self.layer.k), shared)

    def fold(self, row_fold: int, col_fold: int) -> FoldWords:
        """Words fold ``(row_fold, col_fold)`` moves: reads before it starts, writes after it ends."""
        g, layer = self.grid, self.layer
        rows, cols = g.rows_used(row_fold), g.cols_used(col_fold)
        first_row, last_row = row_fold == 0, row_fold == g.row_folds - 1
        if g.dataflow is Dataflow.OUTPUT_STATIONARY:
            ifmap = 0.0 if col_fold > 0 and self.ifmap_resident else self._run_input(rows)
            block = float(layer.k * cols)
            weights = block if first_row or block > self.half_filter else 0.0
            return FoldWords(ifmap, weights, 0.0, float(rows * cols))
        if g.dataflow is Dataflow.WEIGHT_STATIONARY:
            if col_fold > 0 and self.ifmap_resident:
                ifmap = 0.0
            elif self.ifmap_resident:
                ifmap = self.ifmap_unique * rows / layer.k
            else:
                ifmap = float(min(layer.m * rows, self.ifmap_unique))
            return FoldWords(ifmap, float(rows * cols), *self._partial_sums(layer.m * cols, first_row, last_row))
        # input stationary: the ifmap block is stationary, the filter rows stream
        ifmap = self._run_input(cols) * rows / layer.k
        weights = 0.0 if col_fold > 0 and self.filter_resident else float(rows * layer.n)
        return FoldWords(ifmap, weights, *self._partial_sums(cols * layer.n, first_row, last_row))

    def _partial_sums(self, block: int, first_row: bool, last_row: bool) -> tuple[float, float]:
        """(reads, writes) of a pass's output block for one fold of the stationary dataflows."""
        if block <= self.half_ofmap:
            return 0.0, float(block) if last_row else 0.0
        return (0.0 if first_row else float(block)), float(block)

    def representatives(self) -> list[tuple[int, int, int]]:
        """``(row_fold, col_fold, count)``: one fold of each class of identical folds, and how many.

        Folds differ only by being the first, a middle or the last of their pass and of the layer.
        """
        return [
            (r, c, rn * cn)
            for r, rn in fold_classes(self.grid.row_folds)
            for c, cn in fold_classes(self.grid.col_folds)
        ]

    def total(self) -> FoldWords:
        """Words the whole layer moves (the sum over its folds, computed over fold classes)."""
        total = FoldWords(0.0, 0.0, 0.0, 0.0)
        for row_fold, col_fold, count in self.representatives():
            total = total.plus(self.fold(row_fold, col_fold).scaled(count))
        return self._shared(total)

    def _shared(self, total: FoldWords) -> FoldWords:
        """``total`` with the per-pass operand read once per group of arrays fed together (module docstring).

        Every pass reads the same amount of it, so the group's share is exact over the whole layer; an
        operand resident for the whole layer is read once anyway.
        """
        col_folds = self.grid.col_folds
        if self.fed_together == 1 or col_folds == 1:
            return total
        share = ceil_div(col_folds, self.fed_together) / col_folds
        if self.grid.dataflow is Dataflow.INPUT_STATIONARY:
            if self.filter_resident:
                return total
            return FoldWords(total.ifmap_reads, total.filter_reads * share, total.ofmap_reads, total.ofmap_writes)
        if self.ifmap_resident:
            return total
        return FoldWords(total.ifmap_reads * share, total.filter_reads, total.ofmap_reads, total.ofmap_writes)


def fold_classes(folds: int) -> list[tuple[int, int]]:
    """``(index, count)``: the first, one middle and the last of ``folds`` folds, and how many each stands for."""
    if folds == 1:
        return [(0, 1)]
    if folds == 2:
        return [(0, 1), (1, 1)]
    return [(0, 1), (1, folds - 2), (folds - 1, 1)]


def split_stream(layer: MatrixLayer, dataflow: Dataflow, parts: int) -> MatrixLayer:
    """One of ``parts`` equal slices of ``layer`` cut along its streamed dimension ``T`` (rounded up).

    A compiler cuts ``T`` so that a stationary dataflow's partial sums fit the ofmap SRAM, paying a
    fill and drain per slice and re-reading the stationary operand per slice. Output-stationary
    layers stream ``k``, whose partial sums never leave the array, so they are not cut.
    """
    if parts == 1 or dataflow is Dataflow.OUTPUT_STATIONARY:
        return layer
    if dataflow is Dataflow.WEIGHT_STATIONARY:
        m = ceil_div(layer.m, parts)
        return MatrixLayer(
            m, layer.n, layer.k, ceil_div(layer.ifmap_words, parts), layer.filter_words, m * layer.n, layer.conv
        )
    n = ceil_div(layer.n, parts)
    return MatrixLayer(
        layer.m, n, layer.k, layer.ifmap_words, ceil_div(layer.filter_words, parts), layer.m * n, layer.conv
    )


def dram_words(layer: MatrixLayer, array: ArrayConfig) -> FoldWords:
    """Main-memory words of ``layer`` on ``array`` (reads per port, partial-sum reads, writes)."""
    return TrafficModel(layer, array).total()
