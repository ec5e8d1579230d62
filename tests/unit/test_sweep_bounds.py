"""Sweeps stay bounded on hostile input (issue 20, items 3 and 7): constraints, counts, worker processes."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
import yaml

import archsim.sweep.run as sweep_run
from archsim.cli import main
from archsim.errors import SpecError, UsageError
from archsim.sweep import count, run_sweep
from archsim.sweep.constraints import Constraint
from archsim.sweep.executors import default_jobs, max_jobs

NAMES = {"target", "chip.clock", "run.batch"}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("'a' * 2**40 == 'b'", "a string"),
        ("'a' * 10**9 == 'b'", "a string"),
        ("'a' + 'b' == 'ab'", "a string"),
        ("-'a' == 'b'", "a string"),
    ],
)
def test_string_arithmetic_is_refused_when_read(text: str, problem: str) -> None:
    with pytest.raises(SpecError, match=problem):
        Constraint(text, NAMES, "s.yaml", "constraints[0]")


@pytest.mark.parametrize(
    "text",
    ["((9**256)**256)**256 > 0", "(2**256)**256 * 0 == 0", "run.batch ** 256 ** 256 > 0", "10**300 * 10**300 > 0"],
)
def test_integer_size_is_bounded(text: str) -> None:
    constraint = Constraint(text, NAMES, "s.yaml", "constraints[0]")
    with pytest.raises(SpecError, match="more than 1024 bits"):
        constraint.holds({"target": "v100", "chip.clock": 1e9, "run.batch": 3})


def test_a_string_axis_value_in_arithmetic_is_refused() -> None:
    constraint = Constraint("target * run.batch == 'x'", NAMES, "s.yaml", "constraints[0]")
    with pytest.raises(SpecError, match="arithmetic on a string"):
        constraint.holds({"target": "v100", "chip.clock": 1e9, "run.batch": 10**9})


def test_comparisons_of_strings_and_ordinary_arithmetic_still_work() -> None:
    values = {"target": "v100", "chip.clock": 1.5e9, "run.batch": 8}
    assert Constraint("target == 'v100' and chip.clock < 2e9", NAMES, "s", "c").holds(values)
    assert Constraint("run.batch ** 2 == 64 and 2**1000 > 0 and -run.batch < 0", NAMES, "s", "c").holds(values)
    assert not Constraint("target != 'v100' or max(run.batch, 3) > 8", NAMES, "s", "c").holds(values)


BIG = {
    "schema_version": 1,
    "kind": "sweep",
    "name": "big-sweep",
    "target": "systolic-32x32",
    "workloads": [f"gemm:{n}x64x64" for n in range(8, 18)],
    "grid": {
        "chip.systolic.array_rows": {"start": 1, "stop": 100, "step": 1},
        "run.batch": {"start": 1, "stop": 100, "step": 1},
    },
}


def test_a_dry_run_counts_without_materializing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(BIG))
    checked = 0
    real = sweep_run.variant

    def counted(*args: object, **kwargs: object) -> object:
        nonlocal checked
        checked += 1
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(sweep_run, "variant", counted)
    tracemalloc.start()
    try:
        assert count(str(path)) == (10_000, 100_000, 0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20  # materializing its 100,000 tasks takes about 24 MB
    assert checked <= 100 + 100  # each axis value validated once, not every configuration


def test_a_dry_run_still_refuses_a_bad_axis_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = {**BIG, "grid": {**BIG["grid"], "chip.systolic.array_rows": [4, 0]}}  # type: ignore[dict-item]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["sweep", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "chip.systolic.array_rows=0" in err


def test_a_constrained_dry_run_counts_what_the_constraint_keeps(tmp_path: Path) -> None:
    data = {**BIG, "constraints": ["chip.systolic.array_rows * run.batch <= 100"]}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    kept = sum(1 for rows in range(1, 101) for batch in range(1, 101) if rows * batch <= 100)
    assert count(str(path)) == (kept, 10 * kept, 0)


def test_jobs_are_capped_at_a_multiple_of_the_cores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert max_jobs() == 4 * default_jobs()
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(BIG))
    too_many = str(max_jobs() + 1)
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--jobs", too_many]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"--jobs: {too_many} is more than {max_jobs()}" in err
    assert not (tmp_path / "out").exists()
    with pytest.raises(UsageError, match="--jobs"):
        run_sweep(str(path), tmp_path / "out", jobs=10_000, progress=False)
