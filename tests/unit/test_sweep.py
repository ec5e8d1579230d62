"""Sweeps: spec checks (one line, exit 2), expansion and counts, resume after SIGKILL, Dask equals local."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from archsim.cli import main
from archsim.errors import SpecError
from archsim.spec.library import builtin_roots
from archsim.sweep import count, load_sweep, run_sweep
from archsim.sweep.expand import configurations
from archsim.sweep.store import RowStore

SWEEPS = next(r for r in builtin_roots() if r.name == "sweeps")
SHAPE = SWEEPS / "systolic-shape-sweep.yaml"
SMALL = {
    "schema_version": 1,
    "kind": "sweep",
    "name": "small-sweep",
    "target": "systolic-32x32",
    "workloads": ["resnet50", {"name": "gemm:256x256x256"}],
    "settings": {"batch": 2},
    "grid": {"chip.systolic.array_rows": [16, 32], "chip.systolic.array_cols": {"start": 16, "stop": 64, "factor": 2}},
    "zip": [{"chip.systolic.ifmap_sram": ["32 KiB", "1 MiB"], "chip.clock": ["1 GHz", "0.5 GHz"]}],
}


def write_spec(tmp_path: Path, data: dict[str, object], name: str = "sweep.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_dry_run_counts_the_acceptance_sweep(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "sweep", str(SHAPE), "--dry-run")
    assert code == 0, err
    assert out.strip() == "1000 configurations, 1000 runs"


def test_grid_zip_points_and_constraints_expand_in_order(tmp_path: Path) -> None:
    data = {
        **SMALL,
        "points": [{"chip.systolic.dataflow": "os"}, {"chip.systolic.dataflow": "ws"}],
        "constraints": ["chip.systolic.array_rows * chip.systolic.array_cols <= 32 * 32 or chip.clock < 0.6e9"],
    }
    spec = load_sweep(write_spec(tmp_path, data))
    kept = configurations(spec, "sweep.yaml")
    # 2 rows x 3 cols x 2 zipped x 2 points = 24; the constraint drops rows*cols > 1024 at 1 GHz
    # (32x64 only: 1 shape x 1 clock x 2 points = 2)
    assert len(kept) == 22
    first = dict(kept[0].values)
    assert first == {
        "chip.systolic.array_rows": 16,
        "chip.systolic.array_cols": 16,
        "chip.systolic.ifmap_sram": "32 KiB",
        "chip.clock": "1 GHz",
        "chip.systolic.dataflow": "os",
    }
    assert count(spec) == (22, 44, 0)


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        ({"colour": "red"}, "colour", "unknown field"),
        ({"schema_version": 2}, "schema_version", "unsupported version"),
        ({"grid": {"chip": [1]}}, "grid", "a path must start with"),
        ({"grid": {"run.speed": [1]}}, "grid", "run settings are"),
        ({"zip": [{"chip.clock": ["1 GHz"], "chip.systolic.cores": [1, 2]}]}, "zip", "same length"),
        ({"grid": {"chip.systolic.array_rows": {"start": 1, "stop": 8}}}, "grid", "exactly one of step and factor"),
        ({"grid": {"chip.clock": {"start": 1, "stop": float("inf"), "factor": 2}}}, "grid", "finite"),
        ({"grid": {"chip.clock": {"start": 1, "stop": 1e300, "step": 1e-300}}}, "grid", "more than the 100000"),
        ({"constraints": ["chip.systolic.array_rows < __import__('os')"]}, "constraints[0]", "is not allowed"),
        ({"constraints": ["chip.nothing > 1"]}, "constraints[0]", "unknown name"),
        ({"grid": {"chip.systolic.array_rows": [0]}}, "chip.systolic.array_rows=0", "greater than 0"),
        ({"grid": {"chip.systolic.rows": [8]}}, "chip.systolic.rows=8", "unknown field"),
        ({"grid": {"system.levels.node.links": [2]}}, "system.levels.node.links", "is a chip, not a system"),
        ({"grid": {"run.overlap": [True, "maybe"]}}, "run.overlap=maybe", "valid boolean"),
        ({"grid": {"run.mode": ["fly"]}}, "run.mode=fly", "'decode' or 'generate'"),
        ({"grid": {"run.fusion": ["everything"]}}, "run.fusion=everything", "'none' or 'norm-act'"),
        ({"grid": {"run.recompute": ["maybe"]}}, "run.recompute=maybe", "valid boolean"),
    ],
)
def test_bad_sweeps_fail_in_one_line_with_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, object], field: str, problem: str
) -> None:
    path = write_spec(tmp_path, {**SMALL, **change})
    code, out, err = cli(capsys, "sweep", path, "--dry-run")
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"archsim: error: {path}: {field}")
    assert problem in err


def test_out_is_required_without_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "sweep", str(SHAPE))
    assert code == 2
    assert "--out" in err


@pytest.fixture(scope="module")
def shape_out(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    """The acceptance sweep at 2 values per axis (16 rows), run once on the local executor: its
    folder and table, which the tests of this file read (and never write)."""
    out = tmp_path_factory.mktemp("shape") / "out"
    return out, run_sweep(load_sweep(SHAPE).reduced(2), out, jobs=1, progress=False)


def test_table_has_every_axis_and_result_and_peaks_follow_the_array(shape_out: tuple[Path, pd.DataFrame]) -> None:
    spec = load_sweep(SHAPE).reduced(2)
    out, table = shape_out
    assert len(table) == 16
    for column in (*spec.axis_paths, "target", "workload", "throughput", "step_time_s", "peak_flops", "key"):
        assert column in table.columns
    assert table["error"].isna().all()
    # quantities are SI numbers; the peak is 2 x rows x cols x clock (1 GHz) after rescaling
    assert set(table["chip.systolic.ifmap_sram"]) == {32 * 1024, 512 * 1024}
    expected = 2 * table["chip.systolic.array_rows"] * table["chip.systolic.array_cols"] * 1e9
    assert (abs(table["peak_flops"] / expected - 1) < 1e-9).all()
    # a bigger array is never slower here, and the stored Parquet file is the same table
    big = table[table["chip.systolic.array_rows"] == 256]["throughput"].min()
    small = table[table["chip.systolic.array_rows"] == 16]["throughput"].max()
    assert big > small
    pd.testing.assert_frame_equal(pd.read_parquet(out / "results.parquet"), table)


def test_refused_runs_are_rows_with_an_error(tmp_path: Path) -> None:
    data = {**SMALL, "workloads": ["resnet50"], "grid": {"run.batch": [1, 10**6]}, "zip": []}
    table = run_sweep(write_spec(tmp_path, data), jobs=1, progress=False)
    assert table["error"].isna().tolist() == [True, False]
    assert "--batch" in table["error"][1]
    assert pd.isna(table["throughput"][1])


def test_fusion_and_recompute_are_run_axes(tmp_path: Path) -> None:
    data = {
        **SMALL,
        "target": "v100",
        "workloads": ["resnet50"],
        "settings": {"batch": 4, "mode": "train"},
        "grid": {"run.fusion": ["none", "norm-act"], "run.recompute": [False, True]},
        "zip": [],
    }
    table = run_sweep(write_spec(tmp_path, data), jobs=1, progress=False).set_index(["run.fusion", "run.recompute"])
    assert table["error"].isna().all()
    # fusion saves memory passes; recomputation costs forward passes and saves memory
    assert table.loc[("norm-act", False), "step_time_s"] < table.loc[("none", False), "step_time_s"]
    assert table.loc[("none", True), "step_time_s"] > table.loc[("none", False), "step_time_s"]
    assert table.loc[("none", True), "memory_bytes"] < table.loc[("none", False), "memory_bytes"]


def test_a_torn_last_line_is_dropped_and_cut_off(tmp_path: Path) -> None:
    store = RowStore(tmp_path)
    store.append([{"key": "a", "x": 1.5}, {"key": "b", "x": 2}])
    with store.path.open("ab") as handle:
        handle.write(b'{"key":"c","x":')
    assert store.load() == {"a": {"key": "a", "x": 1.5}, "b": {"key": "b", "x": 2}}
    store.append([{"key": "c", "x": 3}])
    assert list(store.load()) == ["a", "b", "c"]


KILLED_RUN = """
import sys
from archsim.sweep import load_sweep, run_sweep
run_sweep(load_sweep(sys.argv[1]).reduced(3), sys.argv[2], jobs=2, chunk_size=1, progress=False)
"""


def _children(pid: int) -> list[int]:
    """Child process ids of ``pid`` (Linux /proc)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_a_sweep_killed_halfway_resumes_to_the_uninterrupted_table(tmp_path: Path) -> None:
    out = tmp_path / "killed"
    rows = out / "rows.jsonl"
    process = subprocess.Popen([sys.executable, "-c", KILLED_RUN, str(SHAPE), str(out)])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        if rows.exists() and rows.read_bytes().count(b"\n") >= 20:
            break
        time.sleep(0.02)
    workers = _children(process.pid)
    assert workers, "the local executor runs worker processes"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    # the killed sweep's workers do not outlive it
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in workers):
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in workers)
    stored = rows.read_bytes().count(b"\n")
    assert 20 <= stored < 81, "killed too late to test a resume"
    spec = load_sweep(SHAPE).reduced(3)
    assert count(spec, out=out)[2] == stored
    resumed = run_sweep(spec, out, jobs=2, progress=False)
    assert rows.read_bytes().count(b"\n") == 81  # nothing run twice
    uninterrupted = run_sweep(spec, tmp_path / "clean", jobs=1, progress=False)
    pd.testing.assert_frame_equal(resumed, uninterrupted)
    assert len(resumed) == 81


