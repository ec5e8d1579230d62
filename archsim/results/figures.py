"""Plotly figures of archsim results (the only module of archsim that imports plotly).

Each function returns a ``plotly.graph_objects.Figure`` whose data can be inspected in tests and
shown inline in notebooks; :func:`write_html` saves one as a self-contained HTML file.
"""

from __future__ import annotations

import math
from pathlib import Path

import plotly.graph_objects as go

from archsim.outfile import write_file
from archsim.validation.run import ValidationReport

GROUP_COLOURS = {"operator": "#1f77b4", "single_chip": "#d62728", "multi_chip": "#2ca02c"}


def validation_scatter(report: ValidationReport, band: float = 0.10) -> go.Figure:
    """Predicted against published values on log axes, one marker per row, with the ±``band`` band.

    Values are normalized to each row's published value's unit (samples/s or ms); rows of different
    units share the axes because both axes use the same unit per row.
    """
    figure = go.Figure()
    for group, colour in GROUP_COLOURS.items():
        rows = [r for r in report.rows if r.row.group.value == group]
        if not rows:
            continue
        figure.add_trace(
            go.Scatter(
                x=[r.row.published for r in rows],
                y=[r.predicted for r in rows],
                mode="markers",
                name=group,
                marker={"color": colour, "size": 9},
                text=[f"{r.row.id}<br>{100 * r.error:+.1f}% ({r.row.unit})" for r in rows],
                hoverinfo="text",
            )
        )
    values = [v for r in report.rows for v in (r.row.published, r.predicted)]
    low, high = min(values) / 2, max(values) * 2
    line = [low, high]
    figure.add_trace(go.Scatter(x=line, y=line, mode="lines", name="exact", line={"color": "black", "width": 1}))
    for factor, label in ((1 + band, f"+{band:.0%}"), (1 - band, f"-{band:.0%}")):
        figure.add_trace(
            go.Scatter(
                x=line,
                y=[v * factor for v in line],
                mode="lines",
                name=label,
                line={"color": "grey", "width": 1, "dash": "dash"},
            )
        )
    figure.update_layout(
        title=f"archsim validation: predicted vs published ({report.name}), MAPE {100 * (report.mape() or 0):.1f}%",
        xaxis={"type": "log", "title": "published", "range": [math.log10(low), math.log10(high)]},
        yaxis={"type": "log", "title": "predicted", "range": [math.log10(low), math.log10(high)]},
        template="plotly_white",
    )
    return figure


_HTML_OPTIONS = {"include_plotlyjs": True, "full_html": True, "div_id": "archsim-figure"}
"""A fixed div id: plotly draws a random one, and the same figure must give the same file."""


def write_html(figure: go.Figure, path: str | Path, field: str = "--out") -> None:
    """Write a self-contained HTML file (plotly.js embedded), atomically: temp file, then rename.

    A failed write is a UsageError naming ``path`` and ``field`` (the option that gave the path).
    """
    write_file(path, lambda temporary: figure.write_html(str(temporary), **_HTML_OPTIONS), field)
