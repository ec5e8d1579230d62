"""Trace files: exact round trip, the fast op-line reader, and bad files naming their field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from archsim.api import simulate
from archsim.errors import SpecError
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.workloads import build_trace, read_trace, write_trace
from archsim.workloads.trace import ConvShape, Gemm, Mode, Op, OpKind, Phase, Role, TensorAccess, Trace
from archsim.workloads.traceio import dump_trace, parse_trace_text


@pytest.fixture(scope="module")
def library() -> Library:
    return Library(use_env=False)


def small_trace(name: str = "t", op_name: str = "conv") -> Trace:
    conv = ConvShape(2, 3, 8, 8, 4, 3, 3, 1, 1)
    ops = (
        Op(
            op_name,
            OpKind.CONV,
            Phase.FORWARD,
            10,
            (TensorAccess("x", 6), TensorAccess("w", 4, Role.WEIGHT)),
            (TensorAccess("y", 8),),
            (),
            Gemm(1, 128, 4, 27),
            conv,
        ),
        Op("relu", OpKind.ELEMENTWISE, Phase.FORWARD, 3, (TensorAccess("y", 8),), (TensorAccess("z", 8),), (0,)),
    )
    return Trace(name, Mode.INFER, 2, Precision.FP16, ops, 4, 100, None, {"model": "tiny"})


@pytest.mark.parametrize(
    ("workload", "mode", "seq"),
    [
        ("resnet50", Mode.TRAIN, None),
        ("resnet50", Mode.INFER, None),
        ("bert-base", Mode.TRAIN, 64),
        ("bert-large", Mode.INFER, 384),
        ("gemm:64x32x16", Mode.TRAIN, None),
    ],
)
def test_round_trip_is_exact(library: Library, tmp_path: Path, workload: str, mode: Mode, seq: int | None) -> None:
    trace = build_trace(workload, library, mode, None, Precision.FP16, seq)
    path = tmp_path / "trace.yaml"
    write_trace(trace, path)
    again = read_trace(path)
    assert again == trace
    assert again.ops == trace.ops
    assert again.meta == trace.meta
    assert again.seq_len == trace.seq_len
    # the file reads the same through the full YAML parser as through the fast path
    assert yaml.safe_load(path.read_text(encoding="utf-8")) == parse_trace_text(path.read_text(encoding="utf-8"), "x")


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20))
def test_any_name_survives(tmp_path_factory: pytest.TempPathFactory, name: str, op_name: str) -> None:
    trace = small_trace(name, op_name)
    text = dump_trace(trace)
    path = tmp_path_factory.mktemp("names") / "t.yaml"
    path.write_text(text, encoding="utf-8")
    assert read_trace(path) == trace
    assert yaml.safe_load(text)["ops"][0]["name"] == op_name


def test_hand_written_block_yaml_is_read(tmp_path: Path) -> None:
    path = tmp_path / "hand.yaml"
    path.write_text(
        """schema_version: 1
kind: trace
name: hand
mode: infer
batch: 1
precision: bf16
parameters: 16
memory_bytes: 64
op_count: 2
ops:
  - name: mm
    kind: matmul
    phase: fwd
    flops: 128
    reads:
      - {name: a, bytes: 32}
      - {name: w, bytes: 32, role: weight}
    writes: [{name: c, bytes: 32}]
    gemm: {batch: 1, m: 4, n: 4, k: 4}
  - {name: act, kind: elementwise, phase: fwd, flops: 16,
     reads: [{name: c, bytes: 32}], writes: [{name: d, bytes: 32}], deps: [0]}
