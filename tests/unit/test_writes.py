"""Write failures (issue 20, items 4 and 5): one line, status 2, no partial file, what was stored resumable.

A full disk is simulated by making ``os.write`` store half of what it is given and then fail with
ENOSPC, or ``os.replace`` fail; a read-only folder by making ``os.open`` fail with EACCES there
(these tests may run as root, for whom permissions do not apply). Standard output on a full device
is the real ``/dev/full``.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from archsim.cli import main
from archsim.errors import UsageError
from archsim.outfile import write_file

REAL_WRITE, REAL_OPEN = os.write, os.open


def _full_write(fd: int, data: Any) -> int:
    """Store half the bytes (at least one), then fail as a full disk does."""
    if len(data) > 1:
        return REAL_WRITE(fd, bytes(data[: len(data) // 2]))
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _full_replace(*args: Any, **kwargs: Any) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _one_line(capsys: pytest.CaptureFixture[str], code: int, problem: str) -> str:
    out, err = capsys.readouterr()
    assert code == 2, err
    assert err.startswith("archsim: error: ") and err.count("\n") == 1, err
    assert problem in err
    assert "Traceback" not in err
    return out


@pytest.fixture(scope="module")
def onnx_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("onnx")
    from tests.onnx_models import save, small_cnn_model

    return save(small_cnn_model(), tmp_path_factory.mktemp("onnx") / "cnn.onnx")


COMMANDS: dict[str, Callable[[Path, Path], list[str]]] = {
    "trace import": lambda src, out: ["trace", "import", str(src), "--out", str(out / "t.yaml")],
    "trace export": lambda src, out: ["trace", "export", "gemm:64x64x64", "--out", str(out / "t.et")],
    "export scalesim": lambda src, out: ["export", "scalesim", "gemm:64x64x64", "--out", str(out / "t.csv")],
    "plot": lambda src, out: ["plot", "breakdown", "v100", "gemm:64x64x64", "--out", str(out / "p.html")],
    "report": lambda src, out: ["report", "run", "v100", "gemm:64x64x64", "--out", str(out / "r.html")],
    "timeline": lambda src, out: ["run", "v100", "gemm:64x64x64", "--timeline", str(out / "t.json")],
}


@pytest.mark.parametrize("failure", ["write", "replace"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_full_disk_leaves_no_file(
    onnx_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    failure: str,
) -> None:
    if failure == "write" and command in ("plot", "report"):
        pytest.skip("plotly and the report write through Python's buffered files: the rename is what fails")
    out = tmp_path / "out"
    out.mkdir()
    argv = COMMANDS[command](onnx_file, out)
    monkeypatch.setattr(os, failure, _full_write if failure == "write" else _full_replace)
    code = main(argv)
    monkeypatch.undo()
    _one_line(capsys, code, "No space left on device")
    assert sorted(p.name for p in out.iterdir()) == []


SWEEP = {
    "schema_version": 1,
    "kind": "sweep",
    "name": "full-disk",
    "target": "v100",
    "workloads": ["gemm:64x64x64"],
    "grid": {"run.mode": ["infer", "train"], "run.precision": ["fp16", "fp32", "bf16"]},
}


def _sweep(tmp_path: Path) -> tuple[str, Path]:
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(SWEEP))
    return str(spec), tmp_path / "out"


def test_a_full_disk_during_a_sweep_is_one_line_and_resumable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, out = _sweep(tmp_path)
    calls = 0

    def fails_second(fd: int, data: Any) -> int:
        nonlocal calls
        calls += 1
        return REAL_WRITE(fd, data) if calls == 1 else _full_write(fd, data)

    monkeypatch.setattr(os, "write", fails_second)
    code = main(["sweep", spec, "--out", str(out), "--jobs", "1", "--chunk-size", "2", "--no-progress"])
    monkeypatch.undo()
    _one_line(capsys, code, "No space left on device")
    assert not (out / "results.parquet").exists()
    assert main(["sweep", spec, "--out", str(out), "--jobs", "1", "--chunk-size", "2", "--no-progress"]) == 0
    capsys.readouterr()
    resumed = (out / "results.parquet").read_bytes()
    fresh = tmp_path / "fresh"
    assert main(["sweep", spec, "--out", str(fresh), "--jobs", "1", "--no-progress"]) == 0
    assert resumed == (fresh / "results.parquet").read_bytes()


def test_a_failed_table_write_keeps_the_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, out = _sweep(tmp_path)
    monkeypatch.setattr(os, "replace", _full_replace)
    code = main(["sweep", spec, "--out", str(out), "--jobs", "1", "--no-progress"])
    monkeypatch.undo()
    _one_line(capsys, code, "No space left on device")
    assert sorted(p.name for p in out.iterdir()) == ["rows.jsonl"]
    assert (out / "rows.jsonl").read_bytes().count(b"\n") == 6


def test_a_read_only_out_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, out = _sweep(tmp_path)
    out.mkdir()

    def refuse(path: Any, *args: Any, **kwargs: Any) -> int:
        if str(path).startswith(str(out)):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return REAL_OPEN(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    code = main(["sweep", spec, "--out", str(out), "--jobs", "1", "--no-progress"])
    monkeypatch.undo()
    _one_line(capsys, code, "Permission denied")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("argv", [["list", "chips"], ["run", "v100", "gemm:64x64x64", "--json"]])
def test_standard_output_on_a_full_device_is_one_line(argv: list[str]) -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "archsim.cli", *argv], stdout=full, stderr=subprocess.PIPE, text=True, check=False
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("archsim: error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "No space left on device" in done.stderr


@pytest.mark.skipif(not Path("/dev/null").is_char_device(), reason="needs /dev/null")
def test_a_device_is_written_to_never_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # an atomic rename onto /dev/null would turn it into a regular file (as root: for everyone)
    replaced: list[str] = []

    def watch(source: Any, target: Any, *args: Any, **kwargs: Any) -> None:
        replaced.append(str(target))  # and never rename anything onto the device, even before the fix
        raise OSError(errno.EPERM, "the test refuses to replace a device")

    monkeypatch.setattr(os, "replace", watch)
    write_file("/dev/null", "discarded")
    write_file("/dev/null", lambda path: path.write_text("discarded", encoding="utf-8"))
    assert replaced == []
    assert Path("/dev/null").is_char_device()
    if Path("/dev/full").is_char_device():
        with pytest.raises(UsageError, match="No space left on device"):
            write_file("/dev/full", "x" * 10)
