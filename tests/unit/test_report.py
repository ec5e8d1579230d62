"""Reports: each page parsed back and its tables and embedded figures checked against the run or sweep.

The page's tables hold exact values (``data-value``, JSON) and its figures their data (the JSON given
to ``Plotly.newPlot``); both are read here with the standard library, without a browser. The browser
test (test_report_browser.py) checks that the same pages render.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from plotly.offline import get_plotlyjs

from archsim import plots, simulate
from archsim.cli import build_parser, main
from archsim.results.records import RunResult
from archsim.run.observers import TimelineRecorder
from archsim.run.request import RunRequest
from archsim.run.runner import run as record_run
from archsim.spec.library import Library

RUN_FIELDS = ("target", "workload", "mode", "batch", "precision", "seq_len", "num_chips", "step_time_s")
RUN_FIELDS += ("ops_time_s", "step_overhead_s", "throughput", "flops", "utilization", "memory_bytes")
RUN_FIELDS += ("memory_capacity_bytes", "energy_j", "power_w", "area_mm2")
MULTICHIP_FIELDS = ("system", "nodes", "data_parallel", "pipeline_stages", "microbatches", "schedule", "collective")
MULTICHIP_FIELDS += ("global_batch", "single_chip_throughput", "scaling_efficiency", "comm_s", "exposed_comm_s")
MULTICHIP_FIELDS += (
    "bubble_s",
    "bubble_fraction",
    "tensor_parallel",
    "expert_parallel",
    "bn_group",
    "zero",
    "interleave",
)


class Report(HTMLParser):
    """What a report holds: title, summary (field -> exact value), tables by class, plot divs, scripts."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.title = ""
        self.summary: dict[str, Any] = {}
        self.headers: dict[str, list[str]] = {}
        self.tables: dict[str, list[list[Any]]] = {}
        self.plot_divs: list[str] = []
        self.script_sources: list[str] = []
        self._table = ""
        self._field: str | None = None
        self._row: list[Any] | None = None
        self._in_title = False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "title":
            self._in_title = True
        elif tag == "table":
            self._table = a["class"]
            self.headers[self._table], self.tables[self._table] = [], []
        elif tag == "tr":
            self._field, self._row = a.get("data-field"), []
        elif tag == "th" and "data-column" in a:
            self.headers[self._table].append(a["data-column"])
        elif tag == "td":
            value = json.loads(a["data-value"])
            if self._field is not None:
                self.summary[self._field] = value
            elif self._row is not None:
                self._row.append(value)
        elif tag == "div" and "plotly-graph-div" in a.get("class", "").split():
            self.plot_divs.append(a["id"])
        elif tag == "script" and "src" in a:
            self.script_sources.append(a["src"])

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag == "tr" and self._field is None and self._row:
            self.tables[self._table].append(self._row)

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data


def figures(text: str) -> dict[str, list[dict[str, Any]]]:
    """The traces given to ``Plotly.newPlot`` for each plot div, in page order."""
    body = text.split("</head>", 1)[1]  # plotly.js itself, in the head, mentions newPlot too
    decoder = json.JSONDecoder()
    found = {}
    for match in re.finditer(r'Plotly\.newPlot\(\s*"([^"]+)",\s*', body):
        found[match.group(1)], _ = decoder.raw_decode(body, match.end())
    return found


@pytest.fixture(scope="module")
def run_page(multichip_run: RunResult, library: Library) -> str:
    return plots.run_report(multichip_run, library)


@pytest.fixture(scope="module")
def sweep_page(report_sweep_table: pd.DataFrame) -> str:
    return plots.sweep_report(report_sweep_table, title="report-sweep")


def test_run_summary_holds_the_runs_numbers(run_page: str, multichip_run: RunResult) -> None:
    run = multichip_run
    expected = {field: getattr(run, field) for field in (*RUN_FIELDS, *MULTICHIP_FIELDS)}
    expected |= {f"{bound}_bound_s": seconds for bound, seconds in run.time_by_bound.items()}
    expected |= {"throughput_per_chip": run.normalized.per_chip, "throughput_per_watt": run.normalized.per_watt}
    expected |= {"throughput_per_watt_tdp": run.normalized.per_watt_tdp}
    expected |= {"uncertainty": run.uncertainty, "extrapolation": ", ".join(run.extrapolation) or "nothing"}
    assert run.uncertainty is not None and 0.0 < run.uncertainty < 1.0
    report = Report(run_page)
    assert report.summary == expected  # exact: each float written in its shortest exact form
    assert report.title == "archsim run: resnet50 (train) on dgx1"
    assert run.num_chips == 16 and run.comm_s > 0


