"""The compiled kernel of :mod:`archsim.kernels.fold_schedule` (imports numba; use the wrapper there).

Arguments are checked by the wrapper: ``reads`` is a C-contiguous float64 ``(folds, 3)`` array,
``writes`` float64 ``(folds,)``, ``bandwidth`` float64 ``(3,)`` of positive words per cycle.
Returns the cycle at which the last write ends (float).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def fold_schedule_kernel(fold_cycles: float, reads: Any, writes: Any, bandwidth: Any) -> float:
    """End of the last write of a double-buffered fold schedule (see the wrapper's module docstring)."""
    folds = reads.shape[0]
    free = np.zeros(3)  # when each port finishes the requests it already has
    loaded = np.zeros(2)  # arrival of the reads of folds f and f + 1
    written = np.zeros(2)  # when the outputs of folds f - 2 and f - 1 have left the ofmap SRAM
    for f in range(min(2, folds)):
        for p in range(3):
            free[p] += reads[f, p] / bandwidth[p]
            loaded[f] = max(loaded[f], free[p])
    end = 0.0
    for f in range(folds):
        start = max(end, loaded[0], written[0])
        end = start + fold_cycles
        free[2] = max(free[2], end) + writes[f] / bandwidth[2]
        written[0], written[1] = written[1], free[2]
        loaded[0], loaded[1] = loaded[1], end
        if f + 2 < folds:
            for p in range(3):
                free[p] = max(free[p], end) + reads[f + 2, p] / bandwidth[p]
                loaded[1] = max(loaded[1], free[p])
    return float(max(end, written[1]))
