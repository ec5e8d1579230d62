"""Slow, obviously correct twins of archsim's kernels and closed forms, for the property tests.

Each function here computes the same thing as a fast path in ``archsim/`` the plain way: element by
element, fold by fold, or by building the (small) matrices that SCALE-Sim builds.
"""

from __future__ import annotations

import math

from archsim.models.systolic_map import FoldWords, TrafficModel
from archsim.spec.chip import Dataflow


def fold_schedule_reference(
    fold_cycles: int, reads: list[list[float]], writes: list[float], bandwidth: tuple[float, float, float]
) -> float:
    """Twin of :func:`archsim.kernels.fold_schedule.fold_schedule` (before rounding up).

    Every request is listed with its issue time and served by its port in issue order (a write of
    fold ``f`` and the reads of fold ``f + 2`` are both issued when fold ``f`` ends; the write goes
    first); fold ``f`` starts after fold ``f - 1``, after its own reads and after the writes of fold
    ``f - 2``.
    """
    folds = len(reads)
    start = [0.0] * folds
    end = [0.0] * folds
    read_done = [0.0] * folds
    write_done = [0.0] * folds
    port_free = [0.0, 0.0, 0.0]

    def serve(port: int, issued: float, words: float) -> float:
        port_free[port] = max(port_free[port], issued) + words / bandwidth[port]
        return port_free[port]

    for f in range(min(2, folds)):
        read_done[f] = max(serve(p, 0.0, reads[f][p]) for p in range(3))
    for f in range(folds):
        ready = [end[f - 1] if f >= 1 else 0.0, read_done[f], write_done[f - 2] if f >= 2 else 0.0]
        start[f] = max(ready)
        end[f] = start[f] + fold_cycles
        write_done[f] = serve(2, end[f], writes[f])
        if f + 2 < folds:
            read_done[f + 2] = max([end[f]] + [serve(p, end[f], reads[f + 2][p]) for p in range(3)])
    return max(end[-1], write_done[-1]) if folds else 0.0


def _skew(matrix: list[list[int]]) -> list[list[int]]:
    """SCALE-Sim's skew: column ``c`` delayed by ``c`` rows (``-1`` is no request)."""
    rows, cols = len(matrix), len(matrix[0])
    out = [[-1] * cols for _ in range(rows + cols - 1)]
    for c in range(cols):
        for r in range(rows):
            out[r + c][c] = matrix[r][c]
    return out


def scalesim_ofmap_demand(sr: int, sc: int, t: int, rows: int, cols: int, dataflow: Dataflow) -> list[list[int]]:
    """SCALE-Sim 3.0's ofmap demand matrix (one row per cycle), built the way it builds it.

    Entries are output indices ``0..`` or ``-1``; only the shape and the valid entries matter here.
    """
    demand: list[list[int]] = []
    row_folds, col_folds = math.ceil(sr / rows), math.ceil(sc / cols)
    for fc in range(col_folds):
        for fr in range(row_folds):
            used_r = min(rows, sr - fr * rows)
            used_c = min(cols, sc - fc * cols)
            if dataflow is Dataflow.OUTPUT_STATIONARY:
                block = [[i * cols + j if i < used_r and j < used_c else -1 for j in range(cols)] for i in range(rows)]
                fold = [[-1] * cols for _ in range(t - 1)] + block[::-1]
            else:
                block = [[i * cols + j if j < used_c else -1 for j in range(cols)] for i in range(t)]
                fold = [[-1] * cols for _ in range(2 * rows - 1)] + block
            demand += _skew(fold)
    return demand


def scalesim_cycles_reference(sr: int, sc: int, t: int, rows: int, cols: int, dataflow: Dataflow) -> int:
    """SCALE-Sim's "Total Cycles" in CALC mode: the index of its last demand row (no stalls)."""
    return len(scalesim_ofmap_demand(sr, sc, t, rows, cols, dataflow)) - 1


def scalesim_write_stalls(demand: list[list[int]], ofmap_words: int, drain_words_per_cycle: int) -> int:
    """Stall cycles of SCALE-Sim 3.0's ofmap write buffer (``memory/write_buffer.py``) on ``demand``.

    The buffer stores each valid write, flushing its partly filled line of ``drain_words_per_cycle``
    words into the drain queue whenever a drain starts; a drain moves
    ``ceil((ofmap_words - active) / width)`` queued lines, one per cycle, and frees their width in
    words except for the empty slots of its last line. A write that finds no free space while a
    drain is under way waits for it to end.
    """
    width = drain_words_per_cycle
    active = math.ceil(ofmap_words * 0.5)
    drain_size = ofmap_words - active
    lines_per_drain = math.ceil(drain_size / width)
    free = ofmap_words
    lines: list[int] = []  # valid words of each queued line
    partial = 0  # words in the line being filled
    drained_lines = 0
    drain_end = 0
    stalls = 0
    for index, row in enumerate(demand):
        cycle = index + stalls
        offset = 0
        for elem in row:
            if elem == -1:
                continue
            partial += 1
            free -= 1
            if partial == width:
                lines.append(partial)
                partial = 0
            now = cycle + offset
            if now < drain_end:
                if free <= 0:
                    offset += drain_end - now
            elif free < active:
                if partial:
                    lines.append(partial)
                    partial = 0
                batch = lines[drained_lines : drained_lines + lines_per_drain]
                drained_lines += len(batch)
                free += len(batch) * width - (width - batch[-1])
                drain_end = now + len(batch) - 1
        stalls += offset
    return stalls


def traffic_reference(model: TrafficModel) -> FoldWords:
    """Main-memory words of a layer summed over every one of its folds."""
    total = FoldWords(0.0, 0.0, 0.0, 0.0)
    for col_fold in range(model.grid.col_folds):
        for row_fold in range(model.grid.row_folds):
            total = total.plus(model.fold(row_fold, col_fold))
    return total
