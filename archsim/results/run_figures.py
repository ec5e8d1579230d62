"""Plotly figures of one run: per-layer time by bound, a roofline with every op placed, a timeline.

Each function takes a :class:`~archsim.results.records.RunResult` and returns a
``plotly.graph_objects.Figure`` (shown inline in a notebook; saved with
:func:`archsim.results.figures.write_html`). One trace per bound (``compute``, ``memory``, ``overhead``,
``communication``) in a fixed order and colour, so the data of each trace can be read back: the
layers of that bound, their times in seconds, FLOP/s and FLOPs per byte.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import plotly.graph_objects as go

from archsim.models.base import Bound
from archsim.results.records import LayerRecord, RunResult
from archsim.results.timeline import TimelineSpan

BOUND_COLOURS = {"compute": "#1f77b4", "memory": "#ff7f0e", "communication": "#2ca02c", "overhead": "#7f7f7f"}


def layer_label(index: int, layer: LayerRecord) -> str:
    """The category label of a layer on an axis: its index and name (names may repeat across phases)."""
    return f"{index}:{layer.name}"


COMMUNICATION_TRACE = "transfers"
"""Name of the timeline's trace of collectives and pipeline transfers (in the communication colour)."""


def _bounds() -> list[str]:
    return [b.value for b in Bound]


def note_empty(figure: go.Figure, why: str) -> go.Figure:
    """Say on ``figure`` why it has no data (an annotation in the middle of its plot area)."""
    figure.add_annotation(
        text=why, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False, font={"size": 14, "color": "#555"}
    )
    return figure


def transfer_row(name: str) -> str:
    """The timeline row of a collective or pipeline transfer: its name without microbatch or bucket number.

    ``all-reduce b3`` is on row ``all-reduce``, ``act mb2 s0->s1`` on ``act s0->s1``.
    """
    return re.sub(r"\s+\b(?:mb|b)\d+\b", "", name)


def layer_breakdown(result: RunResult) -> go.Figure:
    """Time of every layer (seconds), in trace order, one stacked bar trace per bound.

    Each trace holds only its bound's layers (``x`` their labels, ``y`` their times), so the sum of a
    trace's ``y`` is the run's ``time_by_bound`` for that bound.
    """
    labels = [layer_label(i, layer) for i, layer in enumerate(result.layers)]
    figure = go.Figure()
    for bound in _bounds():
        chosen = [(labels[i], layer) for i, layer in enumerate(result.layers) if layer.bound == bound]
        if not chosen:
            continue
        figure.add_trace(
            go.Bar(
                x=[label for label, _ in chosen],
                y=[layer.end_s - layer.start_s for _, layer in chosen],
                name=bound,
                marker={"color": BOUND_COLOURS.get(bound)},
                customdata=[[layer.kind, layer.phase, layer.unit] for _, layer in chosen],
                hovertemplate="%{x}<br>%{y:.3g} s<br>%{customdata[0]} %{customdata[1]} on %{customdata[2]}",
            )
        )
    if not result.layers:
        note_empty(figure, "no ops: the workload's trace is empty")
    figure.update_layout(
        title=f"{result.target} {result.workload} ({result.mode}, batch {result.batch}): time per layer by bound",
        barmode="stack",
        xaxis={"title": "layer", "type": "category", "categoryorder": "array", "categoryarray": labels},
        yaxis={"title": "time (s)"},
        template="plotly_white",
    )
    return figure


def roofline(result: RunResult, peak_flops: float, bandwidth_bytes_per_s: float) -> go.Figure:
    """Every op with FLOPs and main-memory bytes placed at (FLOPs per byte, achieved FLOP/s), log axes.

    ``peak_flops`` and ``bandwidth_bytes_per_s`` are one chip's (layers are one chip's ops); the roof is
    ``min(peak, bandwidth x intensity)``. Ops without FLOPs or bytes have no place and are left out.
    One marker trace per bound, then the roof (``name="roof"``). With no op to place, the figure says
    why (on an IPU every op's data stays in In-Processor-Memory: no main-memory bytes).
    """
    placed = [
        (i, layer)
        for i, layer in enumerate(result.layers)
        if layer.flops > 0 and layer.bytes > 0 and layer.end_s > layer.start_s
    ]
    figure = go.Figure()
    for bound in _bounds():
        chosen = [(i, layer) for i, layer in placed if layer.bound == bound]
        if not chosen:
            continue
        figure.add_trace(
            go.Scatter(
                x=[layer.flops / layer.bytes for _, layer in chosen],
                y=[layer.flops / (layer.end_s - layer.start_s) for _, layer in chosen],
                mode="markers",
                name=bound,
                marker={"color": BOUND_COLOURS.get(bound), "size": 7},
                text=[layer_label(i, layer) for i, layer in chosen],
                hovertemplate="%{text}<br>%{x:.3g} FLOP/B<br>%{y:.3g} FLOP/s",
            )
        )
    if not placed:
        computing = [layer for layer in result.layers if layer.flops > 0]
        note_empty(
            figure,
            "no op to place: no op moves main-memory bytes (all data stays on chip)"
            if computing and not any(layer.bytes for layer in computing)
            else "no op to place: no op has both FLOPs and main-memory bytes",
        )
    intensities = [layer.flops / layer.bytes for _, layer in placed] or [1.0]
    ridge = peak_flops / bandwidth_bytes_per_s
    low, high = min(min(intensities), ridge) / 4, max(max(intensities), ridge) * 4
    roof_x = [low, ridge, high]
    figure.add_trace(
        go.Scatter(
            x=roof_x,
            y=[min(peak_flops, bandwidth_bytes_per_s * x) for x in roof_x],
            mode="lines",
            name="roof",
            line={"color": "black", "width": 2},
        )
    )
    figure.update_layout(
        title=f"{result.target} {result.workload}: roofline ({peak_flops / 1e12:.3g} TFLOP/s, "
        f"{bandwidth_bytes_per_s / 1e9:.3g} GB/s)",
        xaxis={"type": "log", "title": "arithmetic intensity (FLOP per main-memory byte)"},
        yaxis={"type": "log", "title": "achieved FLOP/s"},
        template="plotly_white",
    )
    return figure