def test_one_chip_summary_leaves_out_the_multichip_fields(library: Library) -> None:
    run = simulate("systolic-32x32", "gemm:64x64x64", library=library)
    summary = Report(plots.run_report(run, library)).summary
    assert summary["num_chips"] == 1 and summary["step_time_s"] == run.step_time_s
    assert not set(MULTICHIP_FIELDS) & set(summary)


def test_run_figures_hold_every_layer(run_page: str, multichip_run: RunResult) -> None:
    layers = multichip_run.layers
    data = figures(run_page)
    assert list(data) == ["plot-breakdown", "plot-roofline", "plot-timeline"] == Report(run_page).plot_divs
    bars = [(x, y) for trace in data["plot-breakdown"] for x, y in zip(trace["x"], trace["y"], strict=True)]
    assert sorted(label for label, _ in bars) == sorted(f"{i}:{layer.name}" for i, layer in enumerate(layers))
    for trace in data["plot-breakdown"]:
        chosen = [layer.end_s - layer.start_s for layer in layers if layer.bound == trace["name"]]
        assert trace["y"] == chosen
    placed = [layer for layer in layers if layer.flops and layer.bytes and layer.end_s > layer.start_s]
    markers = [trace for trace in data["plot-roofline"] if trace["name"] != "roof"]
    points = [(x, y) for trace in markers for x, y in zip(trace["x"], trace["y"], strict=True)]
    assert sorted(points) == sorted((u.flops / u.bytes, u.flops / (u.end_s - u.start_s)) for u in placed)
    ops = [trace for trace in data["plot-timeline"] if trace["name"] != "transfers"]
    starts = sorted(base for trace in ops for base in trace["base"])
    assert starts == sorted(layer.start_s for layer in layers)
    # the communication lanes: every all-reduce of the run, as it ran
    (transfers,) = [trace for trace in data["plot-timeline"] if trace["name"] == "transfers"]
    collectives = multichip_run.collectives
    assert collectives
    assert transfers["base"] == [c.start_s for c in collectives]
    assert transfers["x"] == [c.end_s - c.start_s for c in collectives]


def test_plotly_js_is_embedded_once_and_nothing_is_fetched(run_page: str, sweep_page: str) -> None:
    plotly_js = get_plotlyjs()
    for page in (run_page, sweep_page):
        assert page.count(plotly_js) == 1
        assert page.index(plotly_js) < page.index("</head>")
        rest = page.replace(plotly_js, "")
        assert "plotly.js v" not in rest
        assert Report(page).script_sources == []
        assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", rest)


def test_reports_are_byte_identical_across_writes_and_processes(
    tmp_path: Path, multichip_run: RunResult, library: Library, report_sweep_dir: Path
) -> None:
    for name in ("a.html", "b.html"):
        plots.write_report(plots.run_report(multichip_run, library), tmp_path / name)
    assert (tmp_path / "a.html").read_bytes() == (tmp_path / "b.html").read_bytes()
    # the CLI reads a folder and its results.parquet alike; a fresh process with another hash seed agrees
    command = ["report", "sweep", "--x", "num_chips"]
    assert main([*command, str(report_sweep_dir), "--out", str(tmp_path / "c.html")]) == 0
    assert main([*command, str(report_sweep_dir / "results.parquet"), "--out", str(tmp_path / "d.html")]) == 0
    env = {**os.environ, "PYTHONHASHSEED": "4242"}
    script = "import sys; from archsim.cli import main; sys.exit(main(sys.argv[1:]))"
    argv = [*command, str(report_sweep_dir), "--out", str(tmp_path / "e.html")]
    subprocess.run([sys.executable, "-c", script, *argv], env=env, check=True, capture_output=True, timeout=300)
    assert (tmp_path / "c.html").read_bytes() == (tmp_path / "d.html").read_bytes()
    assert (tmp_path / "c.html").read_bytes() == (tmp_path / "e.html").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.html", "b.html", "c.html", "d.html", "e.html"]


def test_text_from_the_inputs_is_escaped(multichip_run: RunResult, report_sweep_table: pd.DataFrame) -> None:
    hostile = '<img src=x onerror="alert(1)">&amp;'
    run = dataclasses.replace(multichip_run, target=hostile)
    page = plots.run_report(run, peak_flops=1e15, bandwidth_bytes_per_s=1e12)
    table = report_sweep_table.assign(workload=report_sweep_table["workload"].replace({"bert-base": hostile}))
    sweep = plots.sweep_report(table, title=hostile)
    for text in (page, sweep):
        assert "<img" not in text.replace(get_plotlyjs(), "")
    assert Report(page).summary["target"] == hostile
    assert Report(page).title == f"archsim run: resnet50 (train) on {hostile}"
    assert Report(sweep).title == hostile
    assert hostile in Report(sweep).summary["workloads"]


