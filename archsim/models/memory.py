"""Main-memory traffic of a tiled matrix product through a last-level cache or buffer.

A tiled product cuts its output into ``m_tiles x n_tiles`` tiles. Each row panel of ``A`` is needed by
every tile of its row and each column panel of ``B`` by every tile of its column. The tiles that run
at the same time (one wave) form a block of ``wave_m x wave_n`` tiles, rasterised to be as square as
the grid allows, and share their panels through the cache (which only needs to hold the current
slab of ``K``), so ``A`` crosses the memory interface once per column of waves and ``B`` once per row
of waves. Every tensor moves at least once: the compulsory traffic of the roofline.
"""

from __future__ import annotations

from typing import Any, cast

from archsim.models.base import SCALAR, Arith, ceil_div, operand_bytes
from archsim.workloads.trace import Op


def wave_shape(m_tiles: int, n_tiles: int, concurrent: int) -> tuple[int, int]:
    """The ``(wave_m, wave_n)`` block of tiles that run together, as square as the grid allows."""
    return cast(tuple[int, int], waves(SCALAR, m_tiles, n_tiles, concurrent))


def waves(arith: Arith, m_tiles: int, n_tiles: int, concurrent: Any) -> tuple[Any, Any]:
    """:func:`wave_shape` of each configuration's ``concurrent`` tiles (:class:`~archsim.models.base.Arith`)."""
    wave_m = arith.maximum(1, arith.minimum(m_tiles, arith.isqrt(concurrent)))
    wave_n = arith.maximum(1, arith.minimum(n_tiles, concurrent // wave_m))
    wave_m = arith.maximum(1, arith.minimum(m_tiles, concurrent // wave_n))
    return wave_m, wave_n


def matrix_dram_bytes(op: Op, m_tiles: int, n_tiles: int, concurrent: int, element_bytes: float) -> int:
    """Main-memory bytes of a tiled matrix op (reads are ``A``, ``B``, then any extras)."""
    return cast(int, tiled_dram_bytes(SCALAR, op, m_tiles, n_tiles, concurrent, element_bytes))


def tiled_dram_bytes(arith: Arith, op: Op, m_tiles: int, n_tiles: int, concurrent: Any, element_bytes: float) -> Any:
    """:func:`matrix_dram_bytes` of each configuration's ``concurrent`` tiles (:class:`~archsim.models.base.Arith`).

    An op without two operands moves its tensors' bytes, the same on every configuration (an int).
    """
    if op.gemm is None or len(op.reads) < 2:
        return op.bytes
    wave_m, wave_n = waves(arith, m_tiles, n_tiles, concurrent)
    a, b, extras = operand_bytes(op, element_bytes)
    return a * ceil_div(n_tiles, wave_n) + b * ceil_div(m_tiles, wave_m) + extras + op.bytes_written
