"""Self-contained HTML reports: one page with a title, summary tables and plotly figures.

A report needs no network: plotly.js is embedded once, in the page's head, and every figure is a
``<div class="plotly-graph-div">`` drawn by it. The same inputs give the same bytes: each figure's
div gets a fixed id (plotly would draw a random one) and nothing else varies (no dates, no temporary
paths). Every piece of text taken from the inputs is escaped.

Tables carry each value twice: as text for people and, in the cell's ``data-value`` attribute, as
JSON (a float's shortest exact form, ``null`` for a missing value), so that programs and tests read
back exactly the number the run produced.

A table wider or taller than the window scrolls inside its own box; figures follow the window's width.

This module builds the page and the run report (:func:`run_report`); the sweep report is in
:mod:`archsim.results.sweep_report`. :func:`write_report` saves either, atomically.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from archsim.outfile import write_file
from archsim.results import run_figures
from archsim.results.records import RunResult
from archsim.results.table import error_bar
from archsim.results.timeline import TimelineSpan
from archsim.units import format_bytes, format_time

FIGURE_HEIGHT = "480px"
"""Height of every figure's div (its width follows the page)."""

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.5em 0; display: block; max-width: 100%; max-height: 70vh; overflow: auto; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; font-weight: 600; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
section.figure { margin: 1.5em 0; }
"""


@dataclass(frozen=True)
class Cell:
    """One value of a table: ``text`` for people, ``value`` (any JSON-able value) for programs."""

    text: str
    value: object = None

    def html(self) -> str:
        """The ``<td>`` of this cell, text and value escaped."""
        exact = json.dumps(self.value, allow_nan=False) if _finite(self.value) else "null"
        number = isinstance(self.value, int | float) and not isinstance(self.value, bool)
        css = ' class="number"' if number else ""
        return f'<td{css} data-value="{html.escape(exact)}">{html.escape(self.text)}</td>'


def _finite(value: object) -> bool:
    """Whether ``value`` can be written as JSON without NaN or infinity (a missing value is written null)."""
    return not (isinstance(value, float) and not math.isfinite(value))


def number(value: float | int | None, text: str | None = None, missing: str = "n/a") -> Cell:
    """A numeric cell, ``missing`` when there is no value; ``text`` defaults to :func:`format_number`."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return Cell(missing, None)
    return Cell(text if text is not None else format_number(value), value)


def format_number(value: float) -> str:
    """From 1,000 to ten million a whole number, grouped (``24,773``); else four digits (``0.9697``, ``1.28e+17``)."""
    if 1e3 <= abs(value) < 1e7:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def word(value: str | None) -> Cell:
    """A cell of text (``n/a`` when missing)."""
    return Cell("n/a" if value is None else value, value)


def summary_table(rows: Sequence[tuple[str, str, Cell]]) -> str:
    """A two-column table, one ``<tr data-field="FIELD">`` per ``(field, label, cell)``."""
    lines = [
        f'<tr data-field="{html.escape(field)}"><th>{html.escape(label)}</th>{cell.html()}</tr>'
        for field, label, cell in rows
    ]
    return '<table class="summary">\n' + "\n".join(lines) + "\n</table>"


def grid_table(css_class: str, header: Sequence[str], rows: Sequence[Sequence[Cell]]) -> str:
    """A table with a header row (each ``<th data-column="NAME">``) and one ``<tr>`` per row of cells."""
    head = "".join(f'<th data-column="{html.escape(name)}">{html.escape(name)}</th>' for name in header)
    body = ["<tr>" + "".join(cell.html() for cell in row) + "</tr>" for row in rows]
    return f'<table class="{html.escape(css_class)}">\n<tr>{head}</tr>\n' + "\n".join(body) + "\n</table>"


def section(section_id: str, heading: str, content: str) -> str:
    """A ``<section>`` with an ``<h2>`` heading; ``content`` is HTML already escaped."""
    return f'<section id="{html.escape(section_id)}">\n<h2>{html.escape(heading)}</h2>\n{content}\n</section>'


def figure_section(div_id: str, heading: str, figure: go.Figure) -> str:
    """A figure under its heading, drawn into ``<div id="DIV_ID">`` by the page's one plotly.js."""
    div = pio.to_html(
        figure,
        include_plotlyjs=False,
        full_html=False,
        div_id=div_id,
        default_height=FIGURE_HEIGHT,
        config={"responsive": True},  # redrawn to the window's width when it changes
    )
    opening = f'<section class="figure" data-figure="{html.escape(div_id)}">'
    return f"{opening}\n<h2>{html.escape(heading)}</h2>\n{div}\n</section>"


