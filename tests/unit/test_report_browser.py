"""Reports and exported notebooks in a real headless Chromium: no script errors, every figure drawn,
screenshots that show plots.

The page is opened from ``file://`` with every other request refused (a report must need no network),
through Playwright driving the system's Chromium (``/usr/bin/chromium``, Debian's package; Playwright's
own browser download is never used). Each plot's SVG is counted (traces, markers, bars) against the
run or table it was drawn from, and each plot is photographed: the PNG is decoded and its plot area
must hold the traces' colours.

Without Chromium (or Playwright) the tests skip, saying why -- unless ``ARCHSIM_REQUIRE_BROWSER=1``
(set by CI), where they fail instead, so that CI can never silently not run them.
"""

from __future__ import annotations

import importlib.util
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from archsim import plots
from archsim.results.records import RunResult
from archsim.results.run_figures import BOUND_COLOURS
from archsim.results.sweep_figures import PALETTE
from archsim.spec.library import Library
from tests.notebooks import NOTEBOOKS, execute, export_html, outputs

CHROMIUM = Path(os.environ.get("ARCHSIM_CHROMIUM", "/usr/bin/chromium"))
FLAGS = [
    "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
    "--disable-gpu",
    # without these Chromium keeps retrying its services' hosts, and hangs where there is no network
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
RENDERED = """() => [...document.querySelectorAll('.plotly-graph-div')]
    .every(div => div._fullLayout !== undefined && div.querySelector('svg.main-svg .cartesianlayer') !== null)"""
COUNTS = """div => ({
    bar_traces: div.querySelectorAll('.barlayer g.trace').length,
    bars: div.querySelectorAll('.barlayer g.trace g.point').length,
    scatter_traces: div.querySelectorAll('.scatterlayer g.trace').length,
    markers: div.querySelectorAll('.scatterlayer g.trace path.point').length,
    area: div._fullLayout._size,
})"""
MIN_COLOUR_PIXELS = 40
"""Pixels of each trace's colour a plot must show: about one marker's worth (size 7 covers about 40)."""
MIN_INK = {"bars": 0.02, "markers": 0.0005}
"""Share of a plot area that must be ink (darker than plotly_white's #EBF0F8 grid; a blank area has none):
bars fill a good share (a run's breakdown about 5%, its timeline 40%); a sweep's few markers little."""


def _unavailable() -> str | None:
    if not CHROMIUM.is_file():
        return f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)"
    if importlib.util.find_spec("playwright") is None:
        return "Playwright for Python is not installed (pip install -e '.[test]')"
    return None


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A headless Chromium with a fresh profile that may open ``file://`` pages only."""
    reason = _unavailable()
    if reason is not None:
        if os.environ.get("ARCHSIM_REQUIRE_BROWSER") == "1":
            pytest.fail(f"ARCHSIM_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=str(CHROMIUM),
            headless=True,
            args=FLAGS,
            viewport={"width": 1280, "height": 900},
        )
        yield context
        context.close()


def open_report(browser: Any, path: Path) -> tuple[Any, list[str]]:
    """The page of ``path`` once every plot is drawn, and the errors and outside requests it made."""
    problems: list[str] = []
    page = browser.new_page()
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))

    def console_errors(message: Any) -> None:
        if message.type == "error":
            problems.append(f"console: {message.text}")

    def only_files(route: Any) -> None:
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            problems.append(f"request: {route.request.url}")
            route.abort()

    page.on("console", console_errors)
    page.route("**/*", only_files)
    page.goto(path.as_uri(), wait_until="load")
    page.wait_for_function(RENDERED, timeout=30_000)
    return page, problems


def _rgb(colour: str) -> np.ndarray:
    return np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)])


