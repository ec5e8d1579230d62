"""Padding of variable-length sequences: what a training step computes when its stack leaves it out.

A data set of sequences of many lengths is padded to one ``seq_len`` (MLPerf's BERT: 512 tokens).
Two ways of not computing the padding are software rewrites (:class:`~archsim.spec.software.Rewrite`),
and ``--padding`` asks for either by name (:class:`~archsim.workloads.options.Padding`):

* ``remove-padding`` (NVIDIA's unpadded BERT): each sequence is computed at its real length, priced
  at the data set's mean, ``dataset.mean_tokens`` of the workload's convergence data;
* ``pack-sequences`` (Graphcore's and Habana's packed BERT, Krell et al. 2021): whole sequences are
  packed into packs of ``seq_len`` tokens and each pack is computed as one padded sequence would be,
  attention over the whole pack; a step of ``B`` sequences computes ``ceil(B x mean_tokens /
  seq_len)`` packs (packs assumed full: an upper bound on how well the sequences pack).

Either way the step still counts ``B`` sequences of ``seq_len`` (throughput, global batch, time to
train); the trace's meta says what was computed (``padding``, ``tokens_per_sequence``). The mean is
published for one data set at one length, so anything else (inference, another length, a workload
without convergence data) is computed padded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from archsim.errors import LookupFailed, UsageError
from archsim.spec.library import Library
from archsim.spec.model import ModelSpec
from archsim.spec.software import Rewrite
from archsim.workloads.options import Padding, TraceOptions
from archsim.workloads.trace import Mode, Trace


@dataclass(frozen=True)
class Unpadded:
    """How a step's sequences are computed without their padding."""

    tokens: int
    """Mean real tokens per sequence (the data set's ``mean_tokens``)."""
    packed: bool
    """True: packed into packs of ``seq_len`` tokens; False: each sequence at ``tokens``."""

    def shape(self, batch: int, seq_len: int) -> tuple[int, int]:
        """The graph's ``(sequences, tokens each)`` for a step of ``batch`` sequences padded to ``seq_len``."""
        if self.packed:
            return math.ceil(batch * self.tokens / seq_len), seq_len
        return batch, self.tokens

    def meta(self) -> dict[str, str]:
        """What the trace says was computed."""
        return {"padding": "packed" if self.packed else "removed", "tokens_per_sequence": str(self.tokens)}


def unpadded(
    library: Library, spec: ModelSpec, mode: Mode, seq_len: int | None, options: TraceOptions
) -> Unpadded | None:
    """How a BERT training step leaves its padding out under ``options``, or None (computed padded)."""
    rewrites = options.applied()
    packed = Rewrite.PACK_SEQUENCES in rewrites
    if mode is not Mode.TRAIN or spec.bert is None or not (packed or Rewrite.REMOVE_PADDING in rewrites):
        return None
    try:
        data = library.convergence(spec.name)
    except LookupFailed:
        return None
    length = spec.bert.default_seq_len if seq_len is None else seq_len
    tokens = data.dataset.mean_tokens
    return None if tokens is None or data.seq_len != length else Unpadded(tokens, packed)


def check_left_out(padding: Padding | None, trace: Trace, source: str) -> None:
    """Refuse (one line) ``--padding removed`` or ``packed`` where ``trace`` computed its padding.

    A stack that leaves padding out computes the padded length where its data set publishes no mean
    (its other runs are unchanged); asked for by name, it must take place.
    """
    if padding in (Padding.REMOVED, Padding.PACKED) and "padding" not in trace.meta:
        assert padding is not None
        problem = (
            f"{padding.value}: no published mean sequence length for this run; padding is left out of "
            "training runs whose convergence data give dataset.mean_tokens at their --seq-len (bert-large at 512)"
        )
        raise UsageError(source, "--padding", problem)
