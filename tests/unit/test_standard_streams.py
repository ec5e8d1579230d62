"""The program's standard streams (issue 35, items 14 and 15): closed, on a full device, or unable to show a name.

Each case runs the ``archsim`` program in a shell with the redirection a user would type, since only
the program itself (not :func:`archsim.cli.main` called with arguments) takes the streams.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

FULL = Path("/dev/full")
needs_full = pytest.mark.skipif(not FULL.is_char_device(), reason="needs /dev/full")


def archsim(tmp_path: Path, redirect: str, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``archsim ARGV REDIRECT`` run by ``/bin/sh`` in ``tmp_path``; its status, standard output and error."""
    return subprocess.run(
        ["/bin/sh", "-c", f'exec "$0" -m archsim.cli "$@" {redirect}', sys.executable, *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, **env},
        check=False,
        timeout=120,
    )


def test_issue35_14_closed_stdout_is_refused_before_anything_runs(tmp_path: Path) -> None:
    done = archsim(tmp_path, ">&-", "run", "v100", "gemm:64x64x64", "--timeline", "t.json")
    assert (done.returncode, done.stderr) == (
        2,
        "archsim: error: <stdout>: standard output is closed: the result would be lost\n",
    )
    assert list(tmp_path.iterdir()) == []  # nothing written


SWEEP = {
    "schema_version": 1,
    "kind": "sweep",
    "name": "streams",
    "target": "v100",
    "workloads": ["gemm:64x64x64"],
    "grid": {"run.precision": ["fp16", "fp32"]},
}


@pytest.mark.parametrize("redirect", ["2>&-", pytest.param("2>/dev/full", marks=needs_full)])
def test_issue35_14_closed_or_full_stderr_loses_only_diagnostics(tmp_path: Path, redirect: str) -> None:
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SWEEP))
    done = archsim(tmp_path, redirect, "sweep", "s.yaml", "--out", "out", "--jobs", "1")
    assert (done.returncode, done.stdout) == (0, "2 runs in out/results.parquet\n")
    assert len((tmp_path / "out" / "rows.jsonl").read_text().splitlines()) == 2  # the progress bar was lost, no row
    assert archsim(tmp_path, redirect, "run", "v100", "no-such-workload").returncode == 2


@needs_full
@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["run", "--help"]])
def test_issue35_14_help_and_version_on_a_full_stdout_exit_2(tmp_path: Path, argv: list[str]) -> None:
    done = archsim(tmp_path, ">/dev/full", *argv)
    assert (done.returncode, done.stderr) == (2, "archsim: error: <stdout>: No space left on device\n")


UNI = """schema_version: 1
kind: trace
name: сеть
mode: infer
batch: 8
precision: fp16
parameters: 4096
memory_bytes: 9216
op_count: 1
ops:
- {"name": "слой", "kind": "matmul", "phase": "fwd", "flops": 65536, "reads": [{"name": "x", "bytes": 1024}, \
{"name": "w", "bytes": 8192, "role": "weight"}], "writes": [{"name": "y", "bytes": 1024}], \
"gemm": {"batch": 1, "m": 8, "n": 64, "k": 64}}
"""
"""A trace named in Cyrillic, as the README's trace example."""


def test_issue35_15_a_name_stdout_cannot_encode_is_escaped(tmp_path: Path) -> None:
    (tmp_path / "uni.yaml").write_text(UNI, encoding="utf-8")
    done = archsim(tmp_path, "", "run", "v100", "uni.yaml", PYTHONIOENCODING="ascii")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("\\u0441\\u0435\\u0442\\u044c infer on v100-16gb")
    assert "\\u0441\\u043b\\u043e\\u0439 " in done.stdout  # the layer table too
