"""How a framework runs a network: the trace options every builder honours (:func:`finish_trace`).

They change the trace, not the chip, so the same options apply to every target; the defaults are the
graph as written, with every activation a backward op needs saved from the forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from archsim.spec.common import Fusion


@dataclass(frozen=True)
class TraceOptions:
    """Fusion and recomputation of one trace (:class:`~archsim.spec.common.Fusion` says what each fusion is)."""

    fusion: Fusion = Fusion.NONE
    recompute: bool = False
    """Activation checkpointing: keep checkpoints, run forward ops again in the backward pass
    (:mod:`archsim.workloads.training`)."""

    @property
    def is_default(self) -> bool:
        """True when the options leave the graph as written."""
        return self == TraceOptions()
