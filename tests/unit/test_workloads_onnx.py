"""ONNX import: ResNet-50 and BERT-Base built here agree with the built-in traces; bad files fail in one line."""

from __future__ import annotations

import tracemalloc
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402 - after the optional-dependency skip

from archsim.api import simulate  # noqa: E402
from archsim.cli import main  # noqa: E402
from archsim.errors import LimitError, SpecError, UsageError  # noqa: E402
from archsim.spec.common import Precision  # noqa: E402
from archsim.spec.library import Library  # noqa: E402
from archsim.workloads import build_trace  # noqa: E402
from archsim.workloads.onnx_import import import_onnx  # noqa: E402
from archsim.workloads.trace import Gemm, Mode, OpKind, Trace  # noqa: E402
from tests.onnx_models import bert_base_model, resnet50_model, save, small_cnn_model  # noqa: E402


@pytest.fixture(scope="module")
def resnet_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save(resnet50_model(), tmp_path_factory.mktemp("onnx") / "resnet50.onnx")


@pytest.fixture(scope="module")
def bert_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save(bert_base_model(), tmp_path_factory.mktemp("onnx") / "bert-base.onnx")


def _numbers(trace: Trace) -> list[tuple[object, ...]]:
    """Everything about each op but its name and tensor names."""
    return [
        (op.kind, op.phase, op.flops, op.bytes_read, op.bytes_written, op.deps, op.gemm, op.conv) for op in trace.ops
    ]


@pytest.mark.parametrize("mode", [Mode.INFER, Mode.TRAIN])
def test_resnet50_agrees_with_the_builtin_op_for_op(resnet_file: Path, library: Library, mode: Mode) -> None:
    imported = import_onnx(resnet_file, mode, 4, Precision.FP16, optimizer="sgd-momentum")
    builtin = build_trace("resnet50", library, mode, 4, Precision.FP16, None)
    assert _numbers(imported) == _numbers(builtin)
    assert imported.parameters == builtin.parameters == 25_557_032
    assert imported.memory_bytes == builtin.memory_bytes
    assert imported.batch == 4
    assert imported.seq_len is None


def test_bert_base_flops_within_a_percent_and_differences_explained(bert_file: Path, library: Library) -> None:
    b, s, h = 8, 128, 768
    imported = import_onnx(bert_file, Mode.INFER, b, Precision.FP16, seq_len=s)
    builtin = build_trace("bert-base", library, Mode.INFER, b, Precision.FP16, s)
    assert abs(imported.flops / builtin.flops - 1) < 0.01
    assert imported.parameters == builtin.parameters == 108_893_186
    assert (imported.batch, imported.seq_len) == (b, s)
    # The differences, all from how the ONNX graph is written, none from the import:
    # 1. Q, K and V are three MatMul+Add (the built-in fuses them into one qkv product): +2 matmuls a layer,
    #    the same FLOPs, the hidden states read three times instead of once;
    # 2. the scale and the mask are Div and Add (the built-in's one scale_mask op): +1 op a layer, same FLOPs;
    # 3. the embedding sum is two Adds (one three-input op built in): +1 op, same FLOPs;
    # 4. the integer attention mask becomes additive by Cast, Sub, Mul (the built-in reads it ready-made):
    #    3 ops on B*S elements, 2*B*S FLOPs more.
    assert imported.flops - builtin.flops == 2 * b * s
    kinds_imported = Counter(op.kind for op in imported.ops)
    kinds_builtin = Counter(op.kind for op in builtin.ops)
    assert kinds_imported[OpKind.MATMUL] == kinds_builtin[OpKind.MATMUL] + 2 * 12
    assert kinds_imported[OpKind.ELEMENTWISE] == kinds_builtin[OpKind.ELEMENTWISE] + 12 + 1 + 3
    for kind in (OpKind.LAYERNORM, OpKind.SOFTMAX, OpKind.EMBEDDING):
        assert [op.flops for op in imported.ops if op.kind is kind] == [
            op.flops for op in builtin.ops if op.kind is kind
        ]
    matrix_flops = sum(op.flops for op in imported.ops if op.kind is OpKind.MATMUL)
    assert matrix_flops == sum(op.flops for op in builtin.ops if op.kind is OpKind.MATMUL)
    hidden_reads = 2 * 12 * Precision.FP16.nbytes(b * s * h)  # (1): x read by K and V as well
    scores = 2 * 12 * Precision.FP16.nbytes(b * 12 * s * s)  # (2)
    partial_sum = 2 * Precision.FP16.nbytes(b * s * h)  # (3)
    mask_ops = 14 * b * s  # (4): Cast reads 4 and writes 2 bytes per element, Sub and Mul read and write 2
    assert imported.ops[0].bytes == builtin.ops[0].bytes
    extra = hidden_reads + scores + partial_sum + mask_ops
    assert sum(op.bytes for op in imported.ops) - sum(op.bytes for op in builtin.ops) == extra