def check_screenshot(page: Any, div_id: str, drawn: dict[str, Any], colours: list[str], out: Path) -> None:
    """Photograph the plot ``div_id`` (``drawn``: its counts); its plot area must show ink and ``colours``."""
    png = page.locator(f"#{div_id}").screenshot(path=str(out / f"{div_id}.png"))
    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    area = drawn["area"]
    left, top = round(area["l"]), round(area["t"])
    inside = pixels[top : top + round(area["h"]), left : left + round(area["w"])]
    assert inside.size > 0
    ink = (inside.min(axis=2) < 225).mean()  # plotly_white's grid lines are #EBF0F8
    assert ink >= MIN_INK["bars" if drawn["bars"] else "markers"], f"{div_id}: {ink:.2%} of the plot area is drawn"
    for colour in colours:
        matching = int((np.abs(inside - _rgb(colour)).max(axis=2) <= 24).sum())
        assert matching >= MIN_COLOUR_PIXELS, f"{div_id}: {matching} pixels of {colour}"


def test_run_report_renders_every_layer(
    browser: Any, tmp_path: Path, multichip_run: RunResult, library: Library
) -> None:
    report = tmp_path / "run.html"
    plots.write_report(plots.run_report(multichip_run, library), report)
    page, problems = open_report(browser, report)
    assert problems == []
    layers = multichip_run.layers
    bounds = sorted({layer.bound for layer in layers}, key=list(BOUND_COLOURS).index)
    placed = [u for u in layers if u.flops and u.bytes and u.end_s > u.start_s]
    expected = {
        "plot-breakdown": {"bar_traces": len(bounds), "bars": len(layers), "scatter_traces": 0, "markers": 0},
        "plot-roofline": {"bar_traces": 0, "bars": 0, "scatter_traces": len(bounds) + 1, "markers": len(placed)},
        # one bar per op, then one per collective in the communication lanes ("transfers")
        "plot-timeline": {
            "bar_traces": len(bounds) + 1,
            "bars": len(layers) + len(multichip_run.collectives),
            "scatter_traces": 0,
            "markers": 0,
        },
    }
    assert page.eval_on_selector_all(".plotly-graph-div", "divs => divs.map(d => d.id)") == list(expected)
    colours = [BOUND_COLOURS[b] for b in bounds]
    for div_id, counts in expected.items():
        drawn = page.eval_on_selector(f"#{div_id}", COUNTS)
        assert {k: drawn[k] for k in counts} == counts, div_id
        roof = ["#000000"] if div_id == "plot-roofline" else []
        check_screenshot(page, div_id, drawn, colours + roof, tmp_path)
    assert problems == []


def test_cli_run_report_draws_the_links_lanes(browser: Any, tmp_path: Path, library: Library) -> None:
    from archsim.cli import main
    from archsim.run.observers import TimelineRecorder
    from archsim.run.request import RunRequest
    from archsim.run.runner import run as record_run

    report = tmp_path / "links.html"
    args = ["ipu-m2000", "bert-base", "--mode", "train", "--batch", "8", "--pipeline-stages", "4"]
    assert main(["report", "run", *args, "--out", str(report)]) == 0
    request = RunRequest.of("ipu-m2000", "bert-base", "train", 8, pipeline_stages=4)
    recorder = TimelineRecorder()
    result = record_run(request, library, observers=[recorder])
    spans = sum(len(lane) for _, lane in recorder.timeline.links)
    assert spans > 0
    page, problems = open_report(browser, report)
    drawn = page.eval_on_selector("#plot-timeline", COUNTS)
    bounds = {layer.bound for layer in result.layers}
    # ops by bound, then the transfers, then the links: every span a bar
    assert drawn["bar_traces"] == len(bounds) + 2
    assert drawn["bars"] == len(result.layers) + len(result.collectives) + spans
    check_screenshot(page, "plot-timeline", drawn, ["#17becf", BOUND_COLOURS["communication"]], tmp_path)
    assert problems == []