def test_sweep_summary_counts_the_table(sweep_page: str, report_sweep_table: pd.DataFrame) -> None:
    summary = Report(sweep_page).summary
    assert summary == {
        "rows": 16,
        "configurations": 8,  # 2 targets x 2 node counts x 2 batches
        "workloads": ["resnet50", "bert-base"],
        "targets": ["dgx1", "ipu-pod64"],
        "axes": ["run.nodes", "run.batch"],
        "errors": int(report_sweep_table["error"].notna().sum()),
        "x": "peak_flops",
        "y": "throughput",
        "plotted": 8,
    }
    assert summary["errors"] == 8


@pytest.mark.parametrize(("y", "maximize_y"), [("throughput", True), ("step_time_s", False)])
def test_best_rows_are_each_workloads_best(report_sweep_table: pd.DataFrame, y: str, maximize_y: bool) -> None:
    report = Report(plots.sweep_report(report_sweep_table, "num_chips", y, maximize_y=maximize_y))
    columns = ["workload", "target", "run.nodes", "run.batch", "num_chips", y]
    assert report.headers["best"] == columns
    done = report_sweep_table.dropna(subset=[y])
    expected = []
    for workload in ("resnet50", "bert-base"):
        best = done[done["workload"] == workload].sort_values(y, ascending=not maximize_y, kind="stable").iloc[0]
        expected.append([best[c] if c in ("workload", "target") else best[c].item() for c in columns])
    assert report.tables["best"] == expected
    assert sum(n for _, n in report.tables["errors"]) == 8


def test_sweep_figures_hold_the_rows(sweep_page: str, report_sweep_table: pd.DataFrame) -> None:
    data = figures(sweep_page)
    assert list(data) == Report(sweep_page).plot_divs
    assert list(data) == ["plot-scatter", "plot-pareto-0", "plot-pareto-1", "plot-scaling-0", "plot-scaling-1"]
    done = report_sweep_table.dropna(subset=["peak_flops", "throughput"])
    scatter = sorted((x, y) for trace in data["plot-scatter"] for x, y in zip(trace["x"], trace["y"], strict=True))
    assert scatter == sorted(zip(done["peak_flops"], done["throughput"], strict=True))
    for i, workload in enumerate(("resnet50", "bert-base")):
        rows = done[done["workload"] == workload]
        mask = plots.pareto_mask(rows, "peak_flops", "throughput")
        front = next(t for t in data[f"plot-pareto-{i}"] if t["name"] == "Pareto front")
        assert sorted(zip(front["x"], front["y"], strict=True)) == sorted(
            zip(rows["peak_flops"][mask], rows["throughput"][mask], strict=True)
        )
        curves = {t["name"]: t for t in data[f"plot-scaling-{i}"]}
        assert list(curves) == ["dgx1", "dgx1 ideal", "ipu-pod64", "ipu-pod64 ideal"]
        assert curves["dgx1"]["x"] == [8, 16] and curves["ipu-pod64"]["x"] == [64, 128]


def test_no_scaling_curves_when_the_chip_count_is_fixed(report_sweep_table: pd.DataFrame) -> None:
    one_size = report_sweep_table[report_sweep_table["run.nodes"] == 1]
    table = one_size[one_size["target"] == "dgx1"]
    assert list(figures(plots.sweep_report(table))) == ["plot-scatter", "plot-pareto-0", "plot-pareto-1"]


