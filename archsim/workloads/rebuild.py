"""A workload's trace rebuilt with one thing changed: what a refusal checks before it names a change.

A step that does not fit is refused naming the largest batch that would, and the changes that would
make it fit (:func:`archsim.memory_fit.check_needs`, :mod:`archsim.run.remedies`). Each is checked by
building the changed step: :class:`Rebuilder` holds everything a run's trace was built from, builds it
at another batch with other recomputation, and gives the rebuilder of the same run at another
tensor-parallel degree.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.spec.software import Rewrite
from archsim.workloads import build_trace
from archsim.workloads.options import Recompute, TraceOptions
from archsim.workloads.trace import Mode, Trace


@dataclass(frozen=True)
class Rebuilder:
    """``rebuild(batch, recompute)``: ``workload``'s trace at another batch, recomputing ``recompute``."""

    workload: str
    library: Library
    mode: Mode
    precision: Precision
    seq_len: int | None
    options: TraceOptions

    def __call__(self, batch: int, recompute: Recompute) -> Trace:
        """The trace at ``batch``; asked explicitly, recomputation replaces what the software stack does."""
        explicit = replace(self.options, recompute=recompute, rewrites=self.options.rewrites - {Rewrite.RECOMPUTE})
        return build_trace(self.workload, self.library, self.mode, batch, self.precision, self.seq_len, explicit)

    def sharded(self, tensor_parallel: int) -> Rebuilder:
        """The same run's rebuilder with each chip holding a ``1/tensor_parallel`` shard of every layer."""
        return replace(self, options=replace(self.options, tensor_parallel=tensor_parallel))
