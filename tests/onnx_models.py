"""ONNX graphs of ResNet-50 v1.5 and BERT-Base built with ``onnx.helper``, without weights.

They follow what ``torch.onnx.export`` writes for torchvision's ``resnet50`` (Conv without bias,
BatchNormalization, Relu, MaxPool, Add, GlobalAveragePool, Flatten, Gemm) and for Hugging Face's
``BertForQuestionAnswering`` (separate Q, K and V MatMul + Add, Reshape/Transpose to heads, scale by
Div, additive mask from the integer attention mask, Softmax, LayerNormalization, Gelu, the span
head), with symbolic batch (``N``, ``batch``) and sequence (``seq``) dimensions. Every float weight is
an initializer whose data lives in an external file that is never written (a stub), so nothing
about the import may depend on weight values; small integer tensors (reshape shapes, position
ids) carry their data, as shape inference needs them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 20
"""Opset 20: LayerNormalization (17) and Gelu (20) are single ops."""


class _Graph:
    """Accumulates nodes and stub initializers."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.offset = 0

    def weight(self, name: str, *dims: int) -> str:
        """A float initializer whose data is in the (absent) file ``weights.bin``."""
        tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(dims))
        tensor.data_location = TensorProto.EXTERNAL
        length = 4 * int(np.prod(dims))
        for key, value in (("location", "weights.bin"), ("offset", str(self.offset)), ("length", str(length))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        self.offset += length
        self.inits.append(tensor)
        return name

    def const(self, name: str, values: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(values, name))
        return name

    def node(self, op: str, inputs: list[str], output: str, name: str = "", **attrs: object) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], name=name or output, **attrs))
        return output

    def model(
        self, name: str, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto]
    ) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="archsim-tests")
        model.ir_version = 9
        return model


def resnet50_model() -> onnx.ModelProto:
    """ResNet-50 v1.5 (stride on the 3x3 convolution), ImageNet 224x224, batch ``N``."""
    g = _Graph()

    def conv_bn(x: str, name: str, bn: str, cin: int, cout: int, k: int, stride: int) -> str:
        w = g.weight(f"{name}.weight", cout, cin, k, k)
        pad = k // 2
        y = g.node("Conv", [x, w], f"{name}.out", name, kernel_shape=[k, k], strides=[stride] * 2, pads=[pad] * 4)
        params = [g.weight(f"{bn}.{p}", cout) for p in ("weight", "bias", "running_mean", "running_var")]
        return g.node("BatchNormalization", [y, *params], f"{bn}.out", bn, epsilon=1e-5)

    x = conv_bn("input", "conv1", "bn1", 3, 64, 7, 2)
    x = g.node("Relu", [x], "relu.out", "relu")
    x = g.node("MaxPool", [x], "maxpool.out", "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512), strict=True)):
        cout = 4 * width
        for block in range(blocks):
            p = f"layer{stage + 1}.{block}"
            stride = 2 if stage > 0 and block == 0 else 1
            y = conv_bn(x, f"{p}.conv1", f"{p}.bn1", cin, width, 1, 1)
            y = g.node("Relu", [y], f"{p}.relu1.out", f"{p}.relu1")
            y = conv_bn(y, f"{p}.conv2", f"{p}.bn2", width, width, 3, stride)
            y = g.node("Relu", [y], f"{p}.relu2.out", f"{p}.relu2")
            y = conv_bn(y, f"{p}.conv3", f"{p}.bn3", width, cout, 1, 1)
            shortcut = x
            if block == 0:
                shortcut = conv_bn(x, f"{p}.downsample.0", f"{p}.downsample.1", cin, cout, 1, stride)
            y = g.node("Add", [y, shortcut], f"{p}.add.out", f"{p}.add")
            x = g.node("Relu", [y], f"{p}.relu3.out", f"{p}.relu3")
            cin = cout
    x = g.node("GlobalAveragePool", [x], "avgpool.out", "avgpool")
    x = g.node("Flatten", [x], "flatten.out", "flatten", axis=1)
    x = g.node("Gemm", [x, g.weight("fc.weight", 1000, 2048), g.weight("fc.bias", 1000)], "logits", "fc", transB=1)
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 224, 224])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 1000])]
    return g.model("resnet50", inputs, outputs)


