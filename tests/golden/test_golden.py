"""Small runs on every family against committed expected results (relative tolerance 1e-9).

The expected files change only when a cost model or a description changes on purpose; then run
``pytest tests/golden --update-golden`` and review the diff of ``tests/golden/expected/`` like code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from archsim.api import simulate

EXPECTED = Path(__file__).parent / "expected"
CASES = [
    ("v100", "gemm:4096x7000x4096", "infer", None, None),
    ("v100", "resnet50", "infer", 1, None),
    ("a100", "bert-base", "train", 2, 128),
    ("ipu", "gemm:2048x2048x2048", "infer", None, None),
    ("ascend910", "gemm:2048x2048x2048", "infer", None, None),
    ("tpu-v3", "gemm:2048x2048x2048", "infer", None, None),
    ("systolic-32x32", "resnet50", "infer", 1, None),
]
RTOL = 1e-9


def summary(target: str, workload: str, mode: str, batch: int | None, seq_len: int | None) -> dict[str, Any]:
    result = simulate(target, workload, mode=mode, batch=batch, seq_len=seq_len, search_path=())
    return {
        "step_time_s": result.step_time_s,
        "throughput": result.throughput,
        "flops": result.flops,
        "layer_cycles": [layer.cycles for layer in result.layers],
        "layer_bounds": [layer.bound for layer in result.layers],
    }


@pytest.mark.parametrize(("target", "workload", "mode", "batch", "seq_len"), CASES)
def test_golden(
    target: str, workload: str, mode: str, batch: int | None, seq_len: int | None, update_golden: bool
) -> None:
    name = f"{target}_{workload.replace(':', '-')}_{mode}.json"
    path = EXPECTED / name
    got = summary(target, workload, mode, batch, seq_len)
    if update_golden:
        path.write_text(json.dumps(got, indent=1) + "\n")
        pytest.skip(f"rewrote {name}")
    expected = json.loads(path.read_text())
    assert got["flops"] == expected["flops"]
    assert got["layer_bounds"] == expected["layer_bounds"]
    assert got["step_time_s"] == pytest.approx(expected["step_time_s"], rel=RTOL)
    assert got["throughput"] == pytest.approx(expected["throughput"], rel=RTOL)
    assert got["layer_cycles"] == expected["layer_cycles"]