def test_sweep_report_renders_every_row(browser: Any, tmp_path: Path, report_sweep_table: pd.DataFrame) -> None:
    report = tmp_path / "sweep.html"
    plots.write_report(plots.sweep_report(report_sweep_table, title="report-sweep"), report)
    page, problems = open_report(browser, report)
    assert problems == []
    done = report_sweep_table.dropna(subset=["peak_flops", "throughput"])
    workloads, targets = list(pd.unique(done["workload"])), list(pd.unique(done["target"]))
    expected: dict[str, tuple[dict[str, int], list[str]]] = {
        "plot-scatter": ({"scatter_traces": len(workloads), "markers": len(done)}, list(PALETTE[: len(workloads)]))
    }
    for i, workload in enumerate(workloads):
        rows = done[done["workload"] == workload]
        front = int(plots.pareto_mask(rows, "peak_flops", "throughput").sum())
        expected[f"plot-pareto-{i}"] = ({"scatter_traces": 2, "markers": len(rows) + front}, ["#d62728"])
    for i, workload in enumerate(workloads):
        rows = done[done["workload"] == workload]
        # a line with markers and a dashed ideal per target
        counts = {"scatter_traces": 2 * len(targets), "markers": len(rows)}
        expected[f"plot-scaling-{i}"] = (counts, list(PALETTE[: len(targets)]))
    assert page.eval_on_selector_all(".plotly-graph-div", "divs => divs.map(d => d.id)") == list(expected)
    check_tables_fit(page, 1280)
    for div_id, (counts, colours) in expected.items():
        drawn = page.eval_on_selector(f"#{div_id}", COUNTS)
        assert {k: drawn[k] for k in counts} == counts, div_id
        check_screenshot(page, div_id, drawn, colours, tmp_path)
    # on a narrow window the tables are wider than the page: each scrolls inside its own box
    page.set_viewport_size({"width": 480, "height": 900})
    check_tables_fit(page, 480, overflowing=True)
    assert problems == []


def check_tables_fit(page: Any, width: int, overflowing: bool = False) -> None:
    """The page never scrolls sideways at ``width`` px; with ``overflowing``, some table scrolls inside its box."""
    page.wait_for_function(f"document.documentElement.scrollWidth <= {width}", timeout=10_000)  # plots redrawn
    boxes = page.eval_on_selector_all("table", "ts => ts.map(t => [t.getBoundingClientRect().right, t.scrollWidth])")
    assert all(right <= width for right, _ in boxes)
    if overflowing:
        widths = page.eval_on_selector_all("table", "ts => ts.map(t => t.clientWidth)")
        assert any(scroll > box for (_, scroll), box in zip(boxes, widths, strict=True))


TEMPLATE_FETCHES = (
    "https://cdnjs.cloudflare.com/ajax/libs/require.js/",
    "https://cdnjs.cloudflare.com/ajax/libs/mathjax/",
    "https://unpkg.com/@jupyter-widgets/html-manager@",  # draws the sweep's progress widget when online
)
"""What nbconvert's own HTML template fetches: refused here, as offline; the figures must draw without them."""


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_exported_to_html_draws_its_figures(
    browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: Path
) -> None:
    book = execute(path, tmp_path, monkeypatch)
    plotly_json = "application/vnd.plotly.v1+json"
    figures = [o["data"][plotly_json] for o in outputs(book) if plotly_json in o.get("data", {})]
    assert figures
    page, problems = open_report(browser, export_html(book, tmp_path / f"{path.stem}.html"))
    refused = [p for p in problems if p.startswith("request: ") and p[9:].startswith(TEMPLATE_FETCHES)]
    # a refused fetch shows as a console error too; nothing else may go wrong
    assert [p for p in problems if p not in refused and "net::ERR_FAILED" not in p] == []
    # plotly names a notebook's divs by UUID, which may start with a digit (no CSS id selector): rename them
    divs = page.eval_on_selector_all(".plotly-graph-div", "divs => divs.map((d, i) => (d.id = `figure-${i}`))")
    assert len(divs) == len(figures)
    for div_id, figure in zip(divs, figures, strict=True):
        drawn = page.eval_on_selector(f"#{div_id}", COUNTS)
        kinds = [trace.get("type", "scatter") for trace in figure["data"]]
        assert drawn["bar_traces"] == kinds.count("bar"), div_id
        assert drawn["scatter_traces"] == kinds.count("scatter"), div_id
        assert drawn["bars"] + drawn["markers"] > 0, div_id
        check_screenshot(page, div_id, drawn, [], tmp_path)
