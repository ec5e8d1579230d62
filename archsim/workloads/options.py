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
    gen_len: int | None = None
    """``decode`` runs only: tokens generated per sequence after the prompt (None: the default,
    :data:`archsim.workloads.decoder.DEFAULT_GEN_LEN`); sets the KV cache and the mean context."""

    @property
    def is_default(self) -> bool:
        """True when the options leave the graph as written (fusion and recomputation)."""
        return self.fusion is Fusion.NONE and not self.recompute
