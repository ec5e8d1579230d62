"""The HTML report of a sweep's table: what was swept, the best row per workload, and its figures.

The table is the DataFrame of :func:`archsim.sweep.run_sweep` (or its ``results.parquet``): one row
per configuration and workload, axes as dotted columns (``chip.systolic.array_rows``, ``run.nodes``),
``error`` set on the rows archsim refused. The report shows

* a summary: rows, distinct configurations, workloads, targets, the axis columns, refused rows;
* the best row of each workload by ``y`` (largest, or smallest with ``maximize_y=False``);
* the refused runs' messages, counted, when there are any;
* figures: ``y`` against ``x`` (``plot-scatter``), the Pareto front of each workload
  (``plot-pareto-I``) and, when ``num_chips`` varies, scaling curves per workload (``plot-scaling-I``),
  ``I`` counting workloads in the table's order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from archsim.errors import UsageError
from archsim.results.report import Cell, figure_section, grid_table, number, page, section, summary_table, word
from archsim.results.sweep_figures import pareto_front, scaling_curves, sweep_scatter

AXIS_PREFIXES = ("chip", "system", "link", "memory", "run")
"""First parts of the dotted paths that name a sweep's axes (see the README, Design-space sweeps)."""
MAX_ERRORS = 20
"""Distinct refusal messages listed; a sweep that fails everywhere would otherwise list every row."""


def axis_columns(table: pd.DataFrame) -> list[str]:
    """The columns that are axes of the sweep: dotted paths under :data:`AXIS_PREFIXES`, in order."""
    return [str(c) for c in table.columns if "." in str(c) and str(c).split(".")[0] in AXIS_PREFIXES]


def check_column(table: pd.DataFrame, column: str, field: str, source: str = "") -> None:
    """Refuse a ``column`` the table lacks or that is not numeric; the error names ``source`` and ``field``."""
    if column not in table.columns:
        raise UsageError(source, field, f"no such column {column!r}; columns are {', '.join(map(str, table.columns))}")
    if not pd.api.types.is_numeric_dtype(table[column]):
        raise UsageError(source, field, f"column {column!r} is not numeric")


def plotted_rows(
    table: pd.DataFrame, x: str, y: str, fields: tuple[str, str] = ("x", "y"), source: str = ""
) -> pd.DataFrame:
    """The rows that have both ``x`` and ``y``, after checking both are numeric columns.

    Errors name ``source`` and the field (of ``fields``) of the column at fault; no plotted row is an
    error too, as every figure would be empty.
    """
    check_column(table, x, fields[0], source)
    check_column(table, y, fields[1], source)
    usable = table.dropna(subset=[x, y])
    if usable.empty:
        refused = "were all runs refused? see the error column"
        raise UsageError(source, fields[1], f"no row has both {x} and {y} ({refused})")
    return usable