def test_dask_cluster_gives_the_local_table(tmp_path: Path, shape_out: tuple[Path, pd.DataFrame]) -> None:
    distributed = pytest.importorskip("distributed")
    spec = load_sweep(SHAPE).reduced(2)
    local = shape_out[1]
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        remote = run_sweep(
            spec, tmp_path / "dask", executor="dask", scheduler=cluster.scheduler_address, chunk_size=3, progress=False
        )
    pd.testing.assert_frame_equal(local, remote)


def test_spec_error_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="target"):
        load_sweep(write_spec(tmp_path, {**SMALL, "target": []}))


def test_software_is_a_run_axis(tmp_path: Path) -> None:
    data = {
        **SMALL,
        "target": "a100",
        "workloads": ["resnet50"],
        "settings": {"batch": 4},
        "grid": {"run.software": ["mxnet", "tensorrt"]},
        "zip": [],
    }
    table = run_sweep(write_spec(tmp_path, data), jobs=1, progress=False).set_index("run.software")
    assert table["error"].isna().all()
    assert list(table["software"]) == ["mxnet-20.12", "tensorrt-8"]
    # TensorRT folds batch-norms and fuses element-wise ops, and has no framework between kernels
    assert table.loc["tensorrt", "step_time_s"] < table.loc["mxnet", "step_time_s"]


