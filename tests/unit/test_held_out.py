"""Held-out validation tables: published results outside the calibration files, which nothing is fitted to."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from archsim.cli import main
from archsim.spec.library import Library
from archsim.validation.calibrate import fit_family
from archsim.validation.calibrate_software import fit_software
from tests.unit.test_validation import ROW, table

ROOT = Path(__file__).resolve().parents[2]


def held_out_table(tmp_path: Path) -> Path:
    """A one-row table marked ``held_out``."""
    path = table(tmp_path, [ROW])
    data = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump(data | {"held_out": True}))
    return path


def test_validate_reports_a_held_out_tables_errors_as_held_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(held_out_table(tmp_path))
    assert main(["validate", "--table", path]) == 0
    text = capsys.readouterr().out
    assert "family      software         level     rows  held-out error" in text
    assert "in-sample" not in text
    assert main(["validate", "--table", path, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["held_out"] is True
    (row,) = report["rows"]
    groups = {(g["family"], g["software"], g["level"]): g for g in report["groups"]}
    group = groups[("tensorcore", "*", "*")]
    assert group["in_sample"] is None
    assert group["held_out"] == pytest.approx(abs(row["error"]))


def test_a_calibration_table_reports_in_sample_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--table", str(table(tmp_path, [ROW])), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["held_out"] is False
    assert all(g["held_out"] is None and g["in_sample"] is not None for g in report["groups"])


def test_nothing_is_fitted_to_a_held_out_table(tmp_path: Path, library: Library) -> None:
    path = str(held_out_table(tmp_path))
    with pytest.raises(ValueError, match=r"held-out table \(held_out: true\): nothing may be fitted to it"):
        fit_family(library, "tensorcore", path, parameters=["compute"])
    with pytest.raises(ValueError, match="held-out table"):
        fit_software(library, "cublas", ["per_op"], path)


def test_the_calibration_script_refuses_a_held_out_table_in_one_line(tmp_path: Path) -> None:
    path = str(held_out_table(tmp_path))
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "calibrate.py"), "--table", path, "--dry-run"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "held-out table" in done.stderr