def page(title: str, sections: Sequence[str]) -> str:
    """The whole HTML document: ``title`` as its title and heading, then ``sections`` in order."""
    heading = html.escape(title)
    # plotly's own pages set PlotlyConfig before loading plotly.js: MathJax, if ever used, stays local
    return "\n".join(
        [
            "<!doctype html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            f"<title>{heading}</title>",
            f"<style>{STYLE}</style>",
            "<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>",
            f'<script charset="utf-8">{get_plotlyjs()}</script>',
            "</head>",
            "<body>",
            f"<h1>{heading}</h1>",
            *sections,
            "</body>",
            "</html>",
            "",
        ]
    )


def write_report(text: str, path: str | Path) -> None:
    """Write a report (UTF-8) atomically: a temporary file beside ``path``, then a rename.

    A write that fails leaves neither a partial report nor the temporary file behind.
    """
    write_file(path, text)


def run_summary(result: RunResult) -> list[tuple[str, str, Cell]]:
    """The summary rows of a run, each named by its field of ``archsim run --json`` (or sweep column).

    Multi-chip fields (system, parallelism, scaling efficiency, communication, bubble) are listed only
    when the run has more than one chip; for one chip they are trivial.
    """
    unit = result.throughput_unit
    n = result.normalized
    rows: list[tuple[str, str, Cell]] = [
        ("target", "target", word(result.target)),
        ("workload", "workload", word(result.workload)),
        ("mode", "mode", word(result.mode)),
        ("batch", "batch", number(result.batch, result.batch_scope())),
        ("precision", "precision", word(result.precision)),
        ("seq_len", "sequence length", number(result.seq_len, str(result.seq_len))),
        *_padding_rows(result),
        ("num_chips", "chips", number(result.num_chips, str(result.num_chips))),
        ("step_time_s", "step time", number(result.step_time_s, format_time(result.step_time_s))),
        ("ops_time_s", "op time", number(result.ops_time_s, format_time(result.ops_time_s))),
        ("step_overhead_s", "step overhead", number(result.step_overhead_s, format_time(result.step_overhead_s))),
        ("throughput", "throughput", number(result.throughput, f"{format_number(result.throughput)} {unit}")),
        ("throughput_per_chip", "throughput per chip", number(n.per_chip, f"{format_number(n.per_chip)} {unit}")),
        ("throughput_per_watt", "throughput per watt (modelled power)", number(n.per_watt)),
        (
            "throughput_per_watt_tdp",
            "throughput per watt of TDP",
            number(n.per_watt_tdp, missing=result.missing("tdp")),
        ),
        ("energy_j", "energy per step, all chips", number(result.energy_j, f"{result.energy_j:.4g} J")),
        ("power_w", "average power per chip", number(result.power_w, _power_text(result))),
        ("area_mm2", f"die area ({result.area_source})", number(result.area_mm2, f"{result.area_mm2:.4g} mm^2")),
        ("flops", "FLOPs per step", number(result.flops, f"{result.flops / 1e12:.4g} TFLOP")),
        ("utilization", "utilization of peak", number(result.utilization, f"{100 * result.utilization:.1f}%")),
        ("uncertainty", "uncertainty (cross-validated error)", number(result.uncertainty, error_bar(result))),
        ("extrapolation", "outside the calibration", word(", ".join(result.extrapolation) or "nothing")),
    ]
    for bound, seconds in result.time_by_bound.items():
        rows.append((f"{bound}_bound_s", f"time {bound}-bound", number(seconds, format_time(seconds))))
    rows += [
        ("memory_bytes", "memory used per chip", number(result.memory_bytes, format_bytes(result.memory_bytes))),
        (
            "memory_capacity_bytes",
            f"memory capacity per chip ({result.memory_technology})",
            number(result.memory_capacity_bytes, format_bytes(result.memory_capacity_bytes)),
        ),
    ]
    if result.num_chips > 1:
        rows += _multichip_summary(result)
    return rows + _training_summary(result)


def _training_summary(result: RunResult) -> list[tuple[str, str, Cell]]:
    """The summary rows of the input pipeline and the time to train, when the run models them."""
    rows: list[tuple[str, str, Cell]] = []
    pipe = result.input_pipeline
    if pipe is not None:
        rows += [
            ("input_pipeline.step_bound", "step bound", word(pipe.step_bound)),
            (
                "input_pipeline.samples_per_s",
                f"input pipeline ({pipe.decode} decoding, limit {pipe.limit})",
                number(pipe.samples_per_s, f"{format_number(pipe.samples_per_s)} samples/s"),
            ),
        ]
    ttt = result.time_to_train
    if ttt is not None:
        amount = f"{ttt.epochs:.1f} epochs" if ttt.epochs is not None else f"{format_number(ttt.samples)} samples"
        rows += [
            (
                "time_to_train.time_to_train_s",
                f"time to train ({ttt.quality_target})",
                number(ttt.time_to_train_s, f"{ttt.time_to_train_s / 60:.2f} min"),
            ),
            (
                "time_to_train.epochs",
                f"training ({ttt.optimizer}, {ttt.convergence_basis})",
                number(ttt.samples, amount),
            ),
            (
                "time_to_train.eval_s",
                f"evaluation ({ttt.evaluations} runs)",
                number(ttt.eval_s, format_time(ttt.eval_s)),
            ),
        ]
    return rows