def test_bert_trains_with_a_loss_on_its_outputs(bert_file: Path) -> None:
    trace = import_onnx(bert_file, Mode.TRAIN, 2, Precision.FP16, seq_len=64)
    assert [op.name for op in trace.ops if op.kind is OpKind.LOSS] == ["loss", "loss.bwd"]
    assert trace.ops[-1].kind is OpKind.OPTIMIZER
    assert trace.meta["optimizer"] == "adam"
    trace.check()


def test_run_simulates_an_onnx_file_directly(resnet_file: Path, bert_file: Path) -> None:
    result = simulate("v100", str(resnet_file), batch=8)
    builtin = simulate("v100", "resnet50", batch=8)
    assert result.flops == builtin.flops
    assert result.step_time_s == pytest.approx(builtin.step_time_s, rel=1e-9)
    bert = simulate("a100", str(bert_file), mode="train", batch=2, seq_len=128)
    assert bert.step_time_s > 0


def test_symbolic_sequence_needs_seq_len(bert_file: Path, resnet_file: Path) -> None:
    with pytest.raises(UsageError, match="--seq-len"):
        import_onnx(bert_file, Mode.INFER, 2)
    with pytest.raises(UsageError, match="no symbolic sequence"):
        import_onnx(resnet_file, Mode.INFER, 2, seq_len=128)


def _tiny(
    nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto] | None = None, batch: object = 2
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=inits or [],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def test_unsupported_ops_are_listed_with_counts(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Hardmax", ["x"], ["a"]),
        helper.make_node("Hardmax", ["a"], ["b"]),
        helper.make_node("NonZero", ["b"], ["y"]),
    ]
    path = save(_tiny(nodes), tmp_path / "tiny.onnx")
    with pytest.raises(SpecError, match=r"unsupported ONNX ops: Hardmax x2, NonZero x1"):
        import_onnx(path)


def test_fixed_batch_cannot_be_rebound(tmp_path: Path) -> None:
    path = save(_tiny([helper.make_node("Relu", ["x"], ["y"])]), tmp_path / "relu.onnx")
    assert import_onnx(path).batch == 2
    with pytest.raises(UsageError, match="fixed at 2"):
        import_onnx(path, batch=4)


