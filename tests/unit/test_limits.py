"""Robustness: every input path refuses malformed or absurd input in one line, exit 2, bounded time and memory."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from archsim import limits
from archsim.api import Target, run_trace
from archsim.cli import main
from archsim.errors import ArchsimError, LimitError, SpecError
from archsim.spec.library import Library, builtin_roots
from archsim.spec.yamlio import read_yaml
from archsim.workloads import build_trace, read_trace, write_trace
from archsim.workloads.trace import Mode, Op, OpKind, Phase, TensorAccess, Trace

ROOTS = {root.name: root for root in builtin_roots()}
MEMORY_LIMIT = 2 * 2**30
"""Address space allowed to a subprocess that must refuse a huge input (2 GiB)."""


def builtin(folder: str, name: str) -> dict[str, object]:
    path = next(ROOTS[folder].rglob(f"{name}.yaml"))
    data: dict[str, object] = yaml.safe_load(path.read_text())
    return data


def write(path: Path, data: object) -> str:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return str(path)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run the CLI; assert exit status 2 and one line on stderr; return that line."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert out == ""
    assert err.startswith("archsim: error: ") and err.count("\n") == 1, err
    return err


def bounded(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a subprocess with 2 GiB of address space and a minute of wall time."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    return subprocess.run(
        [sys.executable, "-m", "archsim.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        preexec_fn=limit,
        check=False,
    )


def assert_refused(result: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert fragment in result.stderr


def chip_with(tmp_path: Path, name: str = "v100-16gb", **changes: object) -> str:
    """A copy of a built-in chip with ``a__b=value`` changes (None deletes)."""
    data = builtin("chips", name)
    for dotted, value in changes.items():
        node: object = data
        *parents, leaf = dotted.split("__")
        for part in parents:
            node = node[part]  # type: ignore[index]
        node[leaf] = value  # type: ignore[index]
    return write(tmp_path / "chip.yaml", data)


# -- chips -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"transistors": 2**60}, "transistors: Input should be less than or equal to 9007199254740992"),
        ({"transistors": 10**400}, "a number of 401 characters is not a valid value"),
        ({"tensorcore__sm_count": 2**60}, "tensorcore.sm_count: Input should be less than or equal to"),
        ({"clock": "1e-300 Hz"}, "clock: '1e-300 Hz' is outside the 1 to 1e+15 Hz archsim accepts"),
        ({"clock": "1e400 GHz"}, "clock: '1e400 GHz' must be a positive, finite quantity"),
        ({"tdp": "1e-30 W"}, "tdp: '1e-30 W' is outside"),
        ({"memory__main__capacity": "1e40 B"}, "memory.main.capacity: '1e40 B' is outside"),
        ({"memory__main__bandwidth": "0.001 B/s"}, "memory.main.bandwidth: '0.001 B/s' is outside"),
        ({"efficiency": {"compute": float("nan")}}, "efficiency.compute: must be a fraction"),
        ({"schema_version": 2}, "schema_version: unsupported version 2"),
    ],
)
def test_absurd_chip_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, object], fragment: str
) -> None:
    err = cli(capsys, "run", chip_with(tmp_path, **changes), "gemm:64x64x64")
    assert "chip.yaml: " in err
    assert fragment.lower() in err.lower()


def test_a_10e12_by_10e12_array_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chip = chip_with(tmp_path, "systolic-32x32", systolic__array_rows=10**12, systolic__array_cols=10**12)
    err = cli(capsys, "run", chip, "gemm:64x64x64")
    assert "peak.fp16: published" in err and "disagrees" in err
    # with a peak to match, the peak is out of any range archsim accepts
    data = yaml.safe_load(Path(chip).read_text())
    data["peak"] = {"fp16": "2e24 TFLOPS"}
    err = cli(capsys, "run", write(tmp_path / "chip.yaml", data), "gemm:64x64x64")
    assert "peak.fp16: '2e24 TFLOPS' is outside" in err


def test_a_tiny_efficiency_makes_op_times_out_of_range(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = cli(capsys, "run", chip_with(tmp_path, efficiency={"compute": 1e-300}), "gemm:4096x4096x4096")
    assert "v100-16gb: op gemm: " in err and "outside [0, 1e+20] s" in err


YAML_ATTACKS = [
    ("tag", "kind: !!python/object/apply:os.system ['echo hi']\n", "not valid YAML"),
    ("tag2", "kind: !!python/name:os.system\n", "not valid YAML"),
    ("deep", "a: " + "[" * 100_000 + "]" * 100_000 + "\n", "line 1: nested deeper than 64 levels"),
    ("deep-block", "".join(" " * i + "a:\n" for i in range(200)) + " " * 200 + "b: 1\n", "nested deeper than 64"),
    ("deep-dash", "a:\n  " + "- " * 5000 + "x\n", "nested deeper than 64 levels"),
    ("recursive", "a: &a [*a]\n", "alias *a refers to a value that contains it"),
    (
        "laughs",
        "a: &a [x,x,x,x,x,x,x,x,x,x]\n"
        + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8)),
        "more than 200000 values once aliases are expanded",
    ),
    ("digits", "kind: chip\nname: x\ntransistors: " + "9" * 5000 + "\n", "a number of 5000 characters"),
    ("hex", "kind: chip\nname: x\ntransistors: 0x" + "f" * 5000 + "\n", "a number of 5002 characters"),
    ("date", "kind: chip\nname: x\nwhen: 2001-02-30\n", "not valid YAML"),
    ("dupe", "kind: chip\nkind: chip\n", "duplicate key 'kind'"),
    ("bom", "\ufeffkind: chip\nname: [\n", "not valid YAML"),
    ("nul", "kind: chip\x00\n", "not valid YAML: unacceptable character #x0000"),
    ("scalar", "just text\n", "expected a mapping at the top level"),
]


@pytest.mark.parametrize(("name", "text", "fragment"), YAML_ATTACKS, ids=[a[0] for a in YAML_ATTACKS])
def test_hostile_yaml_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, fragment: str
) -> None:
    path = write(tmp_path / f"{name}.yaml", text)
    err = cli(capsys, "run", path, "resnet50")
    assert f"{name}.yaml: " in err
    assert fragment in err


def test_files_that_are_not_regular_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    assert "fifo.yaml: not a regular file" in cli(capsys, "run", str(fifo), "resnet50")
    assert "/dev/zero: not a regular file" in cli(capsys, "run", "/dev/zero", "resnet50")
    (tmp_path / "dir.yaml").mkdir()
    assert "is a directory" in cli(capsys, "run", str(tmp_path / "dir.yaml"), "resnet50")
    with pytest.raises(SpecError, match="not a valid file name"):
        read_yaml(Path("bad\x00name.yaml"))


def test_large_files_are_refused_in_bounded_time_and_memory(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yaml"
    with huge.open("wb") as handle:
        handle.truncate(100 * 10**6)
    assert_refused(bounded(["run", str(huge), "resnet50"], tmp_path), "larger than the 67108864 allowed")
    # 5 MB of plain YAML: under the file limit, over what is parsed as general YAML
    text = next(ROOTS["chips"].rglob("v100-16gb.yaml")).read_text()
    big = write(tmp_path / "big.yaml", text + "".join(f"  extra{i}: {'x' * 40}\n" for i in range(100_000)))
    assert_refused(bounded(["run", big, "resnet50"], tmp_path), "characters of YAML, more than the 4194304")


# -- other description kinds ---------------------------------------------------------------------


def test_memory_link_family_and_model_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    library = Library(use_env=False)
    memory = builtin("memory", "hbm2")
    memory["latency"] = "100"
    with pytest.raises(SpecError, match=r"memory\.yaml: latency: '100' has no unit"):
        library.memory(write(tmp_path / "memory.yaml", memory))
    link = builtin("interconnect", "nvlink2")
    link["bandwidth"] = "1e30 GB/s"
    with pytest.raises(SpecError, match=r"link\.yaml: bandwidth: '1e30 GB/s' is outside"):
        library.link(write(tmp_path / "link.yaml", link))
    family = builtin("chips", "tensorcore")
    family["efficiency"]["compute"] = 2.0  # type: ignore[index]
    lib = tmp_path / "lib"
    lib.mkdir()
    write(lib / "tensorcore.yaml", family)
    err = cli(capsys, "run", "--lib", str(lib), "v100", "gemm:64x64x64")
    assert "tensorcore.yaml: efficiency.compute: must be a fraction in (0, 1], got 2.0" in err
    model = builtin("workloads", "resnet50")
    model["resnet"]["blocks"] = [10**6, 1, 1, 1]  # type: ignore[index]
    err = cli(capsys, "run", "v100", write(tmp_path / "model.yaml", model))
    assert "model.yaml: resnet: blocks: 1000003 blocks in all, more than the 1000 allowed" in err
    bert = builtin("workloads", "bert-base")
    bert["bert"]["layers"] = 2**40  # type: ignore[index]
    err = cli(capsys, "run", "v100", write(tmp_path / "bert.yaml", bert))
    assert "bert.yaml: bert: layers: 1099511627776 is more than the 1000 allowed" in err


# -- traces --------------------------------------------------------------------------------------


def small_trace() -> Trace:
    op = Op("add", OpKind.ELEMENTWISE, Phase.FORWARD, 8, (TensorAccess("x", 16),), (TensorAccess("y", 16),))
    return Trace("t", Mode.INFER, 1, build_trace_precision(), (op,), parameters=0, memory_bytes=32)


def build_trace_precision():  # type: ignore[no-untyped-def]
    from archsim.spec.common import Precision

    return Precision.FP16


def test_trace_of_ten_million_ops_is_refused_before_replay() -> None:
    trace = small_trace()
    many = Trace("many", Mode.INFER, 1, trace.precision, trace.ops * 10_000_000, 0, 32)
    library = Library(use_env=False)
    with pytest.raises(LimitError, match="many: ops: 10000000 ops, more than the 100000 allowed"):
        run_trace(Target("v100", library.chip("v100")), many, library)


def test_trace_file_with_too_many_ops_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    write_trace(small_trace(), path)
    *head, line = path.read_text().splitlines()
    path.write_text("\n".join(head) + "\n" + (line + "\n") * 150_000)
    assert_refused(
        bounded(["run", "v100", str(path)], tmp_path), "t.yaml: ops: 150000 ops, more than the 100000 allowed"
    )


@pytest.mark.parametrize(
    ("old", "new", "fragment"),
    [
        ('"flops": 8', '"flops": 100000000000000000000', "ops[0].flops: Input should be less than or equal to"),
        ('"bytes": 16', '"bytes": -16', "ops[0].reads[0].bytes: Input should be greater than or equal to 0"),
        ('"deps": []', '"deps": [0]', "ops[0].deps: op 0 (add) depends on op 0"),
        (
            '"deps": []',
            '"deps": [], "gemm": {"batch": 1, "m": 1000000000000, "n": 1, "k": 1}',
            "ops[0].gemm.m: Input should be less than or equal to 2147483647",
        ),
        ("memory_bytes: 32", "memory_bytes: " + "9" * 400, "a number of 400 characters"),
        ('"kind": "elementwise"', '"kind": "teleport"', "ops[0].kind: Input should be"),
    ],
)
def test_malformed_trace_files(tmp_path: Path, old: str, new: str, fragment: str) -> None:
    path = tmp_path / "t.yaml"
    write_trace(small_trace(), path)
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(ArchsimError, match=None) as info:
        read_trace(path)
    assert info.value.line().startswith(str(path))
    assert fragment.lower() in info.value.line().lower()


def test_trace_in_plain_yaml_over_4_mib_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    write_trace(small_trace(), path)
    *head, line = path.read_text().splitlines()
    path.write_text("\n".join(head) + "\n# a comment: not the one-op-per-line form\n" + (line + "\n") * 50_000)
    with pytest.raises(SpecError, match="characters of YAML, more than the 4194304"):
        read_trace(path)


# -- arguments -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["run", "v100", "gemm:1000000000000x1000000000000x1000000000000"], "a dimension of 1000000000000 exceeds"),
        (["run", "v100", "gemm:" + "9" * 5000 + "x1x1"], "expected gemm:MxNxK"),
        (["run", "v100", "conv:1,1,1000000000000,1000000000000,1,1,1"], "a dimension exceeds the limit of 2147483647"),
        (["run", "v100", "conv:" + "9" * 5000 + ",1,1,1,1,1,1"], "a dimension exceeds the limit"),
        (["run", "v100", "resnet50", "--batch", "1" + "0" * 400], "--batch: expected at most 2147483647"),
        (["run", "v100", "bert-base", "--seq-len", "4294967296"], "--seq-len: expected at most 2147483647"),
        (["run", "v100", "resnet50", "--batch", "9" * 5000], "--batch: expected a positive integer"),
        (["run", "v100", "resnet50", "--lib", "/dev/null"], "/dev/null: search path: not a folder"),
    ],
)
def test_absurd_arguments(capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str) -> None:
    assert fragment in cli(capsys, *argv)


def test_api_arguments() -> None:
    from archsim import simulate

    with pytest.raises(LimitError, match="--batch: must be at most 2147483647"):
        simulate("v100", "resnet50", batch=10**5000)
    with pytest.raises(LimitError, match="--seq-len: must be at most"):
        simulate("v100", "bert-base", seq_len=2**40)
    library = Library(use_env=False)
    with pytest.raises(LimitError):
        build_trace("gemm:4294967296x1x1", library, Mode.INFER, None, build_trace_precision(), None)


def test_a_search_path_folder_too_large_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "MAX_LIBRARY_ENTRIES", 50)
    for index in range(60):
        (tmp_path / f"f{index}.txt").write_text("")
    err = cli(capsys, "run", "--lib", str(tmp_path), "v100", "gemm:64x64x64")
    assert f"{tmp_path}: search path: more than 50 entries" in err
    monkeypatch.setattr(limits, "MAX_LIBRARY_ENTRIES", 10_000)
    monkeypatch.setattr(limits, "MAX_LIBRARY_FILES", 5)
    for index in range(6):
        write(tmp_path / f"c{index}.yaml", "kind: x\nname: x\n")
    err = cli(capsys, "run", "--lib", str(tmp_path), "v100", "gemm:64x64x64")
    assert "more than 5 YAML files" in err


# -- systems ---------------------------------------------------------------------------------------


def first_level(data: dict[str, object]) -> dict[str, object]:
    levels = data["levels"]
    level = next(iter(levels.values())) if isinstance(levels, dict) else levels[0]  # type: ignore[union-attr,index]
    assert isinstance(level, dict)
    return level


def test_absurd_systems(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    switch = builtin("interconnect", "dgx-a100")
    first_level(switch)["size"] = 2**40
    err = cli(capsys, "run", write(tmp_path / "huge.yaml", switch), "resnet50", "--mode", "train")
    assert "huge.yaml: levels: 1099511627776 chips in all, more than the 65536 allowed" in err
    graph = builtin("interconnect", "dgx1")
    level = first_level(graph)
    level["size"] = 12
    level["connections"] = [[a, b, 1] for a in range(12) for b in range(a + 1, 12)]
    err = cli(capsys, "run", write(tmp_path / "dense.yaml", graph), "resnet50", "--mode", "train")
    assert "dense.yaml: levels" in err and "connections: too densely connected to search for rings" in err
    level["size"] = 40
    level["connections"] = [[a, (a + 1) % 40, 1] for a in range(40)]
    err = cli(capsys, "run", write(tmp_path / "big.yaml", graph), "resnet50", "--mode", "train")
    assert "big.yaml: levels" in err and "connections: graph levels are searched exhaustively; 40 members" in err


# -- SCALE-Sim inputs ------------------------------------------------------------------------------

SCALESIM = Path(__file__).resolve().parents[1] / "golden" / "scalesim"


def test_scalesim_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = (SCALESIM / "archsim_32x32_ws.cfg").read_text()
    good_config = write(tmp_path / "good.cfg", config)
    gemm = write(tmp_path / "gemm.csv", "Layer, M, N, K,\ng1, 64, 64, 64,\n")
    user = config.replace("InterfaceBandwidth: CALC", "InterfaceBandwidth: USER")
    user = user.replace("ArrayHeight: 32", "ArrayHeight: 1").replace("ArrayWidth: 32", "ArrayWidth: 1")
    cases = [
        (write(tmp_path / "big.cfg", config.replace("ArrayHeight: 32", "ArrayHeight: 1000000000000")), gemm, "exceeds"),
        (
            write(tmp_path / "digits.cfg", config.replace("ArrayHeight: 32", "ArrayHeight: " + "9" * 5000)),
            gemm,
            "ArrayHeight",
        ),
        (
            write(tmp_path / "user.cfg", user),
            write(tmp_path / "huge.csv", "Layer, M, N, K,\ng1, 100000, 100000, 100000,\n"),
            "g1: folds: 10000000000 folds to schedule one by one",
        ),
        (
            good_config,
            write(
                tmp_path / "dp.csv",
                "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, "
                "Channels, Num Filter, Strides,\nDP1, 8, 8, 3, 3, 100000000, 1, 1,\n",
            ),
            "dp.csv: layers: 100000000 layers, more than the 100000 allowed",
        ),
        (good_config, write(tmp_path / "m.csv", "Layer, M, N, K,\ng1, " + "9" * 40 + ", 1, 1,\n"), "exceeds the limit"),
        (good_config, "/dev/zero", "/dev/zero: not a regular file"),
        (str(tmp_path), gemm, "is a directory"),
    ]
    for cfg, topology, fragment in cases:
        assert fragment in cli(capsys, "scalesim", cfg, topology), (cfg, topology)
    binary = tmp_path / "bin.cfg"
    binary.write_bytes(b"\xff\xfe[general]\n")
    assert "not a text file (invalid UTF-8)" in cli(capsys, "scalesim", str(binary), gemm)
