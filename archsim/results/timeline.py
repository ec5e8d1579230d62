"""Chrome / Perfetto trace-event export of a step: one lane per chip for compute, one per link.

The file is the JSON object form of the Trace Event Format (``{"traceEvents": [...]}``) that
https://ui.perfetto.dev and chrome://tracing open. Every event has ``ph``, ``ts``, ``pid``, ``tid`` and
``name``; timestamps and durations are microseconds. Busy intervals are complete events (``ph: X``,
``dur >= 0``); metadata events (``ph: M``) name the two processes (``chips``, ``links``) and every lane.

Chips: one lane per chip up to :data:`MIRRORED_CHIPS` chips, each showing its representative's ops
(by symmetry every data-parallel replica runs the same schedule at the same time); beyond that, one
lane per representative chip, named for the chips it stands for. Links: one lane per representative
link the engine simulated (each stands for every link in its position).

:func:`write_timeline` writes atomically: to a temporary file in the same folder, then renamed over
the target, so a failed run leaves nothing half-written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

MIRRORED_CHIPS = 64
"""Systems up to this many chips get one compute lane per chip."""
CHIPS_PID = 1
LINKS_PID = 2


@dataclass(frozen=True, slots=True)
class TimelineSpan:
    """One busy interval on a lane, in seconds of simulated time."""

    name: str
    start_s: float
    end_s: float
    category: str = ""


@dataclass
class Timeline:
    """Lanes of a step: compute per chip, transfers per link."""

    chips: list[tuple[str, list[TimelineSpan]]] = field(default_factory=list)
    links: list[tuple[str, list[TimelineSpan]]] = field(default_factory=list)

    def at_clock(self, clock_scale: float) -> Timeline:
        """The timeline of the step at ``clock_scale`` of the nominal clock (a power-limit throttle's).

        The engine replays at the nominal clock; a throttled run's result stretches every time of its
        step by ``1 / clock_scale`` (:mod:`archsim.results.power`), and so does its timeline.
        """
        if clock_scale == 1.0:
            return self

        def stretched(lanes: list[tuple[str, list[TimelineSpan]]]) -> list[tuple[str, list[TimelineSpan]]]:
            return [
                (name, [replace(s, start_s=s.start_s / clock_scale, end_s=s.end_s / clock_scale) for s in spans])
                for name, spans in lanes
            ]

        return Timeline(stretched(self.chips), stretched(self.links))


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 6)


def _lanes(pid: int, lanes: Sequence[tuple[str, list[TimelineSpan]]], events: list[dict[str, Any]]) -> None:
    for tid, (name, spans) in enumerate(lanes):
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "ts": 0, "args": {"name": name}})
        events.append(
            {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "ts": 0, "args": {"sort_index": tid}}
        )
        for span in spans:
            event: dict[str, Any] = {
                "ph": "X",
                "name": span.name,
                "pid": pid,
                "tid": tid,
                "ts": _us(span.start_s),
                "dur": max(0.0, _us(span.end_s) - _us(span.start_s)),
            }
            if span.category:
                event["cat"] = span.category
            events.append(event)


def trace_events(timeline: Timeline) -> dict[str, Any]:
    """The trace-event JSON object of a timeline."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": CHIPS_PID, "tid": 0, "ts": 0, "args": {"name": "chips"}},
        {"ph": "M", "name": "process_name", "pid": LINKS_PID, "tid": 0, "ts": 0, "args": {"name": "links"}},
    ]
    _lanes(CHIPS_PID, timeline.chips, events)
    _lanes(LINKS_PID, timeline.links, events)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"generator": "archsim"}}


def write_timeline(timeline: Timeline, path: str | os.PathLike[str]) -> None:
    """Write the trace-event file atomically; a failure raises UsageError naming the path."""
    from archsim.outfile import write_file  # and tempfile: loaded when a file is written, not by every run

    text = json.dumps(trace_events(timeline), separators=(",", ":"), allow_nan=False)
    write_file(path, text, "--timeline")