def test_import_cli_writes_a_trace_that_runs(
    tmp_path: Path, resnet_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r50.yaml"
    assert main(["trace", "import", str(resnet_file), "--batch", "2", "--out", str(out)]) == 0
    assert "174 ops" in capsys.readouterr().out
    assert main(["run", "v100", str(out), "--json"]) == 0


@pytest.mark.parametrize("cut", [0.0, 0.01, 0.5, 0.999])
def test_malformed_or_truncated_file_is_one_line_exit_2(
    tmp_path: Path, resnet_file: Path, capsys: pytest.CaptureFixture[str], cut: float
) -> None:
    data = resnet_file.read_bytes()
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(data[: int(len(data) * cut)] if cut else b"\x08\x07garbage not protobuf \xff\xff\xff")
    assert main(["run", "v100", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"archsim: error: {bad}") and err.count("\n") == 1
    assert main(["trace", "import", str(bad), "--out", str(tmp_path / "x.yaml")]) == 2
    assert not (tmp_path / "x.yaml").exists()


def test_a_name_that_is_not_utf8_is_one_line_exit_2(
    tmp_path: Path, resnet_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the fuzz test's find: protobuf returns an op type of invalid UTF-8 as bytes
    data = resnet_file.read_bytes()
    assert b"\x04Relu" in data
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(data.replace(b"\x04Relu", b"\x04\x80elu", 1))
    assert main(["trace", "import", str(bad), "--out", str(tmp_path / "x.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"archsim: error: {bad}: graph.node[")
    assert ".op_type: not valid UTF-8" in err
    assert not (tmp_path / "x.yaml").exists()


def test_a_shape_node_without_input_is_one_line(tmp_path: Path) -> None:
    # the fuzz test's find: folding shape arithmetic read the missing input with an IndexError
    model = bert_base_model(layers=1)
    shape = next(node for node in model.graph.node if node.op_type == "Shape")
    del shape.input[:]
    path = save(model, tmp_path / "no_input.onnx")
    with pytest.raises(SpecError) as info:
        import_onnx(path, Mode.TRAIN, 2, Precision.FP16, 16)
    assert "Shape" in info.value.line()
    assert "\n" not in info.value.line()


def test_a_constant_whose_dims_outgrow_its_data_is_refused_before_shape_inference(tmp_path: Path) -> None:
    # ONNX shape inference trusts a constant's dims: [2**40] over one value made it allocate without bound
    for dims, error, problem in (([2**40], LimitError, "outside 0 to"), ([1000], SpecError, "does not match")):
        axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
        axes.dims[0] = dims[0]
        nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["y"])]
        path = save(_tiny(nodes, [axes]), tmp_path / "axes.onnx")
        with pytest.raises(error, match=problem) as err:
            import_onnx(path)
        assert err.value.field == "initializer 'axes'"


def test_constant_folding_never_builds_a_large_tensor(tmp_path: Path) -> None:
    # ConstantOfShape of [4000, 4000] used to be evaluated (64 MB here, any size in general) before
    # its size was checked; now it is left to the importer, which prices it without building it
    shape = numpy_helper.from_array(np.array([4000, 4000], dtype=np.int64), "shape")
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["big"]), helper.make_node("Add", ["x", "big"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4000, 4000])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[shape],
    )
    path = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), tmp_path / "big.onnx")
    tracemalloc.start()
    try:
        trace = import_onnx(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [op.kind for op in trace.ops] == [OpKind.ELEMENTWISE]
    assert peak < 16 * 2**20


@pytest.mark.parametrize("form", ["node", "reciprocal", "div"])
def test_rms_norm_is_one_layernorm_op(tmp_path: Path, form: str) -> None:
    """An RMSNormalization node, or the chain an RMSNorm exports as, is one norm op: 4 FLOPs per element."""
    gain = numpy_helper.from_array(np.linspace(0.5, 1.5, 16, dtype=np.float32), "gain")
    scalars = [
        numpy_helper.from_array(np.array(v, dtype=np.float32), n) for n, v in [("two", 2), ("eps", 1e-6), ("one", 1)]
    ]
    axes = numpy_helper.from_array(np.array([-1], dtype=np.int64), "axes")
    if form == "node":
        nodes = [helper.make_node("RMSNormalization", ["x", "gain"], ["y"], axis=-1)]
    else:
        inverse = (
            helper.make_node("Reciprocal", ["root"], ["inv"])
            if form == "reciprocal"
            else helper.make_node("Div", ["one", "root"], ["inv"])
        )
        nodes = [
            helper.make_node("Pow", ["x", "two"], ["sq"]),
            helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
            helper.make_node("Add", ["ms", "eps"], ["var"]),
            helper.make_node("Sqrt", ["var"], ["root"]),
            inverse,
            helper.make_node("Mul", ["x", "inv"], ["scaled"]),
            helper.make_node("Mul", ["scaled", "gain"], ["y"]),
        ]
    model = _tiny(nodes, [gain, *scalars, axes], batch="n")
    model.opset_import[0].version = 23
    path = save(model, tmp_path / "rms.onnx")
    (op,) = import_onnx(path, batch=4).ops
    assert (op.kind, op.flops) == (OpKind.LAYERNORM, 4 * 4 * 16)
    assert [t.name for t in op.reads] == ["x", "gain"]
    trained = import_onnx(path, Mode.TRAIN, batch=4)
    norm = next(op for op in trained.ops if op.kind is OpKind.LAYERNORM)
    assert [t.bytes for t in norm.writes if t.name.endswith("saved_stats")] == [4 * 4]  # one fp32 statistic per row


@pytest.mark.parametrize("causal", [1, 0])
def test_attention_node_is_the_decoders_attention(tmp_path: Path, causal: int) -> None:
    """An opset-23 Attention node with grouped K/V heads: scores, scale (and mask), softmax, context."""
    b, heads, kv_heads, s, d = 2, 8, 2, 16, 32
    inputs = [
        helper.make_tensor_value_info("q", TensorProto.FLOAT, [b, heads, s, d]),
        *(helper.make_tensor_value_info(n, TensorProto.FLOAT, [b, kv_heads, s, d]) for n in ("k", "v")),
    ]
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=causal)
    graph = helper.make_graph([node], "attn", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)]), tmp_path / "attn.onnx")
    trace = import_onnx(path)
    group, scores = heads // kv_heads, b * heads * s * s
    assert [op.gemm for op in trace.ops if op.gemm] == [
        Gemm(b * kv_heads, group * s, s, d),
        Gemm(b * kv_heads, group * s, d, s),
    ]
    assert [op.flops for op in trace.ops if not op.gemm] == [(2 if causal else 1) * scores, 5 * scores]


