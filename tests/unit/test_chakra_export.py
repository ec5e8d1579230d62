"""``archsim export chakra``: one Chakra ET per rank of the simulated step, read back and replayed.

The files round-trip through archsim's own reader and replay to the same compute time; they parse
with the official schema (tests/chakra_official.py), sends meet their receives across ranks, and a
failed export leaves nothing behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.protobuf")

from google.protobuf.internal.decoder import _DecodeVarint32

from archsim import simulate
from archsim.spec.library import Library
from archsim.workloads.chakra import read_chakra
from archsim.workloads.chakra_export import export_chakra
from archsim.workloads.trace import CommGroup, CommKind
from archsim.workloads.transforms import DEFAULT_BUCKET_BYTES, compute_only, gradient_buckets
from tests.chakra_official import COMM_TYPES, NODE_TYPES, messages
from tests.cli import run_cli

PIPELINE = {"mode": "train", "batch": 8, "pipeline_stages": 4, "microbatches": 4}


@pytest.fixture(scope="module")
def library() -> Library:
    return Library(use_env=False)


def _official_nodes(path: Path) -> tuple[Any, list[Any]]:
    """The metadata and nodes of ``path``, parsed with the official schema."""
    official = messages()
    data = path.read_bytes()
    found: list[bytes] = []
    pos = 0
    while pos < len(data):
        length, pos = _DecodeVarint32(data, pos)
        found.append(data[pos : pos + length])
        pos += length
    return official["GlobalMetadata"].FromString(found[0]), [official["Node"].FromString(m) for m in found[1:]]


def _attrs(node: Any) -> dict[str, Any]:
    return {a.name: a for a in node.attr}


def test_a_data_parallel_step_round_trips_to_the_same_compute_time(tmp_path: Path, library: Library) -> None:
    original = simulate("dgx-a100", "gpt2", mode="train", batch=4, library=library)
    (path,) = export_chakra("dgx-a100", "gpt2", tmp_path, library, mode="train", batch=4)
    assert path.name == "gpt2.0.et"
    trace = read_chakra(path)
    reduces = [op.comm for op in trace.ops if op.comm is not None]
    assert reduces and all(c.kind is CommKind.ALL_REDUCE and c.group is CommGroup.DATA_PARALLEL for c in reduces)
    buckets = gradient_buckets(compute_only(trace).ops, DEFAULT_BUCKET_BYTES)
    assert [c.bytes for c in reduces] == [b.bytes for b in buckets]
    replayed = simulate("dgx-a100", str(path), mode="train", library=library)
    assert [layer.name for layer in replayed.layers] == [layer.name for layer in original.layers]
    for again, first in zip(replayed.layers, original.layers, strict=True):
        assert again.end_s - again.start_s == pytest.approx(first.end_s - first.start_s, rel=1e-12)
    assert replayed.step_time_s == pytest.approx(original.step_time_s, rel=1e-9)


def test_every_stage_of_a_pipeline_round_trips(tmp_path: Path, library: Library) -> None:
    original = simulate("dgx-a100", "gpt2", library=library, **PIPELINE)
    paths = export_chakra("dgx-a100", "gpt2", tmp_path, library, **PIPELINE)
    assert [p.name for p in paths] == [f"gpt2.{rank}.et" for rank in range(4)]
    for stage, path in enumerate(paths):
        trace = read_chakra(path)
        assert (trace.meta["rank"], trace.meta["stage"], trace.meta["ranks"]) == (str(stage), str(stage), "8")
        kinds = [op.comm.kind for op in trace.ops if op.comm is not None]
        first, last = stage == 0, stage == 3
        assert kinds.count(CommKind.RECV) == 4 * ((not first) + (not last))
        assert kinds.count(CommKind.SEND) == 4 * ((not first) + (not last))
        assert kinds.count(CommKind.ALL_REDUCE) >= 1
        replayed = simulate("dgx-a100", str(path), mode="train", library=library)
        ours = [layer for layer in original.layers if layer.stage == stage]
        expected = sum((x.end_s - x.start_s) * (1 if x.phase == "update" else 4) for x in ours)
        assert sum(x.end_s - x.start_s for x in replayed.layers) == pytest.approx(expected, rel=1e-9)


def test_files_follow_the_official_schema_and_sends_meet_receives(tmp_path: Path, library: Library) -> None:
    paths = export_chakra("dgx-a100", "gpt2", tmp_path, library, all_ranks=True, **PIPELINE)
    assert len(paths) == 8  # two replicas of a 4-stage pipeline
    sends: list[tuple[int, int, int, int]] = []
    receives: list[tuple[int, int, int, int]] = []
    for rank, path in enumerate(paths):
        meta, nodes = _official_nodes(path)
        assert meta.version == "0.0.4"
        seen: set[int] = set()
        for node in nodes:
            attrs = _attrs(node)
            assert NODE_TYPES[node.type] in ("COMP_NODE", "COMM_COLL_NODE", "COMM_SEND_NODE", "COMM_RECV_NODE")
            assert set(node.data_deps) <= seen
            seen.add(node.id)
            assert attrs["is_cpu_op"].bool_val is False
            if NODE_TYPES[node.type] == "COMP_NODE":
                assert node.duration_micros == round(attrs["archsim.duration_s"].double_val * 1e6)
                assert attrs["num_ops"].int64_val >= 0
            elif NODE_TYPES[node.type] == "COMM_COLL_NODE":
                assert COMM_TYPES[attrs["comm_type"].int64_val] == "ALL_REDUCE"
                assert attrs["comm_size"].int64_val > 0
                assert attrs["pg_name"].string_val == f"data-parallel.stage{rank % 4}"
                assert list(attrs["archsim.group_ranks"].int64_list.values) == [rank % 4, rank % 4 + 4]
            else:
                key = tuple(attrs[a].int32_val for a in ("comm_src", "comm_dst", "comm_tag"))
                entry = (*key, attrs["comm_size"].int64_val)
                (sends if NODE_TYPES[node.type] == "COMM_SEND_NODE" else receives).append(entry)
                assert rank in key[:2]
    assert sends and sorted(sends) == sorted(receives)


def test_a_tensor_parallel_pipeline_names_its_ranks_and_groups(tmp_path: Path, library: Library) -> None:
    # 8 chips: TP 2 x 2 stages x 2 replicas; rank (p * 2 + s) * 2 + t, representatives are t = 0 of pipeline 0
    layout = {"mode": "train", "batch": 4, "pipeline_stages": 2, "microbatches": 2, "tensor_parallel": 2}
    paths = export_chakra("dgx-a100", "gpt2", tmp_path, library, all_ranks=True, **layout)
    assert len(paths) == 8
    representatives = export_chakra("dgx-a100", "gpt2", tmp_path / "rep", library, **layout)
    assert [p.name for p in representatives] == ["gpt2.0.et", "gpt2.2.et"]
    sends: list[tuple[int, int, int, int]] = []
    receives: list[tuple[int, int, int, int]] = []
    for rank, path in enumerate(paths):
        shard, stage, pipeline = rank % 2, rank // 2 % 2, rank // 4
        _, nodes = _official_nodes(path)
        groups = {}
        for node in nodes:
            attrs = _attrs(node)
            if NODE_TYPES[node.type] == "COMM_COLL_NODE":
                groups[attrs["pg_name"].string_val] = list(attrs["archsim.group_ranks"].int64_list.values)
            elif NODE_TYPES[node.type] in ("COMM_SEND_NODE", "COMM_RECV_NODE"):
                key = tuple(attrs[a].int32_val for a in ("comm_src", "comm_dst", "comm_tag"))
                entry = (*key, attrs["comm_size"].int64_val)
                (sends if NODE_TYPES[node.type] == "COMM_SEND_NODE" else receives).append(entry)
                assert {key[0], key[1]} == {rank, rank + (2 if stage == 0 else -2)}  # the same shard, next stage
        tp = f"tensor-parallel.stage{stage}.pipeline{pipeline}"
        assert groups[tp] == [rank - shard, rank - shard + 1]
        assert groups[f"data-parallel.stage{stage}.shard{shard}"] == [stage * 2 + shard, 4 + stage * 2 + shard]
    assert sends and sorted(sends) == sorted(receives)


def test_an_inference_step_on_one_chip_is_rank_0_without_communication(tmp_path: Path, library: Library) -> None:
    (path,) = export_chakra("a100-80gb", "gpt2", tmp_path, library, mode="infer", batch=2)
    trace = read_chakra(path)
    assert not trace.has_comm and trace.mode.value == "infer"
    again = simulate("a100-80gb", str(path), library=library)
    original = simulate("a100-80gb", "gpt2", batch=2, library=library)
    assert again.step_time_s == pytest.approx(original.step_time_s, rel=1e-12)


def test_cli_writes_every_rank_when_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ranks"
    argv = ("export", "chakra", "gpt2", "--target", "dgx-a100", "--batch", "2", "--out", str(out))
    code, text, err = run_cli(capsys, *argv, "--all-ranks")
    assert (code, err) == (0, "")
    assert text == f"wrote 8 Chakra ET file(s) (gpt2.0.et .. gpt2.7.et) to {out}\n"
    assert sorted(p.name for p in out.iterdir()) == [f"gpt2.{r}.et" for r in range(8)]
    assert read_chakra(out / "gpt2.5.et").meta["rank"] == "5"


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--mode", "generate"], "--mode"),
        (["--target", "nosuchsystem"], "nosuchsystem"),
        (["--pipeline-stages", "3"], "--pipeline-stages"),
        (["--mode", "decode", "--pipeline-stages", "2"], "pipelined generation"),
        (["--timeline", "t.json"], "--timeline"),
    ],
)
def test_cli_refusals_are_one_line_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], fragment: str
) -> None:
    out = tmp_path / "none"
    code, text, err = run_cli(capsys, "export", "chakra", "gpt2", "--target", "dgx-a100", "--out", str(out), *extra)
    assert code == 2 and text == ""
    assert err.count("\n") == 1 and err.startswith("archsim: error: ") and fragment in err
    assert not out.exists()


def test_a_failed_write_leaves_no_rank_behind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "half"
    (out / "gpt2.2.et").mkdir(parents=True)  # rank 2's file cannot replace a folder
    argv = ("export", "chakra", "gpt2", "--target", "dgx-a100", "--pipeline-stages", "4", "--out", str(out))
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and "gpt2.2.et" in err
    assert sorted(p.name for p in out.iterdir()) == ["gpt2.2.et"]


def test_an_ipu_step_exports_its_all_reduces_after_the_backward_pass(tmp_path: Path, library: Library) -> None:
    # a bulk-synchronous chip cannot overlap its all-reduce with compute: the ranks' files say so too
    original = simulate("ipu-pod16", "resnet50", mode="train", batch=2, library=library)
    assert original.exposed_comm_s == pytest.approx(original.comm_s)
    (path,) = export_chakra("ipu-pod16", "resnet50", tmp_path, library, mode="train", batch=2)
    replayed = simulate("ipu-pod16", str(path), mode="train", library=library)
    assert replayed.step_time_s == pytest.approx(original.step_time_s, rel=1e-9)