def bert_base_model(layers: int = 12) -> onnx.ModelProto:
    """BERT-Base with the SQuAD span head, batch ``batch``, sequence ``seq``."""
    g = _Graph()
    h, heads, inner, vocab = 768, 12, 3072, 30522
    d = h // heads

    def linear(x: str, name: str, k: int, n: int) -> str:
        y = g.node("MatMul", [x, g.weight(f"{name}.weight", k, n)], f"{name}.matmul.out", f"{name}.matmul")
        return g.node("Add", [y, g.weight(f"{name}.bias", n)], f"{name}.out", f"{name}.bias_add")

    def layernorm(x: str, name: str) -> str:
        params = [g.weight(f"{name}.weight", h), g.weight(f"{name}.bias", h)]
        return g.node("LayerNormalization", [x, *params], f"{name}.out", name, axis=-1, epsilon=1e-12)

    heads_shape = g.const("heads_shape", np.array([0, 0, heads, d], dtype=np.int64))
    merged_shape = g.const("merged_shape", np.array([0, 0, h], dtype=np.int64))
    scale = g.const("scale", np.array(np.sqrt(d), dtype=np.float32))
    one = g.const("one", np.array(1.0, dtype=np.float32))
    big = g.const("minus_big", np.array(-10000.0, dtype=np.float32))
    # position ids: a constant [1, 512] sliced to the sequence length by shape arithmetic
    positions = g.const("position_ids", np.arange(512, dtype=np.int64).reshape(1, 512))
    g.node("Shape", ["input_ids"], "ids_shape")
    g.node("Gather", ["ids_shape", g.const("axis1", np.array([1], dtype=np.int64))], "seq_len")
    g.node("Slice", [positions, g.const("zero", np.array([0], dtype=np.int64)), "seq_len", "axis1"], "positions")

    word = g.node("Gather", [g.weight("embeddings.word_embeddings.weight", vocab, h), "input_ids"], "word", "word")
    pos = g.node("Gather", [g.weight("embeddings.position_embeddings.weight", 512, h), "positions"], "pos", "pos")
    typ = g.node("Gather", [g.weight("embeddings.token_type_embeddings.weight", 2, h), "token_type_ids"], "typ", "typ")
    x = g.node("Add", [word, typ], "emb.add1.out", "emb.add1")
    x = g.node("Add", [x, pos], "emb.add2.out", "emb.add2")
    x = layernorm(x, "embeddings.layernorm")
    # the additive mask: (1 - mask) * -10000, broadcast over heads and query positions
    m = g.node("Unsqueeze", ["attention_mask", g.const("axes12", np.array([1, 2], dtype=np.int64))], "mask4")
    m = g.node("Cast", [m], "mask.cast", "mask.cast", to=TensorProto.FLOAT)
    m = g.node("Sub", [one, m], "mask.sub", "mask.sub")
    mask = g.node("Mul", [m, big], "mask.add", "mask.mul")
    for i in range(layers):
        p = f"encoder.{i}"
        q, k, v = (linear(x, f"{p}.attention.{part}", h, h) for part in ("query", "key", "value"))
        q = g.node("Reshape", [q, heads_shape], f"{p}.q4")
        q = g.node("Transpose", [q], f"{p}.qt", perm=[0, 2, 1, 3])
        k = g.node("Reshape", [k, heads_shape], f"{p}.k4")
        k = g.node("Transpose", [k], f"{p}.kt", perm=[0, 2, 3, 1])
        v = g.node("Reshape", [v, heads_shape], f"{p}.v4")
        v = g.node("Transpose", [v], f"{p}.vt", perm=[0, 2, 1, 3])
        s = g.node("MatMul", [q, k], f"{p}.scores.out", f"{p}.scores")
        s = g.node("Div", [s, scale], f"{p}.scale.out", f"{p}.scale")
        s = g.node("Add", [s, mask], f"{p}.mask.out", f"{p}.mask")
        s = g.node("Softmax", [s], f"{p}.softmax.out", f"{p}.softmax", axis=-1)
        c = g.node("MatMul", [s, v], f"{p}.context.out", f"{p}.context")
        c = g.node("Transpose", [c], f"{p}.context.t", perm=[0, 2, 1, 3])
        c = g.node("Reshape", [c, merged_shape], f"{p}.context.merged")
        a = linear(c, f"{p}.attention.output.dense", h, h)
        a = g.node("Add", [a, x], f"{p}.attention.output.add.out", f"{p}.attention.output.add")
        a = layernorm(a, f"{p}.attention.output.layernorm")
        u = linear(a, f"{p}.intermediate.dense", h, inner)
        u = g.node("Gelu", [u], f"{p}.intermediate.gelu.out", f"{p}.intermediate.gelu")
        o = linear(u, f"{p}.output.dense", inner, h)
        o = g.node("Add", [o, a], f"{p}.output.add.out", f"{p}.output.add")
        x = layernorm(o, f"{p}.output.layernorm")
    logits = linear(x, "qa_outputs", h, 2)
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "seq"])
        for name in ("input_ids", "token_type_ids", "attention_mask")
    ]
    outputs = [helper.make_tensor_value_info(logits, TensorProto.FLOAT, ["batch", "seq", 2])]
    return g.model("bert-base", inputs, outputs)


def small_cnn_model() -> onnx.ModelProto:
    """A small CNN as ResNet-50's stem and head (Conv, BatchNormalization, Relu, MaxPool, Add, pooling,
    Flatten, Gemm) on 3x32x32 inputs, batch ``N``: a cheap seed for fuzzing the importer."""
    g = _Graph()
    w = g.weight("conv.weight", 8, 3, 3, 3)
    x = g.node("Conv", ["input", w], "conv.out", "conv", kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    params = [g.weight(f"bn.{p}", 8) for p in ("weight", "bias", "running_mean", "running_var")]
    x = g.node("BatchNormalization", [x, *params], "bn.out", "bn", epsilon=1e-5)
    y = g.node("Relu", [x], "relu.out", "relu")
    y = g.node("Add", [y, x], "add.out", "add")
    y = g.node("MaxPool", [y], "pool.out", "pool", kernel_shape=[2, 2], strides=[2, 2])
    y = g.node("GlobalAveragePool", [y], "gap.out", "gap")
    y = g.node("Flatten", [y], "flatten.out", "flatten", axis=1)
    y = g.node("Gemm", [y, g.weight("fc.weight", 10, 8), g.weight("fc.bias", 10)], "logits", "fc", transB=1)
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 32, 32])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])]
    return g.model("small-cnn", inputs, outputs)


def save(model: onnx.ModelProto, path: Path) -> Path:
    """Write ``model`` (its external weight file stays absent)."""
    path.write_bytes(model.SerializeToString())
    return path
