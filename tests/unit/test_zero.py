"""ZeRO stages 1-3 (--zero): sharded memory per chip, their communication ops, the CLI and its refusals."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from archsim import simulate
from archsim.errors import UsageError
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.sweep import run_sweep
from archsim.workloads import TraceOptions, build_trace
from archsim.workloads.memory import memory_per_chip
from archsim.workloads.trace import CommKind, Mode, Phase, Trace
from archsim.workloads.transforms import gradient_buckets, with_gradient_all_reduces
from archsim.workloads.zero import with_zero, zero_memory

LIBRARY = Library(use_env=False)
BUCKET = 4 * 2**20


@pytest.fixture(scope="module")
def gpt2() -> Trace:
    return build_trace("gpt2", LIBRARY, Mode.TRAIN, 1, Precision.FP16, 128, TraceOptions())


def comms(trace: Trace, kind: CommKind, prefix: str = "") -> list[int]:
    return [
        op.comm.bytes for op in trace.ops if op.comm is not None and op.comm.kind is kind and op.name.startswith(prefix)
    ]


@pytest.mark.parametrize("width", [2, 8, 64])
def test_zero_divides_what_each_stage_shards(gpt2: Trace, width: int) -> None:
    plain = memory_per_chip(gpt2)
    one, two, three = (zero_memory(gpt2, stage, width) for stage in (1, 2, 3))
    shard = lambda n: math.ceil(n / width)  # noqa: E731
    assert (one.weights, one.gradients, one.optimizer_state) == (
        plain.weights,
        plain.gradients,
        shard(plain.optimizer_state),
    )
    assert (two.weights, two.gradients, two.optimizer_state) == (
        plain.weights,
        shard(plain.gradients),
        shard(plain.optimizer_state),
    )
    assert (three.weights, three.gradients) == (shard(plain.weights), shard(plain.gradients))
    for split in (one, two, three):
        assert split.activations == plain.activations
        assert split.total == split.weights + split.gradients + split.optimizer_state + split.activations
    assert plain.total > one.total > two.total > three.total
    assert zero_memory(gpt2, 3, 1) == plain == zero_memory(gpt2, 0, width)


@pytest.mark.parametrize("stage", [1, 2])
def test_stages_1_and_2_reduce_scatter_then_all_gather_the_updated_weights(gpt2: Trace, stage: int) -> None:
    plain = with_gradient_all_reduces(gpt2, BUCKET)
    zero = with_zero(gpt2, stage, 8, BUCKET)
    zero.check()
    buckets = gradient_buckets(gpt2.ops, BUCKET)
    assert comms(zero, CommKind.ALL_REDUCE) == []
    assert comms(zero, CommKind.REDUCE_SCATTER) == comms(plain, CommKind.ALL_REDUCE) == [b.bytes for b in buckets]
    assert comms(zero, CommKind.ALL_GATHER) == [b.bytes for b in buckets]
    update = next(i for i, op in enumerate(zero.ops) if op.phase is Phase.UPDATE and op.comm is None)
    scatters = [i for i, op in enumerate(zero.ops) if op.comm is not None and op.comm.kind is CommKind.REDUCE_SCATTER]
    gathers = [i for i, op in enumerate(zero.ops) if op.comm is not None and op.comm.kind is CommKind.ALL_GATHER]
    assert set(scatters) <= set(zero.ops[update].deps)
    assert all(zero.ops[g].deps == (update,) for g in gathers)
    # the update runs on the chip's shard
    original = next(op for op in gpt2.ops if op.phase is Phase.UPDATE)
    assert zero.ops[update].flops == math.ceil(original.flops / 8)
    assert zero.ops[update].bytes == sum(math.ceil(t.bytes / 8) for t in (*original.reads, *original.writes))


def test_stage_3_gathers_weights_before_the_forward_and_backward_ops_that_read_them(gpt2: Trace) -> None:
    zero = with_zero(gpt2, 3, 8, BUCKET)
    zero.check()
    # weights stay sharded after the update: no bucket gathers (``all-gather bK``)
    assert not [op for op in zero.ops if op.name.startswith("all-gather b") and op.name[12].isdigit()]
    forward, backward = (
        comms(zero, CommKind.ALL_GATHER, "all-gather fwd"),
        comms(zero, CommKind.ALL_GATHER, "all-gather bwd"),
    )
    assert sum(forward) == gpt2.parameters * 2  # every fp16 parameter once, the embedding table whole
    assert 0 < sum(backward) <= sum(forward)
    assert len(comms(zero, CommKind.REDUCE_SCATTER)) == len(gradient_buckets(gpt2.ops, BUCKET))
    for index, op in enumerate(zero.ops):
        if op.comm is not None and op.name.startswith("all-gather fwd"):
            waiting = [i for i, other in enumerate(zero.ops) if index in other.deps and other.comm is None]
            assert waiting and all(zero.ops[i].phase is Phase.FORWARD for i in waiting)
            assert any(t.role.value == "weight" for t in zero.ops[waiting[0]].reads)
    # prefetched: the second gather is issued before the first group's op, so it overlaps that group's compute
    names = [op.name for op in zero.ops]
    first_weight_op = next(
        i for i, op in enumerate(zero.ops) if op.comm is None and any(t.role.value == "weight" for t in op.reads)
    )
    assert names.index("all-gather fwd 1") < first_weight_op


def test_stage_3_on_a_system_moves_half_as_much_again_as_plain_data_parallelism() -> None:
    runs = {
        stage: simulate("dgx-a100", "gpt2", mode="train", batch=1, seq_len=128, zero=stage, library=LIBRARY)
        for stage in (0, 1, 2, 3)
    }
    wire = {stage: sum(link.bytes for link in r.links) for stage, r in runs.items()}
    assert wire[1] == pytest.approx(wire[0], rel=1e-9) and wire[2] == pytest.approx(wire[0], rel=1e-9)
    # a ring sends (N-1)/N of a reduce-scatter's or all-gather's bytes per chip, twice that of an all-reduce's
    gpt2 = build_trace("gpt2", LIBRARY, Mode.TRAIN, 1, Precision.FP16, 128, TraceOptions())
    three, plain = with_zero(gpt2, 3, 8, 25 * 2**20), with_gradient_all_reduces(gpt2)
    ratio = sum(op.comm.bytes for op in three.ops if op.comm) / (2 * sum(op.comm.bytes for op in plain.ops if op.comm))
    assert 1.5 <= ratio < 2.5  # gathers of every weight twice (forward, backward) and a reduce-scatter
    assert wire[3] == pytest.approx(ratio * wire[0], rel=1e-6)
    for stage, result in runs.items():
        assert result.zero == stage
        assert result.memory_per_chip is not None and result.memory_per_chip.total == result.memory_bytes
        assert result.scaling_efficiency is not None and 0 < result.scaling_efficiency <= 1
    totals = [runs[s].memory_bytes for s in (0, 1, 2, 3)]
    assert totals == sorted(totals, reverse=True) and totals[0] > totals[3]


def test_cli_json_with_zero_2_and_selective_recomputation() -> None:
    run = [sys.executable, "-m", "archsim.cli", "run", "dgx-a100", "gpt3-125m", "--mode", "train", "--batch", "1"]
    done = subprocess.run(
        [*run, "--seq-len", "512", "--zero", "2", "--recompute", "selective", "--json"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    split = record["memory_per_chip"]
    assert record["zero"] == 2 and record["data_parallel"] == 8
    assert split["total"] == record["memory_bytes"]
    trace = build_trace("gpt3-125m", LIBRARY, Mode.TRAIN, 1, Precision.FP16, 512, TraceOptions(recompute="selective"))
    plain = memory_per_chip(trace)
    assert split["gradients"] == math.ceil(plain.gradients / 8)
    assert split["optimizer_state"] == math.ceil(plain.optimizer_state / 8)
    assert split["weights"] == plain.weights and split["activations"] == plain.activations
    kinds = {c["name"].split(" ")[0] for c in record["collectives"]}
    assert kinds == {"reduce-scatter", "all-gather"}
    assert any(layer["phase"] == "recompute" for layer in record["layers"])


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        (
            ["h100", "gpt2", "--mode", "train", "--zero", "1"],
            "--zero: ZeRO shards training state over data-parallel chips",
        ),
        (["dgx-a100", "gpt2", "--zero", "2"], "--zero: ZeRO shards gradients and optimizer state: --mode train only"),
        (
            ["dgx-a100", "gpt2", "--mode", "train", "--zero", "3", "--pipeline-stages", "2"],
            "leave out --pipeline-stages",
        ),
        (["dgx-a100", "gpt2", "--mode", "train", "--zero", "4"], "--zero"),
    ],
)
def test_zero_is_refused_in_one_line_where_it_is_not_modelled(arguments: list[str], fragment: str) -> None:
    done = subprocess.run([sys.executable, "-m", "archsim.cli", "run", *arguments], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and fragment in done.stderr
    assert "Traceback" not in done.stderr


def test_api_refuses_a_bad_stage() -> None:
    for bad in (5, 1.0, True, "1"):
        with pytest.raises(UsageError, match=f"--zero: must be a ZeRO stage, 0, 1, 2 or 3, got {bad!r}"):
            simulate("dgx-a100", "gpt2", mode="train", zero=bad, library=LIBRARY)  # type: ignore[arg-type]


def test_zero_and_recompute_are_sweep_axes(tmp_path: Path) -> None:
    data = {
        "schema_version": 1,
        "kind": "sweep",
        "name": "zero-axes",
        "target": "dgx-a100",
        "workloads": ["gpt2"],
        "settings": {"batch": 1, "seq_len": 128, "mode": "train"},
        "grid": {"run.zero": [0, 2], "run.recompute": ["none", "selective"]},
        "zip": [],
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    table = run_sweep(str(path), jobs=1, progress=False).set_index(["run.zero", "run.recompute"])
    assert table["error"].isna().all()
    assert table.loc[(2, "none"), "memory_bytes"] < table.loc[(0, "none"), "memory_bytes"]
    assert table.loc[(0, "selective"), "memory_bytes"] < table.loc[(0, "none"), "memory_bytes"]
