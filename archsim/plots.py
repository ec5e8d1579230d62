"""Figures from Python: the plotly figures of runs and sweeps, for notebooks and scripts.

Importing this module imports plotly (``import archsim`` does not). Every function returns a
``plotly.graph_objects.Figure``: a notebook shows it inline; :func:`write_html` saves it as one
self-contained HTML file.

* one run (:func:`archsim.simulate`'s result): :func:`layer_breakdown`, :func:`roofline`, :func:`timeline`;
* a sweep's table (:func:`archsim.sweep.run_sweep`): :func:`sweep_scatter`, :func:`pareto_front`
  (and :func:`pareto_mask`), :func:`scaling_curves`.

In a notebook, :func:`init_notebook` makes figures survive export to HTML (``jupyter nbconvert``).

Reports put a run's or a sweep's summary and figures on one self-contained HTML page (plotly.js
embedded once, no network needed, the same inputs giving the same bytes): :func:`run_report` and
:func:`sweep_report` return the page's text, :func:`write_report` saves it.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
import plotly.io as pio

from archsim.results import report, run_figures
from archsim.results.figures import write_html
from archsim.results.records import RunResult
from archsim.results.report import write_report
from archsim.results.run_figures import layer_breakdown, timeline
from archsim.results.sweep_figures import pareto_front, pareto_mask, scaling_curves, sweep_scatter
from archsim.results.sweep_report import sweep_report
from archsim.results.timeline import TimelineSpan
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Precision
from archsim.spec.library import Library

__all__ = [
    "init_notebook",
    "layer_breakdown",
    "pareto_front",
    "pareto_mask",
    "roofline",
    "run_chip",
    "run_report",
    "scaling_curves",
    "sweep_report",
    "sweep_scatter",
    "timeline",
    "write_html",
    "write_report",
]


NOTEBOOK_RENDERER = "plotly_mimetype+notebook"
"""Each figure as plotly's JSON (JupyterLab, VS Code draw it) and as HTML drawn by plotly.js, which the
``notebook`` renderer embeds once in the notebook, so an exported page draws it offline."""


def init_notebook() -> None:
    """Show figures in a notebook so that they also appear in its HTML export, offline.

    Plotly's default renderer in a kernel emits only its JSON mimetype, which an HTML export
    (``jupyter nbconvert --to html``) cannot draw: the figures come out blank. This sets
    :data:`NOTEBOOK_RENDERER` as the default, which embeds plotly.js in the notebook once (an output of
    the cell that calls this) and gives every figure an HTML form that draws with it.
    """
    pio.renderers.default = NOTEBOOK_RENDERER


def run_chip(result: RunResult, library: Library | None = None) -> ChipSpec:
    """The chip a result ran on: its system's chip, or its target (looked up by name in ``library``)."""
    library = library or Library()
    return library.chip(library.system(result.system).chip if result.system else result.target)


def roofline(
    result: RunResult,
    library: Library | None = None,
    *,
    peak_flops: float | None = None,
    bandwidth_bytes_per_s: float | None = None,
) -> go.Figure:
    """The roofline of a run's chip with every op placed (see :func:`archsim.results.run_figures.roofline`).

    The roof is the chip's published peak at the run's precision and its main-memory bandwidth, unless
    given (give both for a sweep's variant, whose chip is not in the library).
    """
    return run_figures.roofline(result, *_roof(result, library, peak_flops, bandwidth_bytes_per_s))


def run_report(
    result: RunResult,
    library: Library | None = None,
    *,
    peak_flops: float | None = None,
    bandwidth_bytes_per_s: float | None = None,
    links: Sequence[tuple[str, Sequence[TimelineSpan]]] = (),
) -> str:
    """The HTML report of one run: a summary table, then :func:`layer_breakdown`, :func:`roofline`, :func:`timeline`.

    The summary holds the run's numbers (step time, throughput, utilization, time by bound, memory;
    scaling efficiency, communication and bubble when it ran on several chips), each cell's exact
    value in its ``data-value`` attribute (see :mod:`archsim.results.report`). The roofline's roof is
    found as :func:`roofline` finds it; ``links`` (a recorded run's ``Timeline.links``, see
    :func:`timeline`) add the links' lanes to the timeline. Save the text with :func:`write_report`.
    """
    return report.run_report(result, *_roof(result, library, peak_flops, bandwidth_bytes_per_s), links)


def _roof(
    result: RunResult, library: Library | None, peak_flops: float | None, bandwidth_bytes_per_s: float | None
) -> tuple[float, float]:
    """The roof of a run's chip at its precision: the given figures, else the library's chip's."""
    if peak_flops is None or bandwidth_bytes_per_s is None:
        chip = run_chip(result, library)
        peak_flops = peak_flops or chip.peak_flops(Precision(result.precision))
        bandwidth_bytes_per_s = bandwidth_bytes_per_s or chip.memory.main.bandwidth
    return peak_flops, bandwidth_bytes_per_s
