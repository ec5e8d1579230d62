"""Observers of a run, attached from outside: what watches the engine replay a step.

The caller of :func:`archsim.run.runner.run` passes observers (``run(request, library,
observers=[recorder])``); the run attaches them to the engine and tells them what happened. A
:class:`RunObserver` is a :class:`~archsim.engine.network.LinkObserver` (every transfer on a link of
a system's network, as the engine makes it) that is also told, once per replayed step, the compute
lanes of its chips (:meth:`RunObserver.step`). :class:`TimelineRecorder` is the timeline's observer
(``archsim run --timeline``, the timeline figure): it keeps the links' busy intervals and each step's
lanes as a :class:`~archsim.results.timeline.Timeline`. :class:`Shifted` shows an observer a later
step as it sits in a longer run (a generation's decode step after its prefill). Nothing is built for
a timeline unless an observer is attached, so a plain run pays nothing for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from archsim.engine.records import LinkSpans
from archsim.results.timeline import Timeline, TimelineSpan

if TYPE_CHECKING:  # the multi-chip engine's types: a one-chip run never loads those modules
    from archsim.engine.network import Lane

Lanes = list[tuple[str, list[TimelineSpan]]]
"""Named lanes of a timeline, each with its busy intervals (seconds of simulated time)."""


class RunObserver(Protocol):
    """Watches a run: each transfer on a link as the engine makes it, and each replayed step's chip lanes."""

    def transfer(self, lane: Lane, start_s: float, end_s: float, nbytes: float, label: str) -> None:
        """``nbytes`` crossed ``lane`` from ``start_s`` to ``end_s`` (as a ``LinkObserver`` is told)."""

    def step(self, chips: Callable[[], Lanes], lanes: Sequence[Lane]) -> None:
        """A step was replayed: ``chips()`` builds its compute lanes, ``lanes`` are its network's links."""


@dataclass
class TimelineRecorder:
    """Observer that records a run's timeline: one compute lane per chip, one lane per simulated link.

    Steps of one run (a generation's prefill and decode) add their spans to the lanes of the same name.
    """

    timeline: Timeline = field(default_factory=Timeline)
    _links: LinkSpans = field(default_factory=LinkSpans)

    def transfer(self, lane: Lane, start_s: float, end_s: float, nbytes: float, label: str) -> None:
        """Keep the interval ``lane`` was busy with ``label`` (a transfer that took no time is left out)."""
        self._links.transfer(lane, start_s, end_s, nbytes, label)

    def step(self, chips: Callable[[], Lanes], lanes: Sequence[Lane]) -> None:
        """Add the step's chip lanes and its links' intervals (kept since the last step) to the timeline."""
        link_lanes = [
            (
                f"{lane.name} [{lane.tier.link}]",
                [TimelineSpan(sp.label, sp.start_s, sp.end_s, "link") for sp in self._links.spans.get(lane, [])],
            )
            for lane in lanes
        ]
        self._links = LinkSpans()
        self.timeline = Timeline(_merged(self.timeline.chips, chips()), _merged(self.timeline.links, link_lanes))


def _merged(first: Lanes, then: Lanes) -> Lanes:
    """``first``'s lanes with ``then``'s spans appended to the lane of the same name (new names after)."""
    merged = {name: list(spans) for name, spans in first}
    for name, spans in then:
        merged.setdefault(name, []).extend(spans)
    return list(merged.items())


@dataclass(frozen=True)
class Shifted:
    """Shows ``observer`` a step that starts ``offset_s`` into the run, its spans' names prefixed by ``prefix``."""

    observer: RunObserver
    offset_s: float
    prefix: str

    def transfer(self, lane: Lane, start_s: float, end_s: float, nbytes: float, label: str) -> None:
        """The transfer, moved by the offset and renamed."""
        self.observer.transfer(lane, start_s + self.offset_s, end_s + self.offset_s, nbytes, self.prefix + label)

    def step(self, chips: Callable[[], Lanes], lanes: Sequence[Lane]) -> None:
        """The step's chip lanes, moved by the offset and renamed."""

        def shifted() -> Lanes:
            return [(name, [self._span(s) for s in spans]) for name, spans in chips()]

        self.observer.step(shifted, lanes)

    def _span(self, span: TimelineSpan) -> TimelineSpan:
        name, start, end = self.prefix + span.name, span.start_s + self.offset_s, span.end_s + self.offset_s
        return replace(span, name=name, start_s=start, end_s=end)