""",
        encoding="utf-8",
    )
    trace = read_trace(path)
    assert trace.precision is Precision.BF16
    assert trace.ops[0].gemm == Gemm(1, 4, 4, 4)
    assert trace.ops[0].reads[1].role is Role.WEIGHT
    assert trace.ops[1].deps == (0,)
    assert trace.ops[0].reads[0].role is Role.ACTIVATION


def write_data(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "bad.yaml"
    write_trace(small_trace(), path)
    text = path.read_text(encoding="utf-8")
    head = text.split("\nops:\n")[0]
    lines = [json.dumps(op) for op in data.pop("ops")]
    base = yaml.safe_load(head)
    base.update(data)
    path.write_text(yaml.safe_dump(base) + "ops:\n" + "".join(f"- {line}\n" for line in lines), encoding="utf-8")
    return path


def ops_data() -> list[dict]:
    return yaml.safe_load(dump_trace(small_trace()))["ops"]


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        (lambda ops: ops[0].pop("flops"), "ops[0].flops", "missing required field"),
        (lambda ops: ops[1].update(colour="red"), "ops[1].colour", "unknown field"),
        (lambda ops: ops[1].update(deps=[1]), "ops[1].deps", "not earlier"),
        (lambda ops: ops[0].update(deps=[-1]), "ops[0].deps[0]", "greater than or equal to 0"),
        (lambda ops: ops[0].update(flops="12"), "ops[0].flops", "valid integer"),
        (lambda ops: ops[0].update(flops=1.5), "ops[0].flops", "valid integer"),
        (lambda ops: ops[1].update(kind="fft"), "ops[1].kind", "conv2d"),
        (lambda ops: ops[0]["reads"][1].update(role="bias"), "ops[0].reads[1].role", "weight"),
        (lambda ops: ops[0]["reads"][0].update(bytes=-2), "ops[0].reads[0].bytes", "greater than or equal to 0"),
        (lambda ops: ops[0]["gemm"].pop("k"), "ops[0].gemm.k", "missing required field"),
        (lambda ops: ops[1].update(conv=ops[0]["conv"]), "ops[1]", "only on conv2d"),
        (lambda ops: ops[1].update(kind="comm"), "ops[1]", "communication is not written"),
    ],
)
def test_bad_ops_name_the_field(tmp_path: Path, change: object, field: str, problem: str) -> None:
    ops = ops_data()
    change(ops)  # type: ignore[operator]
    path = write_data(tmp_path, {"ops": ops})
    with pytest.raises(SpecError, match=problem) as err:
        read_trace(path)
    assert err.value.field == field
    assert err.value.source == str(path)


@pytest.mark.parametrize(
    ("update", "field"),
    [
        ({"mode": "serve"}, "mode"),
        ({"batch": 0}, "batch"),
        ({"precision": "fp4"}, "precision"),
        ({"schema_version": 2}, "schema_version"),
        ({"kind": "model"}, "kind"),
        ({"extra": 1}, "extra"),
        ({"memory_bytes": "1 GB"}, "memory_bytes"),
    ],
)
def test_bad_header_names_the_field(tmp_path: Path, update: dict, field: str) -> None:
    path = write_data(tmp_path, {"ops": ops_data(), **update})
    with pytest.raises(SpecError) as err:
        read_trace(path)
    assert err.value.field == field


def test_duplicate_key_in_an_op_line_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    write_trace(small_trace(), path)
    text = path.read_text(encoding="utf-8").replace('"flops": 3,', '"flops": 3, "flops": 4,')
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError, match="duplicate key"):
        read_trace(path)


def test_a_trace_of_no_op_is_refused(tmp_path: Path) -> None:
    # it used to load, and replaying it divided by a step time of zero (found by fuzzing)
    path = write_data(tmp_path, {"ops": []})
    with pytest.raises(SpecError) as err:
        read_trace(path)
    assert err.value.field == "ops"


def test_readme_trace_example_reads_and_runs_as_written(tmp_path: Path, library: Library) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    start = readme.index("```yaml", readme.index("## Trace files")) + len("```yaml")
    path = tmp_path / "tiny-mlp.yaml"
    path.write_text(readme[start : readme.index("```", start)], encoding="utf-8")
    trace = read_trace(path)
    assert [op.kind for op in trace.ops] == [OpKind.MATMUL, OpKind.ELEMENTWISE]
    # the stated parameters and bytes are the weights' (64 x 64 + 64 elements, fp16) and the input's
    assert trace.parameters == 64 * 64 + 64
    assert trace.memory_bytes == 2 * trace.parameters + trace.ops[0].reads[0].bytes
    result = simulate("v100", str(path), library=library)
    assert result.step_time_s > 0


def test_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file"):
        read_trace(tmp_path / "absent.yaml")
    (tmp_path / "empty.yaml").write_text("", encoding="utf-8")
    with pytest.raises(SpecError, match="empty"):
        read_trace(tmp_path / "empty.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n", encoding="utf-8")
    with pytest.raises(SpecError, match="mapping"):
        read_trace(tmp_path / "list.yaml")


def test_lone_surrogates_cannot_be_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="surrogate"):
        write_trace(small_trace("\ud800"), tmp_path / "t.yaml")


@pytest.mark.parametrize(
    "name", ["\x85", "a\u2028b", 'a"b\\c', "\x00\x1f", "\U0001f600", "\ufeffx", "\x7f", "tab\there", "\n"]
)
def test_awkward_names_survive(tmp_path: Path, name: str) -> None:
    trace = small_trace(name, name)
    path = tmp_path / "t.yaml"
    write_trace(trace, path)
    assert read_trace(path) == trace


def test_a_trace_file_states_its_op_count(tmp_path: Path, library: Library) -> None:
    trace = build_trace("resnet50", library, Mode.INFER, 1, Precision.FP16, None)
    path = tmp_path / "r.yaml"
    write_trace(trace, path)
    text = path.read_text(encoding="utf-8")
    assert f"\nop_count: {len(trace.ops)}\nops:\n" in text
    assert read_trace(path) == trace


@pytest.mark.parametrize("mode", [Mode.INFER, Mode.TRAIN])
def test_a_trace_cut_at_a_line_is_refused(tmp_path: Path, library: Library, mode: Mode) -> None:
    trace = build_trace("resnet50", library, mode, 1, Precision.FP16, None)
    path = tmp_path / "cut.yaml"
    write_trace(trace, path)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(lines[: len(lines) // 2]), encoding="utf-8")
    with pytest.raises(SpecError, match=f"says {len(trace.ops)} ops but the file holds") as err:
        read_trace(path)
    assert err.value.field == "op_count"


def _without_count(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    head, _, body = text.partition("\nop_count: ")
    path.write_text(head + "\n" + body.split("\n", 1)[1], encoding="utf-8")


def test_an_old_training_trace_ending_with_its_update_still_reads(tmp_path: Path, library: Library) -> None:
    trace = build_trace("resnet50", library, Mode.TRAIN, 1, Precision.FP16, None)
    path = tmp_path / "old.yaml"
    write_trace(trace, path)
    _without_count(path)
    assert "op_count" not in path.read_text(encoding="utf-8")
    assert read_trace(path) == trace  # the update op is last: nothing can have been cut after it
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(lines[:-1]), encoding="utf-8")  # cut before the update
    with pytest.raises(SpecError, match="cannot be proven complete") as err:
        read_trace(path)
    assert err.value.field == "op_count"


def test_an_old_inference_trace_is_refused_in_one_line(tmp_path: Path, library: Library) -> None:
    trace = build_trace("resnet50", library, Mode.INFER, 1, Precision.FP16, None)
    path = tmp_path / "old.yaml"
    write_trace(trace, path)
    _without_count(path)
    with pytest.raises(SpecError, match="add op_count") as err:
        read_trace(path)
    assert err.value.field == "op_count"