def test_cli_writes_a_run_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run.html"
    assert main(["report", "run", "tpu-v3", "resnet50", "--batch", "4", "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"{out}\n"
    report = Report(out.read_text(encoding="utf-8"))
    assert (report.summary["target"], report.summary["batch"], report.summary["num_chips"]) == ("tpu-v3", 4, 1)
    assert report.plot_divs == ["plot-breakdown", "plot-roofline", "plot-timeline"]


def test_cli_run_report_timeline_has_the_links_lanes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run.html"
    command = ["report", "run", "ipu-m2000", "bert-base", "--mode", "train", "--batch", "8", "--pipeline-stages", "4"]
    assert main([*command, "--out", str(out)]) == 0
    capsys.readouterr()
    request = RunRequest.of("ipu-m2000", "bert-base", "train", 8, pipeline_stages=4)
    recorder = TimelineRecorder()
    record_run(request, Library(), observers=[recorder])
    recorded = recorder.timeline
    spans = [(f"link {name}", span.start_s) for name, lane in recorded.links for span in lane]
    assert spans  # IPU-Links carry the pipeline's activations and gradients
    (links,) = [t for t in figures(out.read_text(encoding="utf-8"))["plot-timeline"] if t["name"] == "links"]
    assert sorted(zip(links["y"], links["base"], strict=True)) == sorted(spans)


def _options(argv: list[str]) -> set[str]:
    """The option strings of one subcommand's parser (``["report", "run"]``, ``["run"]``)."""
    parser = build_parser()
    for name in argv:
        (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = sub.choices[name]
    return {o for a in parser._actions for o in a.option_strings}


def test_report_and_plot_take_every_run_option() -> None:
    run_options = _options(["run"]) - {"--json"}  # a report is HTML; --json is the one thing it cannot be
    assert _options(["report", "run"]) == run_options | {"--out"}
    training = {"--time-to-train", "--optimizer", "--epochs", "--input-decode"}  # what is added to a step's result
    for kind in ("breakdown", "roofline", "timeline"):  # figures of the step's ops
        assert _options(["plot", kind]) == run_options - training | {"--out"}


def test_cli_run_report_of_a_run_with_multichip_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, timeline, alone = tmp_path / "run.html", tmp_path / "report.json", tmp_path / "run.json"
    options = ["dgx1", "resnet50", "--mode", "train", "--batch", "8", "--bn-group", "2", "--zero", "1"]
    assert main(["report", "run", *options, "--timeline", str(timeline), "--out", str(out)]) == 0
    assert main(["run", *options, "--timeline", str(alone)]) == 0
    capsys.readouterr()
    summary = Report(out.read_text(encoding="utf-8")).summary
    expected = simulate("dgx1", "resnet50", mode="train", batch=8, bn_group=2, zero=1)
    assert (summary["bn_group"], summary["zero"], summary["tensor_parallel"]) == (2, 1, 1)
    assert summary["step_time_s"] == pytest.approx(expected.step_time_s, rel=1e-12)
    assert timeline.read_bytes() == alone.read_bytes()  # the same trace-event file as archsim run writes
    tensor = tmp_path / "tp.html"
    argv = ["report", "run", "dgx-a100", "gpt3-125m", "--mode", "train", "--batch", "2", "--seq-len", "256"]
    assert main([*argv, "--tensor-parallel", "2", "--sequence-parallel", "--out", str(tensor)]) == 0
    capsys.readouterr()
    tp = Report(tensor.read_text(encoding="utf-8")).summary
    assert tp["tensor_parallel"] == 2 and tp["data_parallel"] == 4


BAD = [
    (["report", "sweep", "{dir}", "--x", "nope"], "{dir}: --x: no such column 'nope'"),
    (["report", "sweep", "{dir}", "--y", "error"], "{dir}: --y: column 'error' is not numeric"),
    (["report", "sweep", "{dir}", "--workload", "vgg16"], "{dir}: --workload: no rows of workload 'vgg16'"),
    (["report", "sweep", "{tmp}"], "{tmp}: RESULTS: no results.parquet here"),
    (["report", "run", "v100", "resnet50", "--batch", "100000"], "v100-16gb: --batch: batch 100000 needs"),
    (["report", "run", "no-such-chip", "resnet50"], "no-such-chip"),
    (["report", "run", "v100", "resnet50", "--batch", "0"], "argument --batch: expected a positive integer"),
    (["report", "run", "v100", "resnet50", "--out", "{tmp}/missing/r.html"], "{tmp}/missing/r.html: --out: cannot"),
    (["report", "run", "v100", "resnet50", "--out", "{tmp}"], "{tmp}: --out: cannot write: Is a directory"),
]


@pytest.mark.parametrize(("argv", "problem"), BAD)
def test_bad_input_is_one_line_status_2_and_no_file(
    tmp_path: Path, report_sweep_dir: Path, capsys: pytest.CaptureFixture[str], argv: list[str], problem: str
) -> None:
    names = {"dir": str(report_sweep_dir), "tmp": str(tmp_path)}
    argv = [a.format(**names) for a in argv]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "r.html")]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("archsim: error: ") and err.count("\n") == 1, err
    assert problem.format(**names) in err
    assert list(tmp_path.iterdir()) == []
