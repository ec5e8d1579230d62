"""Plotly figures of a sweep's table: scatter, Pareto front, scaling curves.

Each function takes the DataFrame of :func:`archsim.sweep.run_sweep` (or any table with the named
columns), leaves out rows whose ``x`` or ``y`` is missing (runs archsim refused), and returns a
``plotly.graph_objects.Figure`` whose traces hold the plotted values in ``x`` and ``y``; with no row
left to draw, the figure says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from archsim.errors import UsageError
from archsim.results.run_figures import note_empty

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
MAX_GROUPS = 12
"""A colour column with more distinct values than this is drawn as a continuous scale."""


def _usable(table: pd.DataFrame, columns: Sequence[str | None]) -> pd.DataFrame:
    for column in columns:
        if column is not None and column not in table.columns:
            raise UsageError("", column, f"no such column; columns are {', '.join(map(str, table.columns))}")
    named = [c for c in columns if c is not None]
    return table.dropna(subset=named)


def _new_figure(data: pd.DataFrame, x: str, y: str) -> go.Figure:
    """An empty figure, saying why when no row has both ``x`` and ``y`` to draw."""
    figure = go.Figure()
    if data.empty:
        note_empty(figure, f"no row has both {x} and {y} (every run refused, or no rows)")
    return figure


def _hover(table: pd.DataFrame, columns: Sequence[str]) -> list[str]:
    shown = [c for c in columns if c in table.columns]
    return ["<br>".join(f"{c}={row[c]}" for c in shown) for _, row in table.iterrows()]


def _groups(table: pd.DataFrame, column: str | None) -> list[tuple[Any, pd.DataFrame]]:
    if column is None:
        return [(None, table)]
    return [(value, table[table[column] == value]) for value in pd.unique(table[column])]


def sweep_scatter(
    table: pd.DataFrame, x: str, y: str, color: str | None = None, hover: Sequence[str] = ("target", "workload")
) -> go.Figure:
    """``y`` against ``x``, one marker per row.

    One trace per value of ``color`` (or a single trace coloured on a continuous scale when ``color``
    has more than :data:`MAX_GROUPS` numeric values).
    """
    data = _usable(table, [x, y, color])
    figure = _new_figure(data, x, y)
    continuous = color is not None and pd.api.types.is_numeric_dtype(data[color]) and data[color].nunique() > MAX_GROUPS
    labels = [*hover, *([color] if color else [])]
    if continuous:
        assert color is not None
        figure.add_trace(
            go.Scatter(
                x=data[x].tolist(),
                y=data[y].tolist(),
                mode="markers",
                name=y,
                marker={
                    "color": data[color].tolist(),
                    "colorscale": "Viridis",
                    "showscale": True,
                    "colorbar": {"title": color},
                },
                text=_hover(data, labels),
            )
        )
    else:
        for i, (value, group) in enumerate(_groups(data, color)):
            figure.add_trace(
                go.Scatter(
                    x=group[x].tolist(),
                    y=group[y].tolist(),
                    mode="markers",
                    name=y if value is None else f"{color}={value}",
                    marker={"color": PALETTE[i % len(PALETTE)], "size": 8},
                    text=_hover(group, labels),
                )
            )
    figure.update_layout(xaxis={"title": x}, yaxis={"title": y}, title=f"{y} against {x}", template="plotly_white")
    return figure


def pareto_mask(table: pd.DataFrame, x: str, y: str, maximize_x: bool = False, maximize_y: bool = True) -> pd.Series:
    """Which rows of ``table`` no other row dominates in ``x`` and ``y`` (at least as good in both, better in one).

    The same calling convention as :func:`pareto_front`: a boolean Series on the table's index, False
    for a row without both values (a refused run). By default a smaller ``x`` (a cost: peak FLOP/s,
    SRAM, watts, chips) and a larger ``y`` (throughput) are better. Equal points are all kept.
    """
    data = _usable(table, [x, y])
    mask = pd.Series(False, index=table.index, dtype=bool)
    mask[data.index] = _undominated(data[x].tolist(), data[y].tolist(), maximize_x, maximize_y)
    return mask


def _undominated(xs: Sequence[float], ys: Sequence[float], maximize_x: bool, maximize_y: bool) -> list[bool]:
    """:func:`pareto_mask` over two lists of values: one sort, then one pass."""
    sx = [v if not maximize_x else -v for v in xs]
    sy = [v if maximize_y else -v for v in ys]
    order = sorted(range(len(sx)), key=lambda i: (sx[i], -sy[i]))
    mask = [False] * len(sx)
    best = float("-inf")
    kept: tuple[float, float] | None = None
    for i in order:  # x ascending, then y descending: a point is dominated by one before it, if any
        point = (sx[i], sy[i])
        if sy[i] > best or point == kept:
            mask[i] = True
            best, kept = max(best, sy[i]), point
    return mask


def pareto_front(
    table: pd.DataFrame,
    x: str,
    y: str,
    maximize_x: bool = False,
    maximize_y: bool = True,
    hover: Sequence[str] = ("target", "workload"),
) -> go.Figure:
    """Every row as a grey marker (trace ``all``) and the Pareto-optimal rows joined by a line.

    The front is the trace ``Pareto front``, sorted by ``x`` (see :func:`pareto_mask` for "better").
    """
    data = _usable(table, [x, y])
    mask = _undominated(data[x].tolist(), data[y].tolist(), maximize_x, maximize_y)
    front = data[pd.Series(mask, index=data.index, dtype=bool)].sort_values(x, kind="stable")  # [] would pick columns
    figure = _new_figure(data, x, y)
    figure.add_trace(
        go.Scatter(
            x=data[x].tolist(),
            y=data[y].tolist(),
            mode="markers",
            name="all",
            marker={"color": "#bbbbbb", "size": 6},
            text=_hover(data, hover),
        )
    )
    figure.add_trace(
        go.Scatter(
            x=front[x].tolist(),
            y=front[y].tolist(),
            mode="lines+markers",
            name="Pareto front",
            line={"color": "#d62728", "shape": "hv" if not maximize_x else "vh"},
            marker={"size": 9},
            text=_hover(front, [*hover, *(c for c in table.columns if c.split(".")[0] in ("chip", "system", "run"))]),
        )
    )
    figure.update_layout(
        title=f"Pareto front: {y} ({'max' if maximize_y else 'min'}) against {x} ({'max' if maximize_x else 'min'})",
        xaxis={"title": x},
        yaxis={"title": y},
        template="plotly_white",
    )
    return figure


def scaling_curves(
    table: pd.DataFrame, x: str = "num_chips", y: str = "throughput", group: str | None = "target", ideal: bool = True
) -> go.Figure:
    """``y`` against ``x`` (log-log), one line per ``group`` sorted by ``x``.

    With ``ideal``, a dashed line per group (trace ``GROUP ideal``) scales its smallest point linearly:
    ``y0 * x / x0``.
    """
    data = _usable(table, [x, y, group])
    figure = _new_figure(data, x, y)
    for i, (value, rows) in enumerate(_groups(data, group)):
        rows = rows.sort_values(x, kind="stable")
        name = str(value) if value is not None else y
        colour = PALETTE[i % len(PALETTE)]
        xs, ys = rows[x].tolist(), rows[y].tolist()
        figure.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=name, line={"color": colour}))
        if ideal and xs:
            figure.add_trace(
                go.Scatter(
                    x=xs,
                    y=[ys[0] * v / xs[0] for v in xs],
                    mode="lines",
                    name=f"{name} ideal",
                    line={"color": colour, "dash": "dash", "width": 1},
                )
            )
    figure.update_layout(
        title=f"scaling: {y} against {x}",
        xaxis={"title": x, "type": "log"},
        yaxis={"title": y, "type": "log"},
        template="plotly_white",
    )
    return figure