@pytest.mark.parametrize("name", ["strides", "pads", "dilations", "group"])
def test_a_conv_attribute_of_the_wrong_type_is_one_line(tmp_path: Path, name: str) -> None:
    # the fuzz test's find: a list attribute whose type byte became INT (its ints kept, so ONNX's shape
    # inference still reads them) came back as the integer 0, and the conv failed with a TypeError
    model = small_cnn_model()
    conv = next(node for node in model.graph.node if node.op_type == "Conv")
    found = [attr for attr in conv.attribute if attr.name == name]
    attr = found[0] if found else conv.attribute.add()
    if not found:
        attr.CopyFrom(helper.make_attribute(name, [1, 1]))
    attr.type = onnx.AttributeProto.INT
    if name == "group":  # an integer attribute: 0 groups
        attr.CopyFrom(helper.make_attribute(name, 0))
    path = save(model, tmp_path / f"bad_{name}.onnx")
    with pytest.raises(SpecError) as info:
        import_onnx(path, Mode.INFER, 2, Precision.FP16, None)
    assert f"node 'conv': {name}: expected" in info.value.line()
    assert "\n" not in info.value.line()


def test_a_pool_window_of_the_wrong_type_is_one_line(tmp_path: Path) -> None:
    # the fuzz test's find: a MaxPool's kernel_shape whose type byte became FLOAT (its ints kept, so
    # ONNX's shape inference still reads them) came back as the float 0.0, and the window a TypeError
    model = small_cnn_model()
    pool = next(node for node in model.graph.node if node.op_type == "MaxPool")
    (attr,) = [attr for attr in pool.attribute if attr.name == "kernel_shape"]
    attr.type = onnx.AttributeProto.FLOAT
    path = save(model, tmp_path / "bad_pool.onnx")
    with pytest.raises(SpecError) as info:
        import_onnx(path, Mode.INFER, 2, Precision.FP16, None)
    assert "node 'pool': kernel_shape: expected" in info.value.line()
    assert "\n" not in info.value.line()


def test_a_graph_name_that_is_not_utf8_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the fuzz test's later find: a graph name of invalid UTF-8 reached the run's error bars as bytes
    from onnx import TensorProto, helper

    relu = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph(
        [relu],
        "good",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    data = helper.make_model(graph).SerializeToString()
    assert data.count(b"good") == 1
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(data.replace(b"good", b"g\xffod"))
    assert main(["run", "v100", str(bad)]) == 2
    captured = capsys.readouterr()
    assert (
        captured.out == ""
        and captured.err
        == f"archsim: error: {bad}: graph.name: not valid UTF-8 text (a corrupted or truncated file?)\n"
    )
