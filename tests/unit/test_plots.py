"""Figures: each plot's data read back and checked against the run or table it was drawn from."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pandas as pd
import pytest

from archsim import plots, simulate
from archsim.cli import main
from archsim.errors import UsageError
from archsim.results.records import RunResult
from archsim.run.observers import TimelineRecorder
from archsim.run.request import RunRequest
from archsim.run.runner import run as record_run
from archsim.spec.library import Library


@pytest.fixture(scope="module")
def tpu_run(library: Library) -> RunResult:
    return simulate("tpu-v3", "resnet50", batch=8, library=library)


@pytest.fixture(scope="module")
def pipelined_run(library: Library) -> RunResult:
    return simulate("ipu-m2000", "bert-base", mode="train", batch=8, pipeline_stages=4, library=library)


def test_breakdown_sums_each_bound_and_shows_every_layer_once(tpu_run: RunResult) -> None:
    figure = plots.layer_breakdown(tpu_run)
    names = [trace.name for trace in figure.data]
    assert set(names) <= {"compute", "memory", "communication", "overhead"}
    for trace in figure.data:
        assert math.isclose(sum(trace.y), tpu_run.time_by_bound[trace.name], rel_tol=1e-9)
    labels = [label for trace in figure.data for label in trace.x]
    assert sorted(labels) == sorted(f"{i}:{layer.name}" for i, layer in enumerate(tpu_run.layers))
    assert list(figure.layout.xaxis.categoryarray) == [f"{i}:{layer.name}" for i, layer in enumerate(tpu_run.layers)]


def test_roofline_places_each_op_under_the_roof(tpu_run: RunResult, library: Library) -> None:
    figure = plots.roofline(tpu_run, library)
    chip = library.chip("tpu-v3")
    peak, bandwidth = chip.peak_flops(chip.default_precision), chip.memory.main.bandwidth
    roof = next(t for t in figure.data if t.name == "roof")
    assert list(roof.y) == [min(peak, bandwidth * x) for x in roof.x]
    points = [(x, y) for t in figure.data if t.name != "roof" for x, y in zip(t.x, t.y, strict=True)]
    placed = [layer for layer in tpu_run.layers if layer.flops and layer.bytes and layer.end_s > layer.start_s]
    assert len(points) == len(placed)
    expected = sorted((layer.flops / layer.bytes, layer.flops / (layer.end_s - layer.start_s)) for layer in placed)
    assert sorted(points) == expected
    for x, y in points:
        assert y <= min(peak, bandwidth * x) * (1 + 1e-9)


def test_timeline_bars_start_and_last_as_the_ops(pipelined_run: RunResult) -> None:
    figure = plots.timeline(pipelined_run)
    bars = [
        (label, base, length, row)
        for t in figure.data
        if t.name != "transfers"  # the communication lanes: test_timeline_has_a_lane_per_transfer_stream
        for label, base, length, row in zip(t.text, t.base, t.x, t.y, strict=True)
    ]
    assert len(bars) == len(pipelined_run.layers)
    for label, base, length, row in bars:
        layer = pipelined_run.layers[int(label.split(":")[0])]
        assert base == layer.start_s
        assert math.isclose(length, layer.end_s - layer.start_s, rel_tol=1e-12, abs_tol=1e-18)
        assert row == f"stage {layer.stage} {layer.unit}"
    assert {row.split()[1] for *_, row in bars} == {"0", "1", "2", "3"}


def test_timeline_has_a_lane_per_transfer_stream(pipelined_run: RunResult) -> None:
    figure = plots.timeline(pipelined_run)
    (transfers,) = [t for t in figure.data if t.name == "transfers"]
    collectives = pipelined_run.collectives
    assert len(transfers.base) == len(collectives) > 0
    for base, length, row, c in zip(transfers.base, transfers.x, transfers.y, collectives, strict=True):
        assert (base, length) == (c.start_s, c.end_s - c.start_s)
        assert row.startswith("comm ") and "mb" not in row  # one lane per stream, not per microbatch
    lanes = list(figure.layout.yaxis.categoryarray)
    assert {"comm act s0->s1", "comm grad s1->s0"} <= set(lanes)
    assert set(transfers.y) <= set(lanes)


def test_timeline_shows_recorded_link_lanes() -> None:
    recorder = TimelineRecorder()
    result = record_run(RunRequest.of("dgx1", "resnet50", "train", 16, nodes=2), Library(), observers=[recorder])
    figure = plots.timeline(result, recorder.timeline.links)
    (links,) = [t for t in figure.data if t.name == "links"]
    expected = [(f"link {name}", s.start_s, s.end_s) for name, lane in recorder.timeline.links for s in lane]
    assert len(expected) > 0
    got = [(row, base, base + length) for row, base, length in zip(links.y, links.base, links.x, strict=True)]
    assert [(r, b) for r, b, _ in got] == [(r, b) for r, b, _ in expected]
    assert all(math.isclose(g[2], e[2], rel_tol=1e-12, abs_tol=1e-18) for g, e in zip(got, expected, strict=True))
    assert {f"link {name}" for name, _ in recorder.timeline.links} <= set(figure.layout.yaxis.categoryarray)
    assert not [t for t in plots.timeline(result).data if t.name == "links"]  # nothing recorded, no lanes


def test_ipu_roofline_says_why_it_is_empty(library: Library) -> None:
    run = simulate("gc200", "bert-base", batch=8, library=library)
    figure = plots.roofline(run, library)
    assert [t.name for t in figure.data] == ["roof"]
    assert [a.text for a in figure.layout.annotations] == [
        "no op to place: no op moves main-memory bytes (all data stays on chip)"
    ]


def test_a_figure_with_data_has_no_note(tpu_run: RunResult, library: Library) -> None:
    for figure in (plots.layer_breakdown(tpu_run), plots.roofline(tpu_run, library), plots.timeline(tpu_run)):
        assert figure.layout.annotations == ()


TABLE = pd.DataFrame(
    {
        "target": ["a", "a", "b", "b", "b", "c"],
        "workload": ["w"] * 6,
        "num_chips": [8, 16, 8, 16, 32, 8],
        "peak_flops": [1.0, 2.0, 1.5, 1.5, 3.0, 4.0],
        "throughput": [10.0, 19.0, 12.0, 11.0, 30.0, None],
    }
)


def test_scatter_has_one_trace_per_colour_with_its_rows() -> None:
    figure = plots.sweep_scatter(TABLE, "peak_flops", "throughput", color="target")
    assert [t.name for t in figure.data] == ["target=a", "target=b"]  # c has no throughput
    assert list(figure.data[1].x) == [1.5, 1.5, 3.0]
    assert list(figure.data[1].y) == [12.0, 11.0, 30.0]


def test_pareto_front_is_exactly_the_undominated_points() -> None:
    figure = plots.pareto_front(TABLE, "peak_flops", "throughput")
    front = next(t for t in figure.data if t.name == "Pareto front")
    assert list(zip(front.x, front.y, strict=True)) == [(1.0, 10.0), (1.5, 12.0), (2.0, 19.0), (3.0, 30.0)]


@pytest.mark.parametrize(("maximize_x", "maximize_y"), list(itertools.product([False, True], repeat=2)))
def test_pareto_mask_agrees_with_brute_force(maximize_x: bool, maximize_y: bool) -> None:
    xs = [3, 1, 2, 2, 5, 1, 4, 4, 0, 5]
    ys = [1, 4, 4, 2, 0, 4, 3, 5, 1, 5]

    def better(a: float, b: float, maximize: bool) -> bool:
        return a > b if maximize else a < b

    def dominated(i: int) -> bool:
        return any(
            not better(xs[i], xs[j], maximize_x)
            and not better(ys[i], ys[j], maximize_y)
            and (better(xs[j], xs[i], maximize_x) or better(ys[j], ys[i], maximize_y))
            for j in range(len(xs))
        )

    table = pd.DataFrame({"x": xs, "y": ys}, index=[f"row{i}" for i in range(len(xs))])
    mask = plots.pareto_mask(table, "x", "y", maximize_x, maximize_y)
    assert list(mask.index) == list(table.index)
    assert mask.tolist() == [not dominated(i) for i in range(len(xs))]


def test_pareto_mask_takes_a_table_like_pareto_front() -> None:
    mask = plots.pareto_mask(TABLE, "peak_flops", "throughput")
    assert mask.tolist() == [True, True, True, False, True, False]  # the last row has no throughput
    front = next(t for t in plots.pareto_front(TABLE, "peak_flops", "throughput").data if t.name == "Pareto front")
    assert sorted(zip(front.x, front.y, strict=True)) == sorted(
        zip(TABLE["peak_flops"][mask], TABLE["throughput"][mask], strict=True)
    )


@pytest.mark.parametrize("function", ["sweep_scatter", "pareto_front", "pareto_mask", "scaling_curves"])
def test_every_table_function_takes_table_x_y(function: str) -> None:
    getattr(plots, function)(TABLE, "num_chips", "throughput")  # one calling convention across archsim.plots
    with pytest.raises(UsageError, match="nothing: no such column"):
        getattr(plots, function)(TABLE, "nothing", "throughput")


def test_scaling_curves_sorted_with_linear_ideal() -> None:
    figure = plots.scaling_curves(TABLE)
    by_name = {t.name: t for t in figure.data}
    assert list(by_name["b"].x) == [8, 16, 32]
    assert list(by_name["b ideal"].y) == [12.0, 24.0, 48.0]
    assert "c" not in by_name


def test_cli_writes_self_contained_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t.html"
    assert main(["plot", "timeline", "systolic-32x32", "gemm:64x64x64", "--out", str(out)]) == 0
    text = out.read_text()
    assert "<html>" in text
    assert "plotly.js" in text or "Plotly" in text
    assert "https://cdn" not in text.split("<body>")[0]
    TABLE.to_parquet(tmp_path / "results.parquet")
    assert main(["plot", "pareto", str(tmp_path), "--x", "peak_flops", "--out", str(tmp_path / "p.html")]) == 0
    assert main(["plot", "scatter", str(tmp_path), "--x", "nope", "--out", str(tmp_path / "s.html")]) == 2
    assert "nope: no such column" in capsys.readouterr().err


@pytest.mark.parametrize("function", ["sweep_scatter", "pareto_front", "scaling_curves"])
def test_a_sweep_figure_without_rows_says_why(function: str) -> None:
    refused = TABLE.assign(throughput=None)
    figure = getattr(plots, function)(refused, "num_chips", "throughput")
    assert [a.text for a in figure.layout.annotations] == [
        "no row has both num_chips and throughput (every run refused, or no rows)"
    ]
    assert getattr(plots, function)(TABLE, "num_chips", "throughput").layout.annotations == ()
