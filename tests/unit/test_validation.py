"""The validation machinery: the table loads, reports compute MAPE, the CLI and the figure show them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from archsim import simulate
from archsim.cli import main
from archsim.errors import SpecError
from archsim.results.figures import validation_scatter
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.spec.validation import Group
from archsim.validation import validate
from archsim.validation.calibrate import format_value

ROW = {
    "id": "one-gemm",
    "group": "operator",
    "target": "v100",
    "workload": "gemm:1024x1024x1024",
    "mode": "infer",
    "precision": "fp16",
    "metric": "op_time",
    "phase": "fwd",
    "published": 0.02,
    "unit": "ms",
    "source": "test",
}


def table(tmp_path: Path, rows: list[dict[str, object]]) -> Path:
    data = {
        "schema_version": 1,
        "kind": "validation",
        "name": "mine",
        "description": "test table",
        "tolerance": {"operator": 0.5, "single_chip": 0.5, "multi_chip": 0.5},
        "rows": rows,
    }
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_builtin_table_covers_the_calibration_file(library: Library) -> None:
    spec = library.validation("published")
    groups = {row.group for row in spec.rows}
    assert {Group.OPERATOR, Group.SINGLE_CHIP} <= groups
    assert len(spec.rows) >= 50
    assert all(row.source for row in spec.rows)


def test_report_error_and_mape(tmp_path: Path, library: Library) -> None:
    report = validate(library, str(table(tmp_path, [ROW])))
    (result,) = report.rows
    assert result.error == pytest.approx(result.predicted / 0.02 - 1)
    assert report.mape() == pytest.approx(abs(result.error))
    assert report.mape(Group.SINGLE_CHIP) is None


def test_a_kernel_row_is_read_at_the_nominal_clock_when_its_run_throttles(tmp_path: Path, library: Library) -> None:
    # an 8192^3 fp16 product passes the V100's 300 W: the run throttles and its layer stretches, but a
    # kernel benchmark times one kernel, which a board's power limit does not throttle
    row = {**ROW, "workload": "gemm:8192x8192x8192", "published": 20.0}
    (result,) = validate(library, str(table(tmp_path, [row]))).rows
    run = simulate("v100", "gemm:8192x8192x8192", library=library)
    assert run.clock_scale < 1.0
    (layer,) = run.layers
    assert result.predicted == pytest.approx(1e3 * (layer.end_s - layer.start_s) * run.clock_scale)
    assert result.predicted == pytest.approx(1e3 * layer.cycles / library.chip("v100").clock, rel=1e-6)


def test_in_scope_mape_leaves_out_rows_known_outside(tmp_path: Path, library: Library) -> None:
    outside = {**ROW, "id": "far", "published": 1.0, "known_outside": "a reason"}
    report = validate(library, str(table(tmp_path, [ROW, outside])))
    inside, far = report.rows
    assert report.mape() == pytest.approx((abs(inside.error) + abs(far.error)) / 2)
    assert report.mape(in_scope=True) == pytest.approx(abs(inside.error))
    assert report.to_dict()["mape_in_scope"]["overall"] == pytest.approx(abs(inside.error))


def test_a_row_marked_fit_false_is_reported_but_not_fitted_to(tmp_path: Path, library: Library) -> None:
    from archsim.validation.calibrate_software import fit_software

    bound = {**ROW, "id": "bound", "workload": "gemm:2048x2048x2048", "fit": False, "notes": "an upper bound"}
    path = str(table(tmp_path, [ROW, bound]))
    fit = fit_software(library, "cublas", ["per_op"], path, folds=1, max_evaluations=4)
    assert fit.rows == 1
    assert [r.row.id for r in fit.report_after.rows] == ["one-gemm"]
    report = validate(library, path)
    assert [r.row.id for r in report.rows] == ["one-gemm", "bound"]
    assert [r["fit"] for r in report.to_dict()["rows"]] == [True, False]  # type: ignore[index]


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"unit": "img/s"}, "does not fit metric op_time"),
        ({"phase": None}, "phase is required"),
        ({"published": -1}, "published must be positive"),
        ({"group": "galactic"}, "rows[0].group"),
        ({"metric": "ttft", "phase": None}, "metric ttft is the metric of prefill rows"),
        ({"metric": "op_rate", "unit": "ms"}, "does not fit metric op_rate"),
        ({"gen_len": 8}, "gen_len applies to decode and generate rows only"),
        ({"metric": "output_throughput", "unit": "tok/s/GPU", "phase": None}, "metric output_throughput is the metric"),
        ({"metric": "mfu", "unit": "%", "phase": None}, "metric mfu applies to training rows only"),
        ({"metric": "achieved_tflops", "unit": "TFLOP/s", "phase": None}, "does not fit metric achieved_tflops"),
        ({"metric": "power", "unit": "kW", "phase": None}, "does not fit metric power"),
        ({"fit": False}, "fit: false needs notes"),
    ],
)
def test_bad_rows_are_spec_errors(tmp_path: Path, library: Library, change: dict[str, object], fragment: str) -> None:
    with pytest.raises(SpecError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        validate(library, str(table(tmp_path, [{**ROW, **change}])))


def test_validate_cli_json_and_plot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = table(tmp_path, [ROW, {**ROW, "id": "second", "workload": "gemm:2048x2048x2048", "published": 0.1}])
    plot = tmp_path / "v.html"
    assert main(["validate", "--table", str(path), "--json", "--plot", str(plot)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in out["rows"]] == ["one-gemm", "second"]
    assert out["mape"]["overall"] == pytest.approx(sum(abs(r["error"]) for r in out["rows"]) / 2)
    assert "<html>" in plot.read_text()[:100]


def test_validate_cli_exit_status_ignores_error_size(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = table(tmp_path, [{**ROW, "published": 1e6}])  # absurdly far off: still exit 0
    assert main(["validate", "--table", str(path)]) == 0
    assert "MAPE operator" in capsys.readouterr().out


def test_validate_cli_fails_on_a_row_that_cannot_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = table(tmp_path, [{**ROW, "target": "v999"}])
    assert main(["validate", "--table", str(path)]) == 2
    assert "v999: unknown chip" in capsys.readouterr().err


def test_scatter_holds_every_row(tmp_path: Path, library: Library) -> None:
    report = validate(
        library,
        str(
            table(
                tmp_path,
                [
                    ROW,
                    {
                        **ROW,
                        "id": "b",
                        "group": "single_chip",
                        "metric": "throughput",
                        "phase": None,
                        "unit": "img/s",
                        "workload": "resnet50",
                        "batch": 2,
                        "published": 500,
                    },
                ],
            )
        ),
    )
    figure = validation_scatter(report)
    points = {t.name: (list(t.x), list(t.y)) for t in figure.data}
    assert points["operator"] == ([0.02], [report.rows[0].predicted])
    assert points["single_chip"] == ([500], [report.rows[1].predicted])
    assert figure.layout.xaxis.type == "log" and figure.layout.yaxis.type == "log"
    plus = points["+10%"]
    assert plus[1][0] == pytest.approx(plus[0][0] * 1.1)


def test_fitted_values_are_written_with_units() -> None:
    assert format_value("op_overhead", 1.73e-5) == '"17.3 us"'
    assert format_value("step_overhead", 3.07e-3) == '"3.07 ms"'
    assert format_value("compute", 0.76812) == "0.768"
    assert format_value("wave_overhead", 4.2e-9) == '"4.2 ns"'
    assert format_value("step_overhead", 9.36e-14) == '"0 s"'  # the search's floor stands for zero


def test_calibration_searches_every_time_parameter_in_log_space() -> None:
    from archsim.validation.calibrate import TIME_FIELDS

    assert {"op_overhead", "framework_overhead", "host_overhead", "step_overhead", "wave_overhead"} <= TIME_FIELDS
    assert not TIME_FIELDS & {"compute", "memory_bandwidth", "vector", "exchange"}


def test_op_rate_and_ttft_rows(tmp_path: Path, library: Library) -> None:
    rate = {**ROW, "id": "rate", "metric": "op_rate", "unit": "TFLOP/s", "published": 100.0}
    prefill = {
        **ROW,
        "id": "prefill",
        "group": "single_chip",
        "workload": "gpt2",
        "mode": "prefill",
        "batch": 1,
        "seq_len": 128,
        "metric": "ttft",
        "phase": None,
        "published": 1.0,
    }
    del prefill["phase"]
    report = validate(library, str(table(tmp_path, [ROW, rate, prefill])))
    time, flops, ttft = report.rows
    assert flops.predicted == pytest.approx(2 * 1024**3 / (time.predicted / 1e3) / 1e12)
    assert ttft.predicted > 0
    assert ttft.row.published_si == pytest.approx(1e-3)
    assert flops.row.published_si == pytest.approx(1e14)


GPT2 = {**ROW, "group": "single_chip", "workload": "gpt2", "batch": 2, "seq_len": 64, "published": 1.0}
del GPT2["phase"]


def test_generate_rows_count_output_tokens_per_gpu_or_per_replica(tmp_path: Path, library: Library) -> None:
    generate = {**GPT2, "mode": "generate", "gen_len": 4, "metric": "output_throughput", "unit": "tok/s/GPU"}
    system = {**generate, "group": "multi_chip", "target": "dgx1", "tensor_parallel": 2}
    rows = [
        {**generate, "id": "chip"},
        {**system, "id": "per-gpu"},
        {**system, "id": "per-replica", "unit": "tok/s"},
    ]
    chip, per_gpu, per_replica = validate(library, str(table(tmp_path, rows))).rows
    alone = simulate(
        "v100", "gpt2", mode="generate", batch=2, prompt_len=64, gen_len=4, precision="fp16", library=library
    )
    assert alone.output_tokens_per_s is not None
    assert chip.predicted == pytest.approx(alone.output_tokens_per_s)
    # a DGX-1 holds four pairs: per GPU is the system's output over 8, a replica's is two GPUs' worth
    assert per_replica.predicted == pytest.approx(2 * per_gpu.predicted)


def test_training_rows_count_achieved_flops_with_recomputation_and_mfu_without(
    tmp_path: Path, library: Library
) -> None:
    train = {**GPT2, "mode": "train", "recompute": "full", "metric": "achieved_tflops", "unit": "TFLOP/s/GPU"}
    rows = [{**train, "id": "achieved"}, {**train, "id": "mfu", "metric": "mfu", "unit": "%"}]
    achieved, mfu = validate(library, str(table(tmp_path, rows))).rows
    run = simulate(
        "v100", "gpt2", mode="train", batch=2, seq_len=64, precision="fp16", recompute="full", library=library
    )
    assert run.mfu is not None
    assert achieved.predicted == pytest.approx(run.flops / run.step_time_s / 1e12)
    assert mfu.predicted == pytest.approx(100 * run.mfu)
    assert mfu.row.published_si == pytest.approx(0.01)
    # the recomputed forward pass counts in achieved FLOPs and not in MFU's model FLOPs
    peak = library.chip("v100").peak_flops(Precision.FP16)
    assert mfu.predicted / 100 * peak < 0.9 * achieved.predicted * 1e12


def test_batch_max_runs_the_largest_batch_the_kv_cache_allows(tmp_path: Path, library: Library) -> None:
    row = {**GPT2, "id": "max", "mode": "generate", "batch": "max", "seq_len": 512, "gen_len": 512}
    row |= {"metric": "output_throughput", "unit": "tok/s"}
    (result,) = validate(library, str(table(tmp_path, [row]))).rows
    options: dict[str, object] = {"mode": "generate", "prompt_len": 512, "gen_len": 512, "precision": "fp16"}
    largest = simulate("v100", "gpt2", batch=1, library=library, **options).max_batch  # type: ignore[arg-type]
    assert largest is not None and largest > 1
    at_largest = simulate("v100", "gpt2", batch=largest, library=library, **options)  # type: ignore[arg-type]
    assert result.predicted == pytest.approx(at_largest.output_tokens_per_s)
    bad = tmp_path / "bad"
    bad.mkdir()
    with pytest.raises(SpecError, match="batch max applies to generate rows only"):
        validate(library, str(table(bad, [{**ROW, "batch": "max"}])))