def test_a_rerun_after_a_description_changed_recomputes_its_rows(tmp_path: Path) -> None:
    # a resumed sweep reused rows computed from the old file: a chip's HBM cut to a third kept its old times
    chips = next(r for r in builtin_roots() if r.name == "chips")
    lib = tmp_path / "lib"
    lib.mkdir()
    text = (chips / "v100-16gb.yaml").read_text().replace("name: v100-16gb", "name: my-v100")
    chip = lib / "my-v100.yaml"
    chip.write_text("\n".join(line for line in text.splitlines() if not line.startswith("aliases:")))
    data = {"schema_version": 1, "kind": "sweep", "name": "edited", "target": "my-v100",
            "workloads": ["resnet50"], "settings": {"mode": "infer"}, "grid": {"run.batch": [8, 16]}}  # fmt: skip
    path = write_spec(tmp_path, data)
    before = run_sweep(path, tmp_path / "out", search_path=[str(lib)], jobs=1, progress=False)
    assert run_sweep(path, tmp_path / "out", search_path=[str(lib)], jobs=1, progress=False).equals(before)
    chip.write_text(chip.read_text().replace('bandwidth: "900 GB/s"', 'bandwidth: "300 GB/s"'))
    after = run_sweep(path, tmp_path / "out", search_path=[str(lib)], jobs=1, progress=False)
    fresh = run_sweep(path, tmp_path / "fresh", search_path=[str(lib)], jobs=1, progress=False)
    pd.testing.assert_frame_equal(after, fresh)
    assert (after["step_time_s"] > before["step_time_s"]).all()
