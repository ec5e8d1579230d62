"""The multi-chip engine's choices that a request names before any engine code runs.

A request (:class:`~archsim.run.request.Layout`) and the options of a system run
(:class:`~archsim.run.context.SystemOptions`) carry these as plain values. They live apart from the
SimPy modules (:mod:`~archsim.engine.parallel`, :mod:`~archsim.engine.collectives`) so that checking
a request, or running one chip, loads none of those (a one-chip run uses the list scheduler of
:mod:`~archsim.engine.replay` and never imports SimPy).
"""

from __future__ import annotations

import enum


class Schedule(enum.StrEnum):
    """Pipeline schedules."""

    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"


DEFAULT_CHUNK_BYTES = 512 * 2**10
"""Pipelining chunk (512 KiB, the slot size of NCCL's default 4 MiB buffer over its 8 steps)."""
