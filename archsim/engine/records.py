"""What the engine reports: collectives and transfers, pipeline blocks, and the link observers.

The engine keeps no statistics of its own. Whoever runs a step attaches observers to its network
(:class:`~archsim.engine.network.LinkObserver`): :class:`LinkStatistics` for the bytes and busy time
of every lane (the result's per-link utilization), :class:`LinkSpans` for the busy intervals a
timeline draws. Collectives, pipeline transfers and blocks come back as small frozen records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from archsim.engine.network import Lane
    from archsim.workloads.microbatches import BlockKind


@dataclass(frozen=True, slots=True)
class CollectiveRecord:
    """One collective (or pipeline transfer) of the step."""

    name: str
    stage: int
    bytes: float
    start_s: float
    end_s: float


@dataclass(frozen=True, slots=True)
class Block:
    """One block a pipeline stage ran, in seconds of simulated time."""

    stage: int
    kind: BlockKind
    microbatch: int
    """The microbatch (0 for the update)."""
    start_s: float
    end_s: float


@dataclass(frozen=True, slots=True)
class Span:
    """One busy interval of a lane (for timelines), in seconds of simulated time."""

    start_s: float
    end_s: float
    label: str


@dataclass
class LinkStatistics:
    """Observer: seconds each lane spent transferring and the bytes it carried."""

    busy_s: dict[Lane, float] = field(default_factory=dict)
    bytes: dict[Lane, float] = field(default_factory=dict)

    def transfer(self, lane: Lane, start_s: float, end_s: float, nbytes: float, label: str) -> None:
        """Count the transfer on ``lane``."""
        self.busy_s[lane] = self.busy_s.get(lane, 0.0) + (end_s - start_s)
        self.bytes[lane] = self.bytes.get(lane, 0.0) + nbytes


@dataclass
class LinkSpans:
    """Observer: every lane's busy intervals, for a timeline (transfers that took no time are left out)."""

    spans: dict[Lane, list[Span]] = field(default_factory=dict)

    def transfer(self, lane: Lane, start_s: float, end_s: float, nbytes: float, label: str) -> None:
        """Keep the interval ``lane`` was busy with ``label``."""
        if end_s > start_s:
            self.spans.setdefault(lane, []).append(Span(start_s, end_s, label))