def _padding_rows(result: RunResult) -> list[tuple[str, str, Cell]]:
    """How the sequences' padding was left out, where it was (:mod:`archsim.workloads.padding`)."""
    if result.padding is None or result.tokens_per_sequence is None:
        return []
    return [
        ("padding", "padding", word(result.padding)),
        (
            "tokens_per_sequence",
            "real tokens per sequence",
            number(result.tokens_per_sequence, str(result.tokens_per_sequence)),
        ),
    ]


def _power_text(result: RunResult) -> str:
    """Average power, with the clock's throttle when the chip's TDP held it back."""
    text = f"{result.power_w:.4g} W (peak {result.peak_power_w:.4g} W, static {result.static_power_w:.3g} W)"
    if result.clock_scale < 1.0:
        scales = f"{100 * result.clock_scale:.1f}% (voltage {100 * result.voltage_scale:.1f}%)"
        text += f", clock throttled to {scales} by the TDP"
    return text


def _multichip_summary(result: RunResult) -> list[tuple[str, str, Cell]]:
    """The summary rows that only a run on several chips has."""
    return [
        ("system", "system", word(result.system)),
        ("nodes", "nodes", number(result.nodes, str(result.nodes))),
        ("data_parallel", "data-parallel replicas", number(result.data_parallel, str(result.data_parallel))),
        ("tensor_parallel", "tensor-parallel chips", number(result.tensor_parallel, _tensor_parallel(result))),
        ("expert_parallel", "expert-parallel chips", number(result.expert_parallel, str(result.expert_parallel))),
        ("bn_group", "batch-norm group (chips)", number(result.bn_group, str(result.bn_group))),
        ("zero", "ZeRO stage", number(result.zero, str(result.zero))),
        ("pipeline_stages", "pipeline stages", number(result.pipeline_stages, str(result.pipeline_stages))),
        ("interleave", "model chunks per stage", number(result.interleave, str(result.interleave))),
        ("microbatches", "microbatches", number(result.microbatches, str(result.microbatches))),
        ("schedule", "pipeline schedule", word(result.schedule)),
        ("collective", "all-reduce", word(result.collective)),
        ("global_batch", "global batch", number(result.global_batch, str(result.global_batch))),
        ("single_chip_throughput", "one chip's throughput", number(result.single_chip_throughput)),
        (
            "scaling_efficiency",
            "scaling efficiency",
            number(result.scaling_efficiency, f"{100 * result.scaling_efficiency:.1f}%")
            if result.scaling_efficiency is not None
            else Cell(f"n/a: {result.scaling_note}", None),
        ),
        ("comm_s", "communication in flight", number(result.comm_s, format_time(result.comm_s))),
        ("exposed_comm_s", "exposed communication", number(result.exposed_comm_s, format_time(result.exposed_comm_s))),
        ("bubble_s", "pipeline bubble", number(result.bubble_s, format_time(result.bubble_s))),
        (
            "bubble_fraction",
            "bubble fraction",
            number(result.bubble_fraction, f"{100 * result.bubble_fraction:.1f}%"),
        ),
    ]


def _tensor_parallel(result: RunResult) -> str:
    """The tensor-parallel degree, and whether sequence parallelism splits the norms too."""
    return f"{result.tensor_parallel}" + (" (sequence parallel)" if result.sequence_parallel else "")


RUN_FIGURES = ("breakdown", "roofline", "timeline")
"""The figures of a run report, in order; each is drawn into ``<div id="plot-NAME">``."""


def run_report(
    result: RunResult,
    peak_flops: float,
    bandwidth_bytes_per_s: float,
    links: Sequence[tuple[str, Sequence[TimelineSpan]]] = (),
) -> str:
    """The HTML report of one run: its summary, then its per-layer breakdown, roofline and timeline.

    ``peak_flops`` and ``bandwidth_bytes_per_s`` are the roof of one chip (see
    :func:`archsim.results.run_figures.roofline`); ``links``, a recorded run's link lanes, go into the
    timeline (see :func:`archsim.results.run_figures.timeline`).
    """
    title = f"archsim run: {result.workload} ({result.mode}) on {result.target}"
    figures = {
        "breakdown": ("Time per layer by bound", run_figures.layer_breakdown(result)),
        "roofline": ("Roofline", run_figures.roofline(result, peak_flops, bandwidth_bytes_per_s)),
        "timeline": ("Timeline of one step", run_figures.timeline(result, links)),
    }
    sections = [section("summary", "Summary", summary_table(run_summary(result)))]
    sections += [figure_section(f"plot-{name}", *figures[name]) for name in RUN_FIGURES]
    return page(title, sections)
