"""Double-buffered fold schedule of one systolic array: when each fold can start, and the stalls.

The array runs folds one after another, each taking ``fold_cycles`` once it starts. Three SRAM ports
(ifmap, filter, ofmap) move words to and from main memory, each at its own bandwidth in words per
cycle, serving requests in the order they are issued:

* every SRAM is double-buffered, so the reads of fold ``f`` are issued when fold ``f - 2`` ends (its
  half of the buffer is free then; the first two folds' reads are issued at cycle 0);
* the outputs of fold ``f`` are written when it ends, and fold ``f + 2`` cannot start before they
  have left the ofmap SRAM (it reuses that half);
* fold ``f`` starts when fold ``f - 1`` has ended and its reads have arrived.

The layer ends when the last fold's outputs are written. Stall cycles are the end minus
``folds * fold_cycles``: the exposed first reads, the exposed last writes, and every wait for a port.
Times are float cycles; the wrapper rounds the end up to a whole cycle.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

_KERNEL: Any = None


def warm_up() -> None:
    """Import numba and compile (or load) the kernel now, e.g. before timing a run."""
    global _KERNEL  # one compiled kernel per process
    if _KERNEL is None:
        # numba costs ~0.5 s to import: only the paths that schedule folds pay it
        from archsim.kernels._fold_schedule_jit import fold_schedule_kernel

        _KERNEL = fold_schedule_kernel


def fold_schedule(
    fold_cycles: int,
    reads: npt.NDArray[np.float64],
    writes: npt.NDArray[np.float64],
    bandwidth: tuple[float, float, float],
) -> int:
    """Cycles from the first read to the last write of a layer's folds (see the module docstring).

    ``reads`` is ``(folds, 3)``: words each fold needs on the ifmap, filter and ofmap ports before it
    starts; ``writes`` is ``(folds,)``: words each fold writes on the ofmap port when it ends;
    ``bandwidth`` is words per cycle of each port. Raises ValueError on malformed input.
    """
    if fold_cycles < 1:
        raise ValueError(f"fold_cycles must be at least 1, got {fold_cycles}")
    if reads.ndim != 2 or reads.shape[1] != 3 or writes.shape != (reads.shape[0],):
        raise ValueError(f"reads must be (folds, 3) and writes (folds,), got {reads.shape} and {writes.shape}")
    if reads.shape[0] == 0:
        return 0
    if min(bandwidth) <= 0:
        raise ValueError(f"port bandwidths must be positive, got {bandwidth}")
    if float(reads.min()) < 0 or float(writes.min()) < 0:
        raise ValueError("word counts must not be negative")
    warm_up()
    end = _KERNEL(
        float(fold_cycles),
        np.ascontiguousarray(reads, dtype=np.float64),
        np.ascontiguousarray(writes, dtype=np.float64),
        np.asarray(bandwidth, dtype=np.float64),
    )
    return max(int(reads.shape[0]) * fold_cycles, int(np.ceil(end - 1e-9)))
