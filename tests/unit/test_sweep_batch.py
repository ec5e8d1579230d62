"""The batch path of sweeps: the same table as the event path, row for row, and when it applies.

Sweeps run both ways on a sample of configurations (the other families' samples are in
``tests/unit/test_batch_families.py``); targets of a family without a batch model and systems must be
refused by ``--path batch`` (:func:`archsim.sweep.batch.batch_reason`) and run on the event path under
``auto``. Refused rows (a batch that does not fit, an invalid
combination) carry the event path's error line.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from archsim.cli import main
from archsim.spec.library import Library, builtin_roots
from archsim.sweep import run_sweep
from archsim.sweep.batch import batch_reason
from archsim.sweep.expand import library_fingerprint
from archsim.sweep.run import plan
from archsim.sweep.worker import worker_library

SWEEPS = next(r for r in builtin_roots() if r.name == "sweeps")


@pytest.fixture(autouse=True)
def every_group_batched(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small test sweeps make small groups: price them together anyway (the event path takes them otherwise)."""
    monkeypatch.setattr("archsim.sweep.batch.MIN_GROUP", 1)


def write_spec(tmp_path: Path, data: dict[str, object]) -> str:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def both_paths(spec: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    batch = run_sweep(spec, jobs=1, progress=False, path="batch")
    event = run_sweep(spec, jobs=1, progress=False, path="event")
    return batch, event


SYSTOLIC = {
    "schema_version": 1,
    "kind": "sweep",
    "name": "systolic-both-paths",
    "target": ["systolic-32x32", "tpu-v3"],
    "workloads": [
        {"name": "resnet50", "batch": 4},
        {"name": "resnet50", "mode": "train", "batch": 2},
        {"name": "bert-base", "batch": 2, "seq_len": 128},
        {"name": "gemm:1000x3000x700"},
    ],
    "settings": {"mode": "infer"},
    "grid": {"chip.systolic.dataflow": ["os", "ws", "is"], "chip.systolic.array_rows": [8, 100]},
    "zip": [{"chip.systolic.ofmap_sram": ["8 KiB", "2 MiB"], "chip.clock": ["0.6 GHz", "1.3 GHz"]}],
}


def test_systolic_batch_equals_event(tmp_path: Path) -> None:
    """Every dataflow, training and inference, a GEMM, two chips: identical tables, errors included."""
    batch, event = both_paths(write_spec(tmp_path, SYSTOLIC))
    assert len(batch) == 2 * 4 * 2 * 3 * 2
    assert batch["error"].isna().sum() > len(batch) // 2
    pd.testing.assert_frame_equal(batch, event, check_exact=True)


def test_refused_rows_carry_the_event_paths_error(tmp_path: Path) -> None:
    """A batch too large for the memory, and an invalid combination: the rows say so in the same words."""
    data = {
        **SYSTOLIC,
        "target": "systolic-32x32",
        "workloads": [{"name": "resnet50", "batch": 16384}, {"name": "resnet50", "batch": 2}],
        # 1024 GB/s on one HBM2 stack passes each value's check and fails together
        "grid": {"chip.memory.main.bandwidth": ["256 GB/s", "1024 GB/s"], "chip.memory.main.stacks": [4, 1]},
        "zip": [],
    }
    spec = write_spec(tmp_path, data)
    batch = run_sweep(spec, jobs=1, progress=False, path="batch")
    event = run_sweep(spec, jobs=1, progress=False, path="event")
    pd.testing.assert_frame_equal(batch, event, check_exact=True)
    assert batch["error"].notna().sum() == 4 + 1  # batch 16384 nowhere, batch 2 at one stack and 1024 GB/s


@pytest.mark.parametrize(
    ("target", "reason"),
    [("dgx1", "is a system")],  # (every built-in family has a batch model: test_batch_families.py)
)
def test_other_families_take_the_event_path(tmp_path: Path, target: str, reason: str) -> None:
    data = {
        "schema_version": 1,
        "kind": "sweep",
        "name": "other-family",
        "target": target,
        "workloads": [{"name": "gemm:512x512x512"}],
        "settings": {"batch": 1},
        "grid": {"chip.clock": ["1 GHz", "1.2 GHz"]},
    }
    spec = write_spec(tmp_path, data)
    planned = plan(spec)
    found = batch_reason(planned.context.spec, Library(use_env=False))
    assert found is not None
    assert reason in found
    code = main(["sweep", spec, "--out", str(tmp_path / "out"), "--path", "batch", "--no-progress"])
    assert code == 2
    auto = run_sweep(spec, jobs=1, progress=False)
    event = run_sweep(spec, jobs=1, progress=False, path="event")
    pd.testing.assert_frame_equal(auto, event, check_exact=True)


def test_acceptance_sweep_sample_and_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A sample of the shipped 100,000-configuration sweep, by the CLI both ways: the same Parquet table."""
    spec = yaml.safe_load((SWEEPS / "systolic-shape-100k.yaml").read_text())
    for group in spec["zip"]:
        for path in group:
            group[path] = group[path][::7]
    spec["grid"] = {path: {**axis, "step": 80} for path, axis in spec["grid"].items()}
    path = write_spec(tmp_path, spec)
    tables = []
    for mode in ("batch", "event"):
        out = tmp_path / mode
        assert main(["sweep", path, "--out", str(out), "--path", mode, "--no-progress", "--jobs", "1"]) == 0
        tables.append(pd.read_parquet(out / "results.parquet"))
    capsys.readouterr()
    assert len(tables[0]) == 4 * 4 * 3 * 2
    pd.testing.assert_frame_equal(tables[0], tables[1], check_exact=True)


def test_row_keys_are_the_canonical_json_hash() -> None:
    """A row's key is the documented hash, with the library's fingerprint (its descriptions' content)."""
    planned = plan(SWEEPS / "systolic-sram-sweep.yaml", check_variants=False)
    spec = planned.context.spec
    fingerprint = library_fingerprint(worker_library(planned.context.search_path))
    for task in planned.tasks:
        canonical = {
            "library": fingerprint,
            "target": task.configuration.target,
            "values": sorted([path, value] for path, value in task.configuration.values),
            "workload": task.workload.model_dump(mode="json"),
            "settings": spec.settings.model_dump(mode="json"),
            "rescale_peak": spec.rescale_peak,
        }
        text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), allow_nan=False)
        assert task.key == hashlib.sha256(text.encode()).hexdigest()[:32]


def test_the_fingerprint_covers_the_plug_in_families_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Editing a plug-in family's module changes every row's key: its rows were priced by the old code."""
    library = Library()
    module = tmp_path / "my_family_module.py"
    module.write_text("EFFICIENCY = 0.5\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    without = library_fingerprint(library)
    monkeypatch.setenv("ARCHSIM_FAMILIES", "my_family_module")
    named = library_fingerprint(library)
    assert named != without
    assert library_fingerprint(library) == named  # the file, not the moment, decides it
    module.write_text("EFFICIENCY = 0.6\n")
    assert library_fingerprint(library) not in (named, without)
