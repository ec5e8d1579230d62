"""The same inputs give byte-identical JSON and baseline files in separate processes, whatever the hash seed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

RUNS = [
    ["run", "v100", "bert-base", "--mode", "train", "--batch", "2", "--json"],
    ["run", "gc200", "resnet50", "--mode", "train", "--batch", "2", "--json"],
    ["run", "tpu-v3", "resnet50", "--batch", "2", "--json"],
    ["run", "ascend910", "gemm:3x512x384x256", "--mode", "train", "--json"],
    ["run", "dgx1", "resnet50", "--mode", "train", "--batch", "2", "--json"],
]
SCRIPT = f"""
import sys
from archsim.cli import main
for argv in {RUNS!r}:
    assert main(argv) == 0
BASELINE = ["h100:bert-base:mode=train,batch=2", "ipu-pod16:resnet50:mode=train"]
assert main(["baseline", "save", sys.argv[1], *BASELINE]) == 0
"""


def run_in_process(tmp_path: Path, seed: str) -> tuple[bytes, bytes]:
    baseline = tmp_path / seed / "b.tsv"  # the same name in each run: save prints it
    baseline.parent.mkdir()
    env = {**os.environ, "PYTHONHASHSEED": seed}
    env.pop("ARCHSIM_PATH", None)
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, "b.tsv"],
        capture_output=True,
        env=env,
        check=True,
        timeout=300,
        cwd=baseline.parent,
    )
    return result.stdout, baseline.read_bytes()


def test_byte_identical_across_processes_and_hash_seeds(tmp_path: Path) -> None:
    first_out, first_file = run_in_process(tmp_path, "0")
    second_out, second_file = run_in_process(tmp_path, "4242")
    assert first_out.count(b'"step_time_s"') == len(RUNS)
    assert first_out == second_out
    assert first_file == second_file
