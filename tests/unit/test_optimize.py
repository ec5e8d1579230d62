"""``archsim optimize``: a search over a sweep's axes, by the CLI and the API, resumable and deterministic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from archsim.errors import UsageError
from archsim.sweep import optimize, run_sweep
from tests.cli import run_cli

SPACE = {
    "schema_version": 1,
    "kind": "sweep",
    "name": "tiny-space",
    "target": "systolic-32x32",
    "workloads": [{"name": "resnet50", "batch": 2}],
    "settings": {"mode": "infer"},
    "grid": {
        "chip.systolic.array_rows": [8, 16, 32, 64, 128],
        "chip.systolic.array_cols": [8, 16, 32, 64, 128],
        "chip.systolic.ifmap_sram": ["16 KiB", "64 KiB", "256 KiB"],
    },
    "constraints": ["chip.systolic.array_rows <= 4 * chip.systolic.array_cols"],
}


@pytest.fixture
def space(tmp_path: Path) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(SPACE, sort_keys=False))
    return str(path)


def test_cli_finds_and_reports_the_best_design(space: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "search"
    code, stdout, err = run_cli(
        capsys, "optimize", space, "--objective", "throughput_per_mm2", "--constraint", "area <= 1.5 mm^2",
        "--trials", "16", "--batch", "8", "--out", str(out), "--no-progress", "--jobs", "1",
    )  # fmt: skip
    assert code == 0, err
    assert stdout.startswith("16 trials, ")
    report = json.loads((out / "best.json").read_text())
    best = report["best"]
    assert best
    assert all(row["area_mm2"] <= 1.5 for row in best)
    assert [row["throughput_per_mm2"] for row in best] == sorted((r["throughput_per_mm2"] for r in best), reverse=True)
    # the reported figures are the sweep's for the same configuration (event path)
    table = run_sweep(space, jobs=1, progress=False, path="event").set_index("key")
    assert table.loc[best[0]["key"], "throughput_per_mm2"] == best[0]["throughput_per_mm2"]
    # every design reported satisfies the sweep's own constraint
    assert all(r["chip.systolic.array_rows"] <= 4 * r["chip.systolic.array_cols"] for r in best)


def trial_params(folder: Path) -> list[dict[str, int]]:
    import optuna

    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(folder / "study.journal")))
    return [t.params for t in optuna.load_study(study_name="tiny-space", storage=storage).trials]


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_resumed_search_equals_an_uninterrupted_one(space: str, tmp_path: Path, sampler: str) -> None:
    arguments = {"sampler": sampler, "batch": 4, "jobs": 1, "seed": 3}
    optimize(space, tmp_path / "once", ["throughput"], trials=12, **arguments)
    optimize(space, tmp_path / "twice", ["throughput"], trials=8, **arguments)
    resumed = optimize(space, tmp_path / "twice", ["throughput"], trials=12, **arguments)
    assert resumed.trials == 12
    assert trial_params(tmp_path / "once") == trial_params(tmp_path / "twice")
    rows = (tmp_path / "twice" / "rows.jsonl").read_text().splitlines()
    assert len({json.loads(line)["key"] for line in rows}) == len(rows)  # each configuration priced once


def test_pareto_front_of_two_objectives(space: str, tmp_path: Path) -> None:
    found = optimize(space, tmp_path / "nsga", ["throughput", "area:min"], trials=16, batch=8, sampler="nsga2", jobs=1)
    assert found.pareto
    for row in found.pareto:  # nothing feasible is better on both
        assert not any(
            o["throughput"] >= row["throughput"] and o["area_mm2"] <= row["area_mm2"]
            and (o["throughput"] > row["throughput"] or o["area_mm2"] < row["area_mm2"])
            for o in found.feasible
        )  # fmt: skip


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        (["--objective", "speed"], "'speed' is not a result column"),
        (["--objective", "throughput", "--constraint", "area < "], "is not NAME OP VALUE"),
        (["--objective", "throughput", "--constraint", "chip.systolic.rows <= 4"], "not a result column or an axis"),
        (["--objective", "throughput", "--constraint", "power <= 3 mm^2"], "mm^2 applies to area only"),
        (["--objective", "throughput:up"], "must be max or min"),
    ],
)
def test_bad_input_is_one_line(
    space: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], problem: str
) -> None:
    code, stdout, err = run_cli(capsys, "optimize", space, *arguments, "--out", str(tmp_path / "bad"))
    assert code == 2
    assert stdout == ""
    assert err.count("\n") == 1
    assert err.startswith("archsim: error: ")
    assert problem in err
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize(
    ("seed", "trials", "problem"),
    [
        ("-1", "2", "must be between 0 and 4294967295, got -1"),
        ("4294967296", "2", "must be between 0 and 4294967295, got 4294967296"),
        # batch k is seeded with seed + k: three batches of 2 reach seed + 2
        ("4294967294", "6", "must be between 0 and 4294967293 (its 3 batches are seeded with --seed plus"),
    ],
)
def test_issue35_17_a_seed_the_samplers_cannot_take_is_refused_before_writing(
    space: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], seed: str, trials: str, problem: str
) -> None:
    out = tmp_path / "search"
    arguments = ["--objective", "throughput", "--trials", trials, "--batch", "2", "--seed", seed, "--out", str(out)]
    code, stdout, err = run_cli(capsys, "optimize", space, *arguments)
    assert (code, stdout) == (2, "")
    assert err.startswith(f"archsim: error: --seed: {problem}") and err.count("\n") == 1
    assert not out.exists()
    with pytest.raises(UsageError, match="--seed: must be an integer"):
        optimize(space, out, ["throughput"], seed=1.5)  # type: ignore[arg-type]