LINKS_TRACE = "links"
"""Name of the timeline's trace of recorded link activity (one lane per simulated link)."""


def timeline(result: RunResult, links: Sequence[tuple[str, Sequence[TimelineSpan]]] = ()) -> go.Figure:
    """A Gantt chart of the run: one horizontal bar per op on its unit's row (and pipeline stage).

    Bars start at ``base`` (the op's start, seconds) and are ``x`` long (its duration); one trace per
    bound, each op's label in ``text``. Below the units, the communication lanes: every collective and
    pipeline transfer of the run (``result.collectives``) on its row (:func:`transfer_row`), in the trace
    :data:`COMMUNICATION_TRACE`; then, when given, the link lanes a recorded run has (``links``: the
    ``Timeline.links`` a :class:`~archsim.run.observers.TimelineRecorder` recorded, as the Perfetto
    export writes them), one row per simulated link, in the trace :data:`LINKS_TRACE`.
    """
    figure = go.Figure()
    staged = any(layer.stage for layer in result.layers)
    rows = sorted({(layer.stage, layer.unit) for layer in result.layers})
    names = {row: (f"stage {row[0]} {row[1]}" if staged else row[1]) for row in rows}
    transfer_rows = list(dict.fromkeys(f"comm {transfer_row(c.name)}" for c in result.collectives))
    for bound in _bounds():
        chosen = [(i, layer) for i, layer in enumerate(result.layers) if layer.bound == bound]
        if not chosen:
            continue
        figure.add_trace(
            go.Bar(
                base=[layer.start_s for _, layer in chosen],
                x=[layer.end_s - layer.start_s for _, layer in chosen],
                y=[names[(layer.stage, layer.unit)] for _, layer in chosen],
                orientation="h",
                name=bound,
                marker={"color": BOUND_COLOURS.get(bound)},
                text=[layer_label(i, layer) for i, layer in chosen],
                textposition="none",
                hovertemplate="%{text}<br>start %{base:.4g} s, %{x:.3g} s",
            )
        )
    if result.collectives:
        figure.add_trace(
            go.Bar(
                base=[c.start_s for c in result.collectives],
                x=[c.end_s - c.start_s for c in result.collectives],
                y=[f"comm {transfer_row(c.name)}" for c in result.collectives],
                orientation="h",
                name=COMMUNICATION_TRACE,
                marker={"color": BOUND_COLOURS["communication"]},
                text=[f"{c.name}: {c.bytes / 1e6:.3g} MB" for c in result.collectives],
                textposition="none",
                hovertemplate="%{text}<br>start %{base:.4g} s, %{x:.3g} s",
            )
        )
    busy = [(f"link {name}", span) for name, spans in links for span in spans]
    if busy:
        figure.add_trace(
            go.Bar(
                base=[span.start_s for _, span in busy],
                x=[span.end_s - span.start_s for _, span in busy],
                y=[row for row, _ in busy],
                orientation="h",
                name=LINKS_TRACE,
                marker={"color": "#17becf"},
                text=[span.name for _, span in busy],
                textposition="none",
                hovertemplate="%{text}<br>start %{base:.4g} s, %{x:.3g} s",
            )
        )
    link_rows = [f"link {name}" for name, spans in links if spans]
    if not result.layers:
        note_empty(figure, "no ops: the workload's trace is empty")
    figure.update_layout(
        title=f"{result.target} {result.workload}: timeline of one step",
        barmode="overlay",
        xaxis={"title": "time (s)"},
        yaxis={
            "title": "unit",
            "type": "category",
            "categoryorder": "array",
            "categoryarray": [names[r] for r in rows] + transfer_rows + link_rows,
        },
        template="plotly_white",
    )
    return figure
