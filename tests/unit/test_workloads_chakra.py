"""Chakra ETs: archsim's traces round-trip exactly; an ET made with the official schema replays on a system."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import archsim

pytest.importorskip("google.protobuf")

from archsim.chakra_replay import replay_chakra
from archsim.cli import main
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.workloads import build_trace, read_trace
from archsim.workloads.chakra import read_chakra, write_chakra
from archsim.workloads.trace import Mode, OpKind
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
    assert back.trace == trace
    assert back.comms == ()


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
def test_official_et_replays_on_a_system(tmp_path: Path, library: Library, gzipped: bool) -> None:
    chakra = read_chakra(_official_et(tmp_path / "rank0.et", gzipped))
    kinds = [op.kind for op in chakra.trace.ops]
    assert kinds == [OpKind.MATMUL, OpKind.ELEMENTWISE, OpKind.MATMUL, OpKind.ELEMENTWISE]
    assert chakra.trace.ops[0].gemm is not None and chakra.trace.ops[0].gemm.m == 1024
    assert [(c.collective, c.bytes) for c in chakra.comms] == [("all-reduce", 64 * 2**20)]
    assert chakra.trace.ops[3].deps == (1, 2)  # waits for the relu through the all-reduce, and for mm2
    run = replay_chakra(chakra, "dgx-a100", library)
    assert run.num_chips == 8
    assert run.comm_s > 0
    assert run.compute_s > 0
    timing = {n.name: n for n in run.nodes}
    # the all-reduce overlaps the second product; the last add waits for both
    assert timing["nccl:all_reduce"].start_s < timing["aten::add"].start_s
    assert run.step_time_s >= max(timing["nccl:all_reduce"].end_s, timing["aten::mm"].end_s)
    assert run.step_time_s < run.compute_s + run.comm_s + 1e-3
    # the all-reduce costs what archsim collective says one NCCL call of that size costs on the system
    (call,) = archsim.collective("dgx-a100", "all-reduce", [64 * 2**20], library=library)
    assert timing["nccl:all_reduce"].end_s - timing["nccl:all_reduce"].start_s == pytest.approx(call.time_s)


def test_cli_replays_and_refuses_a_chip_for_communication(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _official_et(tmp_path / "rank0.et")
    assert main(["run", "dgx1", str(path), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["num_chips"] == 8 and [n["kind"] for n in record["nodes"]].count("all-reduce") == 1
    assert main(["run", "v100", str(path)]) == 2
    assert "needs a multi-chip system" in capsys.readouterr().err


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
    assert read_trace(yaml_file) == read_chakra(et).trace


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
