"""Chakra ETs: archsim's traces round-trip exactly; an ET made with the official schema replays on a system.

An ET's communication nodes are communication ops of the trace, and it replays through the same system
replay as a built-in workload, to the same result type.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

import archsim

pytest.importorskip("google.protobuf")

from archsim.cli import main
from archsim.collective_run import gradient_call
from archsim.results.records import RunResult
from archsim.run.observers import TimelineRecorder
from archsim.run.request import RunRequest
from archsim.run.runner import run as run_request
from archsim.run.target import fabric_for
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.workloads import build_trace, read_trace
from archsim.workloads.chakra import chakra_bytes, read_chakra, write_chakra
from archsim.workloads.trace import CommGroup, CommKind, CommOp, Mode, OpKind
from archsim.workloads.transforms import DEFAULT_BUCKET_BYTES, compute_only
from tests.chakra_official import encode, messages


@pytest.mark.parametrize(
    ("workload", "mode", "batch", "seq_len"),
    [
        ("resnet50", Mode.TRAIN, 2, None),
        ("bert-base", Mode.TRAIN, 2, 128),
        ("conv:2,8,16,16,8,3,3", Mode.INFER, None, None),
    ],
)
def test_round_trip_is_identical(
    tmp_path: Path, library: Library, workload: str, mode: Mode, batch: int | None, seq_len: int | None
) -> None:
    trace = build_trace(workload, library, mode, batch, Precision.FP16, seq_len)
    path = tmp_path / "t.et"
    write_chakra(trace, path)
    back = read_chakra(path)
    assert back == trace
    assert not back.has_comm


def test_written_file_reads_with_the_official_schema(tmp_path: Path, library: Library) -> None:
    trace = build_trace("resnet50", library, Mode.INFER, 1, Precision.FP16, None)
    path = tmp_path / "r.et"
    write_chakra(trace, path)
    official = messages()
    data = path.read_bytes()
    from google.protobuf.internal.decoder import _DecodeVarint32

    length, pos = _DecodeVarint32(data, 0)
    meta = official["GlobalMetadata"].FromString(data[pos : pos + length])
    pos += length
    length, pos = _DecodeVarint32(data, pos)
    node = official["Node"].FromString(data[pos : pos + length])
    attrs = {a.name: a for a in node.attr}
    assert meta.version == "0.0.4"
    assert node.type == 4  # COMP_NODE
    assert attrs["num_ops"].int64_val == trace.ops[0].flops
    assert attrs["tensor_size"].uint64_val == trace.ops[0].bytes
    assert attrs["is_cpu_op"].bool_val is False


def _official_et(path: Path, gzipped: bool = False) -> Path:
    """Two matrix products, an element-wise op and an all-reduce, as a PyTorch-converted ET looks."""
    m = messages()

    def node(id_: int, name: str, type_: int, deps: list[int], **attrs: object) -> object:
        n = m["Node"](id=id_, name=name, type=type_, data_deps=deps)
        for key, value in attrs.items():
            a = n.attr.add(name=key)
            setattr(
                a,
                {"num_ops": "int64_val", "comm_type": "int64_val", "comm_size": "int64_val"}.get(key, "uint64_val"),
                value,
            )
        return n

    mm = node(1, "aten::mm", 4, [], num_ops=2 * 1024**3, tensor_size=3 * 2 * 1024**2)
    mm.inputs.shapes = "[[1024, 1024], [1024, 1024]]"
    relu = node(2, "aten::relu", 4, [1], num_ops=1024**2, tensor_size=4 * 1024**2)
    allreduce = node(3, "nccl:all_reduce", 7, [2], comm_type=0, comm_size=64 * 2**20)
    mm2 = node(4, "aten::mm", 4, [2], num_ops=2 * 1024**3, tensor_size=3 * 2 * 1024**2)
    mm2.inputs.shapes = "[[1024, 1024], [1024, 1024]]"
    done = node(5, "aten::add", 4, [3, 4], num_ops=1024**2, tensor_size=6 * 1024**2)
    data = encode(m["GlobalMetadata"](version="0.0.4"), mm, relu, allreduce, mm2, done)
    path.write_bytes(gzip.compress(data) if gzipped else data)
    return path


def test_a_collective_type_that_is_not_a_number_is_one_line(tmp_path: Path) -> None:
    # the fuzz test's find: a list-valued comm_type failed a dict lookup with a TypeError
    from archsim.errors import SpecError

    m = messages()
    node = m["Node"](id=1, name="nccl:all_reduce", type=7)
    node.attr.add(name="comm_type").int64_list.values.extend([0, 1])
    node.attr.add(name="comm_size").int64_val = 1024
    path = tmp_path / "bad.et"
    path.write_bytes(encode(m["GlobalMetadata"](version="0.0.4"), node))
    with pytest.raises(SpecError) as info:
        read_chakra(path)
    assert info.value.field == "nodes[0].comm_type"
    assert "unknown collective type [0, 1]" in info.value.line()


@pytest.mark.parametrize("gzipped", [False, True])
def test_official_et_reads_communication_nodes_as_comm_ops(tmp_path: Path, gzipped: bool) -> None:
    trace = read_chakra(_official_et(tmp_path / "rank0.et", gzipped))
    kinds = [op.kind for op in trace.ops]
    assert kinds == [OpKind.MATMUL, OpKind.ELEMENTWISE, OpKind.COMM, OpKind.MATMUL, OpKind.ELEMENTWISE]
    assert trace.ops[0].gemm is not None and trace.ops[0].gemm.m == 1024
    assert [op.comm for op in trace.ops if op.comm is not None] == [
        CommOp(CommKind.ALL_REDUCE, 64 * 2**20, CommGroup.ALL)
    ]
    assert trace.ops[2].deps == (1,)  # the all-reduce waits for the relu
    assert trace.ops[4].deps == (2, 3)  # the last add waits for the all-reduce and for mm2
    trace.check()
    alone = compute_only(trace)
    assert [op.name for op in alone.ops] == ["aten::mm", "aten::relu", "aten::mm", "aten::add"]
    assert alone.ops[3].deps == (1, 2)  # through the all-reduce: the relu; and mm2


def test_official_et_replays_on_a_system(tmp_path: Path, library: Library) -> None:
    path = _official_et(tmp_path / "rank0.et")
    recorder = TimelineRecorder()
    result = run_request(RunRequest.of("dgx-a100", str(path)), library, observers=[recorder])
    assert result.num_chips == 8 and result.data_parallel == 8
    assert [layer.name for layer in result.layers] == ["aten::mm", "aten::relu", "aten::mm", "aten::add"]
    (reduce,) = result.collectives
    assert (reduce.name, reduce.bytes) == ("nccl:all_reduce", 64 * 2**20)
    layers = {layer.name: layer for layer in result.layers}
    relu, add = layers["aten::relu"], layers["aten::add"]
    # the all-reduce follows the relu, overlaps the second product, and the last add waits for it
    assert reduce.start_s == pytest.approx(relu.end_s)
    assert add.start_s >= reduce.end_s
    mm2 = result.layers[2]
    assert mm2.start_s < reduce.end_s
    assert result.step_time_s >= reduce.end_s
    assert result.comm_s == pytest.approx(reduce.end_s - reduce.start_s)
    # alone on the links, the all-reduce costs what archsim collective says one NCCL call of that size costs
    (call,) = archsim.collective("dgx-a100", "all-reduce", [64 * 2**20], library=library)
    assert reduce.end_s - reduce.start_s == pytest.approx(call.time_s)
    assert any(link.bytes > 0 for link in result.links)
    assert len(recorder.timeline.chips) == 8
    assert any(span.name == "nccl:all_reduce" for _, spans in recorder.timeline.links for span in spans)


def test_a_chakra_et_and_a_built_in_workload_run_through_the_same_system_replay(
    tmp_path: Path, library: Library, monkeypatch: pytest.MonkeyPatch
) -> None:
    import archsim.run.data_parallel

    engine = archsim.run.data_parallel.data_parallel_step
    replayed: list[int] = []  # the comm ops of each step the data-parallel engine replays

    def spy(ops: Any, *args: Any, **kwargs: Any) -> Any:
        replayed.append(sum(op.kind is OpKind.COMM for op in ops))
        return engine(ops, *args, **kwargs)

    monkeypatch.setattr(archsim.run.data_parallel, "data_parallel_step", spy)
    path = _official_et(tmp_path / "rank0.et")
    from_et = run_request(RunRequest.of("dgx1", str(path)), library)
    builtin = run_request(RunRequest.of("dgx1", "resnet50", "train", 32), library)
    assert replayed == [1, len(builtin.collectives)]  # the ET's all-reduce; one per gradient bucket
    assert type(from_et) is type(builtin) is RunResult
    for result in (from_et, builtin):
        assert result.system == "dgx1" and result.num_chips == 8
        assert result.collectives and all(c.end_s > c.start_s for c in result.collectives)
        assert result.links and result.step_time_s >= max(c.end_s for c in result.collectives)
    assert [c.name for c in builtin.collectives] == [f"all-reduce b{k}" for k in range(len(builtin.collectives))]


def test_cli_replays_to_the_flat_json_and_refuses_a_chip_for_communication(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], library: Library
) -> None:
    path = _official_et(tmp_path / "rank0.et")
    assert main(["run", "dgx1", str(path), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert main(["run", "dgx1", "resnet50", "--batch", "2", "--json"]) == 0
    builtin = json.loads(capsys.readouterr().out)
    assert list(record) == list(builtin)  # the documented flat JSON of a run on a system
    assert record["num_chips"] == 8 and record["system"] == "dgx1"
    assert [c["name"] for c in record["collectives"]] == ["nccl:all_reduce"]
    assert [layer["name"] for layer in record["layers"]] == ["aten::mm", "aten::relu", "aten::mm", "aten::add"]
    expected = run_request(RunRequest.of("dgx1", str(path)), library).step_time_s
    assert record["step_time_s"] == expected
    assert main(["run", "v100", str(path)]) == 2
    err = capsys.readouterr().err
    assert "need a multi-chip system" in err and err.count("\n") == 1
    assert main(["run", "dgx1", str(path), "--pipeline-stages", "2"]) == 2
    assert "data parallel only" in capsys.readouterr().err


def test_communication_ops_are_refused_off_the_data_parallel_path(tmp_path: Path, library: Library) -> None:
    from archsim.errors import UsageError
    from archsim.run.replay import replay_on_target
    from archsim.run.target import resolve

    trace = read_chakra(_official_et(tmp_path / "rank0.et"))
    with pytest.raises(UsageError, match="multi-chip system"):  # a system of one chip has no links
        replay_on_target(resolve("v100", library), trace, library)
    with pytest.raises(UsageError, match="data parallel only"):  # microbatches: the pipelined path
        replay_on_target(resolve("dgx1", library), trace, library, microbatches=2)


def test_a_trace_with_communication_is_not_written_as_one_chip_s_file(tmp_path: Path) -> None:
    from archsim.errors import UsageError
    from archsim.workloads.traceio import dump_trace

    trace = read_chakra(_official_et(tmp_path / "rank0.et"))
    for write in (chakra_bytes, dump_trace):
        with pytest.raises(UsageError, match="communication ops"):
            write(trace)


def test_collectives_the_engine_has_no_algorithm_for_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    m = messages()
    node = m["Node"](id=1, name="nccl:reduce", type=7)
    node.attr.add(name="comm_type").int64_val = 1  # REDUCE
    node.attr.add(name="comm_size").int64_val = 1024
    path = tmp_path / "reduce.et"
    path.write_bytes(encode(m["GlobalMetadata"](version="0.0.4"), node))
    assert main(["run", "dgx1", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("archsim: error: dgx1: nccl:reduce: reduce collectives are not simulated")
    assert err.count("\n") == 1


def test_sends_receives_and_barriers_run_on_the_innermost_links(tmp_path: Path, library: Library) -> None:
    m = messages()
    send = m["Node"](id=1, name="send", type=5)
    send.attr.add(name="comm_size").int64_val = 2**20
    recv = m["Node"](id=2, name="recv", type=6, data_deps=[1])
    recv.attr.add(name="comm_size").int64_val = 2**20
    barrier = m["Node"](id=3, name="barrier", type=7, data_deps=[2])
    barrier.attr.add(name="comm_type").int64_val = 9
    path = tmp_path / "p2p.et"
    path.write_bytes(encode(m["GlobalMetadata"](version="0.0.4"), send, recv, barrier))
    result = run_request(RunRequest.of("dgx-a100", str(path)), library)
    assert [c.name for c in result.collectives] == ["send", "recv", "barrier"]
    system = library.system("dgx-a100")
    call = gradient_call(library, system, fabric_for(system, library, 1, "dgx-a100"), DEFAULT_BUCKET_BYTES)
    assert call is not None  # the links as NCCL's protocol sees them, as for pipeline sends
    fabric = call.fabric
    inner = fabric.tiers[0]
    sent, received, waited = result.collectives
    for record in (sent, received):  # alone on one link of the innermost tier: latency plus bytes over bandwidth
        assert record.end_s - record.start_s == pytest.approx(inner.latency_s + 2**20 / inner.link_bytes_per_s)
    assert received.start_s == pytest.approx(sent.end_s)
    assert waited.end_s - waited.start_s == pytest.approx(sum(t.latency_s for t in fabric.tiers))
    assert result.step_time_s == pytest.approx(waited.end_s)


def test_cli_export_then_run_and_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    et, yaml_file = tmp_path / "r.et", tmp_path / "r.yaml"
    assert main(["trace", "export", "resnet50", "--batch", "2", "--out", str(et)]) == 0
    assert capsys.readouterr().out == f"wrote resnet50 (infer, batch 2, 174 nodes) to {et}\n"
    assert main(["run", "v100", str(et), "--json"]) == 0
    from_et = json.loads(capsys.readouterr().out)
    assert main(["run", "v100", "resnet50", "--batch", "2", "--fusion", "none", "--json"]) == 0
    builtin = json.loads(capsys.readouterr().out)
    assert from_et["step_time_s"] == builtin["step_time_s"]
    assert main(["trace", "import", str(et), "--out", str(yaml_file)]) == 0
    assert read_trace(yaml_file) == read_chakra(et)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "cycle", "empty", "no-node"])
def test_malformed_or_truncated_et_is_one_line_exit_2(
    tmp_path: Path, library: Library, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    good = tmp_path / "good.et"
    write_chakra(build_trace("gemm:64x64x64", library, Mode.TRAIN, None, Precision.FP16, None), good)
    data = good.read_bytes()
    bad = tmp_path / "bad.et"
    if damage == "truncate":
        bad.write_bytes(data[: len(data) - 7])
    elif damage == "garbage":
        bad.write_bytes(b"\x05\xff\xff\xff\xff\xff" + data)
    elif damage == "empty":
        bad.write_bytes(b"")
    elif damage == "no-node":  # only the metadata: used to replay to a step time of zero, then divide by it
        bad.write_bytes(encode(messages()["GlobalMetadata"](version="0.0.4")))
    else:
        m = messages()
        a = m["Node"](id=1, name="a", type=4, data_deps=[2])
        b = m["Node"](id=2, name="b", type=4, data_deps=[1])
        bad.write_bytes(encode(m["GlobalMetadata"](version="0.0.4"), a, b))
    assert main(["run", "v100", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"archsim: error: {bad}") and err.count("\n") == 1
