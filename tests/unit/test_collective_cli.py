"""``archsim collective``, collective-library files and TPU slices, end to end; bad input in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import archsim
from archsim.errors import LimitError, SpecError
from archsim.spec.library import Library, builtin_roots
from tests.cli import run_cli


def builtin(folder: str, name: str) -> dict[str, object]:
    root = next(r for r in builtin_roots() if r.name == folder)
    path = next(root.rglob(f"{name}.yaml"))
    data: dict[str, object] = yaml.safe_load(path.read_text())
    return data


def test_table_prints_time_algbw_busbw_per_size(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "collective", "dgx-a100", "all-reduce", "1MiB", "1073741824")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert "8 chips" in lines[0] and "nccl" in lines[0]
    assert "algbw" in lines[1] and "busbw" in lines[1]
    rows = [line.split() for line in lines[2:]]
    assert [r[0] for r in rows] == ["1048576", "1073741824"]
    for row in rows:
        algbw, busbw = float(row[3]), float(row[4])
        assert busbw == pytest.approx(algbw * 1.75, rel=1e-3)


def test_json_one_size_is_one_object_and_several_a_results_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "collective", "dgx-a100", "all-gather", "16MiB", "--json")
    assert code == 0
    record = json.loads(out)
    assert record["bytes"] == 16 * 2**20 and record["collective"] == "all-gather"
    assert record["algbw_bytes_per_s"] == pytest.approx(record["bytes"] / record["time_s"])
    assert record["busbw_bytes_per_s"] == pytest.approx(record["algbw_bytes_per_s"] * 7 / 8)
    code, out, _ = run_cli(capsys, "collective", "dgx-a100", "broadcast", "1KiB", "1GiB", "--json")
    results = json.loads(out)["results"]
    assert [r["bytes"] for r in results] == [1024, 2**30]
    assert all(r["busbw_bytes_per_s"] == pytest.approx(r["algbw_bytes_per_s"]) for r in results)


@pytest.mark.parametrize("op", ["all-reduce", "all-gather", "reduce-scatter", "broadcast", "all-to-all"])
def test_every_op_runs_and_stays_under_the_wire(op: str) -> None:
    (small, large) = archsim.collective("dgx-a100", op, [2**20, 2**30])
    assert 0 < small.busbw_bytes_per_s < large.busbw_bytes_per_s
    assert large.busbw_bytes_per_s <= 300e9  # 12 NVLink3 ports of 25 GB/s per GPU


def test_software_and_nodes_options(capsys: pytest.CaptureFixture[str]) -> None:
    nccl = archsim.collective("dgx-a100", "all-reduce", [2**20])[0]
    bare = archsim.collective("dgx-a100", "all-reduce", [2**20], software="gcl")[0]
    assert (nccl.library, bare.library) == ("nccl", "gcl")
    assert bare.time_s < nccl.time_s  # gcl adds no launch or protocol cost on these links
    two = archsim.collective("dgx-a100", "all-reduce", [2**30], nodes=2)[0]
    assert two.chips == 16 and two.time_s > archsim.collective("dgx-a100", "all-reduce", [2**30])[0].time_s


def test_a_software_stack_names_its_collective_library(tmp_path: Path) -> None:
    stack = {
        "schema_version": 1,
        "kind": "software",
        "name": "my-stack",
        "description": "x",
        "collective_library": "hccl",
    }
    (tmp_path / "stack.yaml").write_text(yaml.safe_dump(stack))
    library = Library([tmp_path])
    assert library.collective_library("my-stack").name == "hccl"
    result = archsim.collective("dgx-a100", "all-reduce", [2**20], software="my-stack", library=library)[0]
    assert result.library == "hccl"


def test_system_default_library(library: Library) -> None:
    names = {s: library.system_collective_library(library.system(s)) for s in ("dgx-a100", "ipu-pod16", "tpu-v4-pod")}
    assert {s: lib.name if lib else None for s, lib in names.items()} == {
        "dgx-a100": "nccl",
        "ipu-pod16": "gcl",
        "tpu-v4-pod": "tpu-ici",
    }


def test_slice_from_the_cli_and_from_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "collective", "tpu-v4-pod:4x4x4", "all-reduce", "64MiB", "--json")
    assert code == 0
    from_cli = json.loads(out)
    code, out, _ = run_cli(capsys, "collective", "tpu-v4-64", "all-reduce", "64MiB", "--json")
    from_yaml = json.loads(out)
    assert from_cli["chips"] == from_yaml["chips"] == 64
    assert from_cli["time_s"] == pytest.approx(from_yaml["time_s"], rel=1e-12)
    smaller = json.loads(run_cli(capsys, "collective", "tpu-v4-pod:2x2x4", "all-reduce", "64MiB", "--json")[1])
    assert smaller["chips"] == 16 and smaller["busbw_bytes_per_s"] < from_cli["busbw_bytes_per_s"]


def test_a_training_run_on_a_slice(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "run", "tpu-v4-pod:2x2x1", "resnet50", "--mode", "train", "--batch", "8", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["num_chips"] == 4 and result["comm_s"] > 0
    code, out, err = run_cli(capsys, "run", "tpu-v4-pod:1x1x1", "resnet50", "--mode", "train", "--batch", "8", "--json")
    assert code == 0, err
    assert json.loads(out)["num_chips"] == 1


def test_training_pays_the_library_costs(tmp_path: Path, library: Library) -> None:
    data = builtin("interconnect", "dgx-a100")
    data.update(name="dgx-a100-bare", aliases=[])
    data.pop("collective_library")
    (tmp_path / "bare.yaml").write_text(yaml.safe_dump(data))
    both = Library([tmp_path])
    runs = {
        t: archsim.simulate(t, "resnet50", mode="train", batch=32, library=both) for t in ("dgx-a100", "dgx-a100-bare")
    }
    assert runs["dgx-a100"].comm_s > runs["dgx-a100-bare"].comm_s
    assert runs["dgx-a100"].step_time_s >= runs["dgx-a100-bare"].step_time_s


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["dgx-a100", "all-redux", "1MiB"], "OP: 'all-redux' is not one of"),
        (["dgx-a100", "all-reduce", "1XB"], "unknown unit"),
        (["dgx-a100", "all-reduce", "0"], "SIZE: must be a positive number of bytes"),
        (["dgx-a100", "all-reduce", "2TiB"], "SIZE: 2199023255552 bytes is more than"),
        (["nope", "all-reduce", "1MiB"], "nope: unknown system"),
        (["dgx-a100", "all-reduce", "1MiB", "--software", "foo"], "foo: unknown collective-library or software"),
        (["dgx-h100", "all-reduce", "1MiB", "--nodes", "0"], "expected a positive integer"),
        (["tpu-v4-pod", "all-reduce", "1MiB", "--nodes", "2"], "declares no scale-out fabric"),
        (["tpu-v4-pod:32x4x4", "all-reduce", "1MiB"], "slice: larger than the 16x16x16"),
        (["tpu-v4-pod:4x4", "all-reduce", "1MiB"], "slice: expected 3 positive integers"),
        (["dgx-a100:2x2", "all-reduce", "1MiB"], "dgx-a100 is not one torus level"),
        (["tpu-v4-pod:1x1x1", "all-reduce", "1MiB"], "SYSTEM: has 1 chip; a collective needs at least 2"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str) -> None:
    code, out, err = run_cli(capsys, "collective", *argv)
    assert code == 2 and out == ""
    assert err.startswith("archsim: error: ") and err.count("\n") == 1
    assert fragment in err


def write_library(tmp_path: Path, **changes: object) -> Path:
    data = builtin("software", "nccl")
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    path = tmp_path / "lib.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("changes", "field", "fragment"),
    [
        ({"speed_multiplier": 2}, "speed_multiplier", "unknown field"),
        ({"launch_latency": 5}, "launch_latency", "unit"),
        ({"wire_efficiency": 1.5}, "wire_efficiency", "fraction"),
        ({"algorithms": [{"algorithm": "tree", "min_nodes": 2}]}, "algorithms", "last rule"),
        ({"sources": {"protocols": "x"}}, "sources", "no source for launch_latency, wire_efficiency"),
    ],
)
def test_bad_library_file_is_refused_naming_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, object], field: str, fragment: str
) -> None:
    path = write_library(tmp_path, **changes)
    code, out, err = run_cli(capsys, "collective", "dgx-a100", "all-reduce", "1MiB", "--software", str(path))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert str(path) in err and field in err and fragment in err


def test_system_naming_an_unknown_library_is_refused(tmp_path: Path) -> None:
    data = builtin("interconnect", "dgx-a100")
    data.update(name="dgx-odd", aliases=[], collective_library="mpi")
    (tmp_path / "odd.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match="collective_library: mpi: unknown collective-library"):
        Library([tmp_path]).system("dgx-odd")


def test_issue35_13_collective_nodes_capped(capsys: pytest.CaptureFixture[str]) -> None:
    # as archsim run: 4,096 copies at most, refused before pricing (10 million took over a minute)
    code, out, err = run_cli(capsys, "collective", "dgx-a100", "all-reduce", "1MiB", "--nodes", "4097")
    assert (code, out, err) == (2, "", "archsim: error: --nodes: must be at most 4096\n")
    with pytest.raises(LimitError, match="--nodes: must be at most 4096"):
        archsim.collective("dgx-a100", "all-reduce", [2**20], nodes=10_000_000)
    assert archsim.collective("dgx-a100", "all-reduce", [2**20], nodes=4096)[0].nodes == 4096


@pytest.mark.parametrize(
    ("size", "problem"),
    [
        ("-1", "SIZE: must be a positive number of bytes, got -1"),
        ("1.5", "argument SIZE: '1.5' is not a whole number of bytes"),
        ("1e30", "SIZE: 1000000000000000019884624838656 bytes is more than the 1099511627776 (1 TiB) allowed"),
    ],
)
def test_issue35_22_a_bare_size_is_bytes_and_refused_for_what_is_wrong(
    capsys: pytest.CaptureFixture[str], size: str, problem: str
) -> None:
    code, out, err = run_cli(capsys, "collective", "dgx-a100", "all-reduce", "--", size)
    assert (code, out, err) == (2, "", f"archsim: error: {problem}\n")
    assert run_cli(capsys, "collective", "dgx-a100", "all-reduce", "1e6", "--json")[0] == 0  # a bare number runs


def test_issue35_22_a_software_stack_must_run_on_the_system_as_for_run(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "collective", "dgx-a100", "all-reduce", "1MiB", "--software", "poplar-2.3")
    assert (code, out) == (2, "")
    assert err.startswith("archsim: error: poplar-2.3: --software: runs on ipu chips, not a100-80gb (tensorcore)")
    assert err == run_cli(capsys, "run", "dgx-a100", "resnet50", "--software", "poplar-2.3")[2]
    assert archsim.collective("ipu-pod16", "all-reduce", [2**20], software="poplar-2.3")[0].library == "gcl"
    assert archsim.collective("dgx-a100", "all-reduce", [2**20], software="gcl")[0].library == "gcl"  # a what-if
