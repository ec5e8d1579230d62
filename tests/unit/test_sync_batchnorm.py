"""Synchronized batch norm (``--bn-group``): batch-norm statistics all-reduced over a group of chips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from archsim import simulate
from archsim.cli import main
from archsim.errors import ArchsimError
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.sweep import run_sweep
from archsim.validation import validate
from archsim.workloads import build_trace
from archsim.workloads.options import TraceOptions
from archsim.workloads.trace import CommGroup, CommKind, Mode, OpKind, Phase

LIBRARY = Library(use_env=False)
SYSTEM = "tpu-v4-64"


def test_each_batch_norm_all_reduces_its_statistics_forward_and_backward() -> None:
    plain = build_trace("resnet50", LIBRARY, Mode.TRAIN, 8, Precision.BF16, None)
    grouped = build_trace("resnet50", LIBRARY, Mode.TRAIN, 8, Precision.BF16, None, TraceOptions(bn_group=4))
    comms = [op for op in grouped.ops if op.comm is not None]
    norms = [op for op in plain.ops if op.kind is OpKind.BATCHNORM]
    assert len(norms) == 2 * 53 and len(comms) == len(norms)
    assert all(op.comm.group is CommGroup.BATCH_NORM and op.comm.kind is CommKind.ALL_REDUCE for op in comms)
    assert all(op.comm.in_stream for op in comms)
    for op in comms:  # right after its batch-norm, 2 x C fp32 statistics
        norm = grouped.ops[op.deps[0]]
        assert norm.kind is OpKind.BATCHNORM and norm.phase in (Phase.FORWARD, Phase.BACKWARD_DATA)
        scale = next(t for t in norm.reads if t.name.endswith(".weight"))
        assert op.comm.bytes == 2 * 4 * (scale.bytes // 2)
    assert grouped.flops == plain.flops
    assert [op.name for op in grouped.ops if op.comm is None] == [op.name for op in plain.ops]
    assert grouped.meta["bn_group"] == "4"
    one = build_trace("resnet50", LIBRARY, Mode.TRAIN, 8, Precision.BF16, None, TraceOptions(bn_group=1))
    assert one.ops == plain.ops


def test_a_group_holds_the_step_for_its_calls() -> None:
    alone = simulate(SYSTEM, "resnet50", mode="train", batch=16, library=LIBRARY)
    shared = simulate(SYSTEM, "resnet50", mode="train", batch=16, bn_group=4, library=LIBRARY)
    calls = [layer for layer in shared.layers if layer.name.endswith(".bn-all-reduce")]
    assert len(calls) == 106 and all(layer.bound == "communication" for layer in calls)
    held = sum(layer.end_s - layer.start_s for layer in calls)
    assert held > 0
    # the chip's stream waits for each call; the gradient all-reduce behind the backward pass shifts a little
    assert shared.step_time_s - alone.step_time_s == pytest.approx(held, rel=0.01)
    assert shared.throughput < alone.throughput
    assert (shared.bn_group, alone.bn_group) == (4, 1)


def test_the_cli_prints_and_writes_the_group(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", SYSTEM, "resnet50", "--mode", "train", "--batch", "16", "--bn-group", "2"]
    assert main(args) == 0
    assert "batch norm    2 chips share its statistics" in capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bn_group"] == 2


@pytest.mark.parametrize(
    ("target", "workload", "mode", "extra", "problem"),
    [
        (SYSTEM, "resnet50", "infer", [], "training only"),
        (SYSTEM, "bert-base", "train", [], "bert-base has no batch-norm layer"),
        (SYSTEM, "gemm:64x64x64", "train", [], "a model description"),
        (SYSTEM, "resnet50", "train", ["--bn-group", "3"], "3 chips must divide the 64 data-parallel replicas"),
        ("tpu-v4", "resnet50", "train", [], "needs a multi-chip system"),
        (SYSTEM, "resnet50", "train", ["--pipeline-stages", "2"], "not modelled with --pipeline-stages"),
    ],
)
def test_what_cannot_share_statistics_is_refused_in_one_line(
    target: str, workload: str, mode: str, extra: list[str], problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    group = [] if "--bn-group" in extra else ["--bn-group", "2"]
    assert main(["run", target, workload, "--mode", mode, *group, *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--bn-group" in err and problem in err


def test_the_api_refuses_a_bad_group() -> None:
    with pytest.raises(ArchsimError, match="--bn-group: must be a positive integer"):
        simulate(SYSTEM, "resnet50", mode="train", bn_group=0, library=LIBRARY)


def test_validation_rows_and_sweeps_take_the_group(tmp_path: Path) -> None:
    row = {
        "id": "grouped",
        "group": "multi_chip",
        "target": SYSTEM,
        "workload": "resnet50",
        "mode": "train",
        "batch": 16,
        "bn_group": 4,
        "precision": "bf16",
        "metric": "throughput",
        "published": 100000,
        "unit": "img/s",
        "source": "test",
    }
    table = {"schema_version": 1, "kind": "validation", "name": "mine", "description": "test"}
    table |= {"tolerance": {"multi_chip": 0.5}, "rows": [row]}
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(table))
    (result,) = validate(LIBRARY, str(tmp_path / "mine.yaml")).rows
    expected = simulate(SYSTEM, "resnet50", mode="train", batch=16, bn_group=4, library=LIBRARY)
    assert result.predicted == pytest.approx(expected.throughput, rel=1e-12)
    sweep = {"schema_version": 1, "kind": "sweep", "name": "bn", "target": SYSTEM}
    sweep |= {"workloads": [{"name": "resnet50", "mode": "train", "batch": 16}], "grid": {"run.bn_group": [1, 4]}}
    (tmp_path / "bn.yaml").write_text(yaml.safe_dump(sweep))
    found = run_sweep(str(tmp_path / "bn.yaml"), jobs=1, progress=False)
    assert list(found["bn_group"]) == [1, 4]
    assert found["throughput"].iloc[1] == pytest.approx(expected.throughput, rel=1e-12)