def _plain(value: Any) -> Any:
    """A table value as a plain Python value (numpy scalars unwrapped, missing values None)."""
    if hasattr(value, "item") and not isinstance(value, list | dict | str):
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def _cell(value: Any) -> Cell:
    """A cell of any table value: numbers to four digits, other values as text."""
    value = _plain(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return word(None if value is None else str(value))
    return number(value, str(value) if isinstance(value, int) else None)


def _distinct(table: pd.DataFrame, column: str) -> list[Any]:
    """The distinct values of a column in order of appearance (missing values left out)."""
    return [_plain(v) for v in pd.unique(table[column].dropna())] if column in table.columns else []


def sweep_summary(table: pd.DataFrame, x: str, y: str, plotted: int) -> list[tuple[str, str, Cell]]:
    """The summary rows of a sweep (``plotted``: rows with both ``x`` and ``y``)."""
    axes = axis_columns(table)
    identity = [c for c in ("target", *axes) if c in table.columns]
    # axis values may be lists (a system's link list): compare them as text
    configurations = len(table[identity].astype(str).drop_duplicates()) if identity else len(table)
    workloads, targets = _distinct(table, "workload"), _distinct(table, "target")
    refused = int(table["error"].notna().sum()) if "error" in table.columns else 0
    described = ", ".join(f"{a} ({table[a].astype(str).nunique()} values)" for a in axes)
    return [
        ("rows", "rows", number(len(table), str(len(table)))),
        ("configurations", "distinct configurations", number(configurations, str(configurations))),
        ("workloads", "workloads", Cell(", ".join(map(str, workloads)), workloads)),
        ("targets", "targets", Cell(", ".join(map(str, targets)), targets)),
        ("axes", "axis columns", Cell(described or "none", axes)),
        ("errors", "rows with an error", number(refused, str(refused))),
        ("x", "x column", word(x)),
        ("y", "y column", word(y)),
        ("plotted", "rows with x and y", number(plotted, str(plotted))),
    ]


def best_rows(table: pd.DataFrame, y: str, maximize_y: bool = True) -> pd.DataFrame:
    """The best row of each workload by ``y`` (first of equals), workloads in order of appearance."""
    usable = table.dropna(subset=[y])
    groups = [usable[usable["workload"] == w] for w in _distinct(usable, "workload")] or [usable]
    chosen = [g[y].idxmax() if maximize_y else g[y].idxmin() for g in groups if not g.empty]
    return usable.loc[chosen]


def _best_table(table: pd.DataFrame, x: str, y: str, maximize_y: bool) -> str:
    """The best row per workload as an HTML table: workload, target, the axes, ``x`` and ``y``."""
    columns = list(dict.fromkeys(c for c in ("workload", "target", *axis_columns(table), x, y) if c in table.columns))
    rows = [[_cell(row[c]) for c in columns] for _, row in best_rows(table, y, maximize_y).iterrows()]
    return grid_table("best", columns, rows)


def _errors_table(table: pd.DataFrame) -> str:
    """The distinct refusal messages with how many rows each refused."""
    counts = table["error"].dropna().value_counts(sort=False)
    rows = [[word(str(message)), number(int(n), str(int(n)))] for message, n in counts.items()][:MAX_ERRORS]
    return grid_table("errors", ["error", "rows"], rows)


def _scatter_colour(table: pd.DataFrame) -> str | None:
    """Colour the scatter by workload when there are several, else by target, else not at all."""
    for column in ("workload", "target"):
        if column in table.columns and table[column].nunique() > 1:
            return column
    return None


def sweep_report(
    table: pd.DataFrame,
    x: str = "peak_flops",
    y: str = "throughput",
    *,
    title: str = "archsim sweep",
    maximize_x: bool = False,
    maximize_y: bool = True,
) -> str:
    """The HTML report of a sweep's table, ``y`` plotted against ``x`` (both numeric columns).

    By default a smaller ``x`` (a cost, such as ``peak_flops``) and a larger ``y`` are better, for the
    Pareto fronts and the best rows. A table without a row that has both ``x`` and ``y`` is refused.
    """
    usable = plotted_rows(table, x, y)
    hover = ("target", "workload", *axis_columns(table))
    sections = [
        section("summary", "Summary", summary_table(sweep_summary(table, x, y, len(usable)))),
        section(
            "best",
            f"Best row per workload by {y} ({'largest' if maximize_y else 'smallest'})",
            _best_table(table, x, y, maximize_y),
        ),
    ]
    if "error" in table.columns and table["error"].notna().any():
        sections.append(section("errors", "Refused runs", _errors_table(table)))
    colour = _scatter_colour(usable)
    # sweep_scatter adds the colour column to the hover text itself
    scatter = sweep_scatter(usable, x, y, color=colour, hover=[c for c in hover if c != colour])
    sections.append(figure_section("plot-scatter", f"{y} against {x}", scatter))
    sections += _per_workload_figures(usable, x, y, maximize_x, maximize_y, hover)
    return page(title, sections)


def _per_workload_figures(
    usable: pd.DataFrame, x: str, y: str, maximize_x: bool, maximize_y: bool, hover: Sequence[str]
) -> list[str]:
    """A Pareto front per workload, and scaling curves per workload when ``num_chips`` varies."""
    workloads = _distinct(usable, "workload")
    groups = [(str(w), usable[usable["workload"] == w]) for w in workloads] or [("all rows", usable)]
    sections = []
    for i, (name, rows) in enumerate(groups):
        front = pareto_front(rows, x, y, maximize_x=maximize_x, maximize_y=maximize_y, hover=hover)
        sections.append(figure_section(f"plot-pareto-{i}", f"Pareto front: {name}", front))
    if "num_chips" in usable.columns and usable["num_chips"].nunique() > 1:
        for i, (name, rows) in enumerate(groups):
            curves = scaling_curves(rows, "num_chips", y, group="target")
            sections.append(figure_section(f"plot-scaling-{i}", f"Scaling: {name}", curves))
    return sections
