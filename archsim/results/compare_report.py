"""The HTML page of a comparison (``archsim report compare``): its summary and a waterfall of its factors.

:func:`comparison_report` draws the factors of :class:`~archsim.results.comparison.Comparison` as a
waterfall on a log scale, where multiplying factors add: each bar rises or falls by ``log10`` of its
ratio and the last bar, the speedup, stands at the sum.
"""

from __future__ import annotations

import html
import math

import plotly.graph_objects as go

from archsim.results.comparison import Comparison
from archsim.results.report import figure_section, number, page, section, summary_table, word


def waterfall(comparison: Comparison) -> go.Figure:
    """The factors as a waterfall of ``log10`` ratios, ending in the speedup; labels give each ratio."""
    names = [*comparison.factors, "speedup"]
    ratios = [*comparison.factors.values(), comparison.speedup]
    figure = go.Figure(
        go.Waterfall(
            x=names,
            y=[math.log10(r) for r in ratios],
            measure=["relative"] * len(comparison.factors) + ["total"],
            text=[f"{r:.3g}x" for r in ratios],
            textposition="outside",
            hovertext=[f"{n}: {r:.4g}x" for n, r in zip(names, ratios, strict=True)],
            hoverinfo="text",
        )
    )
    figure.update_layout(
        title=f"{comparison.b} over {comparison.a}: {comparison.speedup:.3g}x",
        yaxis_title="log10 of the ratio (factors add)",
        template="plotly_white",
        showlegend=False,
    )
    return figure


def comparison_report(comparison: Comparison) -> str:
    """The HTML page of a comparison: a summary with every factor, then the waterfall."""
    c = comparison
    rows = [
        ("a", "A", word(c.a)),
        ("b", "B", word(c.b)),
        ("workload", "workload", word(c.workload)),
        ("mode", "mode", word(c.mode)),
        ("chips_a", "chips of A", number(c.chips_a, str(c.chips_a))),
        ("chips_b", "chips of B", number(c.chips_b, str(c.chips_b))),
        ("throughput_a", "throughput of A", number(c.throughput_a)),
        ("throughput_b", "throughput of B", number(c.throughput_b)),
        ("speedup", "speedup of B over A", number(c.speedup, f"{c.speedup:.4g}x")),
    ]
    rows += [(f"factors.{name}", name, number(ratio, f"{ratio:.4g}x")) for name, ratio in c.factors.items()]
    sections = [section("summary", "Summary", summary_table(rows))]
    if c.notes:
        sections.append(section("notes", "Notes", "\n".join(f"<p>{html.escape(n)}</p>" for n in c.notes)))
    sections.append(figure_section("waterfall", "Factors of the speedup", waterfall(c)))
    return page(f"archsim compare: {c.b} over {c.a} on {c.workload} ({c.mode})", sections)
