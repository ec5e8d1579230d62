"""How a framework runs a network: the trace options every builder honours (:func:`finish_trace`).

They change the trace, not the chip, so the same options apply to every target; the defaults are the
graph as written, with every activation a backward op needs saved from the forward pass.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from archsim.spec.common import Fusion
from archsim.spec.software import Rewrite


class Recompute(enum.StrEnum):
    """What a training step recomputes in its backward pass instead of keeping from the forward pass.

    * ``none``: every activation a backward op reads is kept;
    * ``selective`` (Korthikanti et al. 2022, arXiv 2205.05198, Sec. 5): only the ops a builder marks as
      cheap to recompute and large to keep -- a decoder's attention core, scores ``Q K^T``, scale and
      mask, softmax, dropout and context ``P V`` -- run again; everything else is kept;
    * ``full``: only checkpoints are kept (a decoder: each layer's input; any other graph: Chen et
      al.'s ``sqrt(n)`` segments), see :mod:`archsim.workloads.training`.
    """

    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"

    @classmethod
    def of(cls, value: object) -> Recompute:
        """``value`` as a member: a member, its name, or a bool (True is ``full``, False ``none``).

        Raises ``ValueError`` for anything else.
        """
        if isinstance(value, bool):
            return cls.FULL if value else cls.NONE
        if not isinstance(value, str):
            raise ValueError(f"{value!r} is not a recomputation")
        return cls(value)


class Padding(enum.StrEnum):
    """Whether a training step computes its sequences' padding (``--padding``).

    * ``kept``: every sequence is computed at the padded ``seq_len``;
    * ``removed``: each sequence at its data set's mean real tokens (the ``remove-padding`` rewrite);
    * ``packed``: sequences packed into packs of ``seq_len`` tokens (the ``pack-sequences`` rewrite).

    See :mod:`archsim.workloads.padding`.
    """

    KEPT = "kept"
    REMOVED = "removed"
    PACKED = "packed"


@dataclass(frozen=True)
class TraceOptions:
    """Fusion and recomputation of one trace (:class:`~archsim.spec.common.Fusion` says what each fusion is)."""

    fusion: Fusion = Fusion.NONE
    """Fusion asked for explicitly (``--fusion``)."""
    recompute: Recompute | bool = Recompute.NONE
    """Activation recomputation (:class:`Recompute`; True means ``full``, False ``none``): keep
    checkpoints, run forward ops again in the backward pass (:mod:`archsim.workloads.training`)."""
    rewrites: frozenset[Rewrite] = frozenset()
    """The software stack's graph rewrites (:mod:`archsim.workloads.rewrites`). They apply to every
    workload built here; a trace file, already built, keeps the rewrites it was built with."""
    gen_len: int | None = field(default=None, kw_only=True)
    """``decode`` runs only: tokens generated per sequence after the prompt (None: the default,
    :data:`archsim.workloads.decoder.DEFAULT_GEN_LEN`); sets the KV cache and the mean context."""
    tensor_parallel: int = field(default=1, kw_only=True)
    """Chips that split each layer of a decoder model (Megatron-LM's tensor parallelism,
    :mod:`archsim.workloads.tensor_parallel`); the trace is one of them."""
    sequence_parallel: bool = field(default=False, kw_only=True)
    """With tensor parallelism, norms, dropouts and residual adds run on ``1/T`` of the tokens and
    each all-reduce is a reduce-scatter plus an all-gather (Korthikanti et al. 2022)."""
    expert_parallel: int = field(default=1, kw_only=True)
    """Chips of the data-parallel group that share a mixture of experts' experts
    (:mod:`archsim.workloads.expert_parallel`); the trace is one of them."""
    bn_group: int = field(default=1, kw_only=True)
    """Consecutive chips that share their batch-norm statistics in training (synchronized batch norm,
    :mod:`archsim.workloads.sync_batchnorm`); 1: each chip normalizes over its own batch."""

    @property
    def is_default(self) -> bool:
        """True when nothing is asked beyond the software's own rewrites (which a built trace keeps)."""
        return self.fusion is Fusion.NONE and self.recomputation is Recompute.NONE

    @property
    def recomputation(self) -> Recompute:
        """What is asked to be recomputed explicitly (``recompute`` as a :class:`Recompute`)."""
        return Recompute.of(self.recompute)

    def applied(self) -> frozenset[Rewrite]:
        """Every rewrite to apply: the software's and those asked explicitly (``full`` recomputation is one)."""
        asked = {Rewrite.NORM_ACT} if self.fusion is Fusion.NORM_ACT else set()
        full = self.recomputation is Recompute.FULL
        return self.rewrites | asked | ({Rewrite.RECOMPUTE} if full else set())
