"""``archsim mlperf``: the table of published MLPerf results, its settings and its one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from archsim.commands import mlperf as mlperf_command
from archsim.commands.mlperf import table_lines
from archsim.spec.library import builtin_roots
from archsim.validation.mlperf import MlperfReport, run_mlperf
from tests.cli import run_cli


def test_mlperf_prints_predicted_against_published(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    reports: list[MlperfReport] = []

    def recorded(*args: Any, **kwargs: Any) -> MlperfReport:
        reports.append(run_mlperf(*args, **kwargs))
        return reports[-1]

    monkeypatch.setattr(mlperf_command, "run_mlperf", recorded)
    code, out, err = run_cli(capsys, "mlperf", "--json")
    assert code == 0, err
    report = json.loads(out)
    rows = {r["id"]: r for r in report["rows"]}
    seeds = {
        "ipu-pod16-rn50-v1.1": 28.33,
        "ipu-pod64-rn50-v1.1": 8.5,
        "ipu-pod256-rn50-v1.1": 3.79,
        "pcl-ascend910x256-bert-v1.0": 2.69,
    }
    assert {i: rows[i]["published_minutes"] for i in seeds} == seeds
    for row in rows.values():
        assert row["predicted_minutes"] > 0
        assert row["error"] == pytest.approx(row["predicted_minutes"] / row["published_minutes"] - 1)
        # the clock covers at least the training samples at the predicted throughput
        assert row["predicted_minutes"] * 60 >= row["samples"] / row["throughput"]
    assert report["mape"] == pytest.approx(sum(abs(r["error"]) for r in rows.values()) / len(rows))
    # the table as text, printed from the same report (its 16 training runs are simulated once, not twice)
    monkeypatch.setattr(mlperf_command, "run_mlperf", lambda *args, **kwargs: reports[0])
    code, out, _ = run_cli(capsys, "mlperf")
    assert code == 0 and "ipu-pod16-rn50-v1.1" in out and "mean |error|" in out
    assert out.strip().splitlines() == table_lines(reports[0]) and len(reports) == 1


def test_a_row_whose_settings_miss_its_global_batch_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    root = next(r for r in builtin_roots() if r.name == "validation")
    data = yaml.safe_load((root / "mlperf.yaml").read_text())
    data["rows"] = [data["rows"][0]]
    data["rows"][0]["batch"] = 100
    path = tmp_path / "table.yaml"
    path.write_text(yaml.safe_dump(data))
    code, out, err = run_cli(capsys, "mlperf", "--table", str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "global batch of 1600, the log records 3200" in err


def test_a_row_runs_with_the_stack_it_names(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    root = next(r for r in builtin_roots() if r.name == "validation")
    data = yaml.safe_load((root / "mlperf.yaml").read_text())
    pcl = next(r for r in data["rows"] if r["id"] == "pcl-ascend910x256-rn50-v1.0")
    assert pcl["stack"] == "mindspore-1.2"  # the submission's MindSpore 1.2.1, not the chip's default 0.5
    # a copy of the stack with a 5 ms cost per step, found through --lib: the row must pay it
    software = next(r for r in builtin_roots() if r.name == "software")
    stack = yaml.safe_load((software / "mindspore-1.2.yaml").read_text())
    stack.update(name="mindspore-slow", aliases=[])
    stack["dispatch"]["per_step"] = "5 ms"
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "mindspore-slow.yaml").write_text(yaml.safe_dump(stack))
    minutes = {}
    for name, settings in (("mindspore-1.2", {}), ("mindspore-slow", {}), ("unfused", {"fusion": "none"})):
        data["rows"] = [{**pcl, "stack": pcl["stack"] if name == "unfused" else name, **settings}]
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        code, out, err = run_cli(capsys, "mlperf", "--lib", str(lib), "--table", str(path), "--json")
        assert code == 0, err
        minutes[name] = json.loads(out)["rows"][0]["predicted_minutes"]
    assert minutes["mindspore-1.2"] < minutes["mindspore-slow"]
    # without a fusion setting the row runs what its stack fuses (MindSpore: batch-norm + ReLU)
    assert minutes["mindspore-1.2"] < minutes["unfused"]
    data["rows"] = [{**pcl, "stack": "mindspore-9"}]
    path = tmp_path / "unknown.yaml"
    path.write_text(yaml.safe_dump(data))
    code, out, err = run_cli(capsys, "mlperf", "--table", str(path))
    assert code == 2 and out == "" and "mindspore-9" in err and err.count("\n") == 1


def test_a_row_trains_the_schedule_its_submission_ran(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    root = next(r for r in builtin_roots() if r.name == "validation")
    data = yaml.safe_load((root / "mlperf.yaml").read_text())
    pod16 = next(r for r in data["rows"] if r["id"] == "ipu-pod16-rn50-v1.1")
    assert pod16["epochs"] == 38  # configs.yml mk2_resnet50_mlperf_pod16_lars, evaluated after training
    epochs = {}
    for name, row in (("schedule", pod16), ("reference", {k: v for k, v in pod16.items() if k != "epochs"})):
        data["rows"] = [row]
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        code, out, err = run_cli(capsys, "mlperf", "--table", str(path), "--json")
        assert code == 0, err
        epochs[name] = json.loads(out)["rows"][0]["epochs"]
    assert epochs["schedule"] == 38 and epochs["reference"] == pytest.approx(35.4, abs=0.05)
    data["rows"] = [{**pod16, "epochs": 0}]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    code, out, err = run_cli(capsys, "mlperf", "--table", str(path))
    assert code == 2 and out == "" and "epochs" in err and err.count("\n") == 1
