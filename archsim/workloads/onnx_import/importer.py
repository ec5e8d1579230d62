"""Node-by-node mapping of a bound, shape-inferred ONNX graph to archsim forward ops.

The conventions (which op becomes what, with which FLOPs and bytes) are in
:mod:`archsim.workloads.onnx_import`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from archsim.errors import LimitError, SpecError
from archsim.limits import MAX_DIM, MAX_INT
from archsim.spec.common import Precision
from archsim.workloads.graph import (
    ELEMENT_FLOPS,
    INT_BYTES,
    MASK_BYTES,
    STAT_BYTES,
    BackwardRule,
    ForwardGraph,
    GraphBuilder,
)
from archsim.workloads.onnx_import.attention import attention
from archsim.workloads.onnx_import.load import BOOL_TYPES, FLOAT_TYPES, TensorInfo, node_attrs
from archsim.workloads.onnx_import.norms import find_rms_norms, norm, rms_norm
from archsim.workloads.onnx_import.ops import (
    ELEMENTWISE_FLOPS,
    FREE,
    LABELS,
    MOVES,
    NORMS,
    POOLS,
    REDUCTIONS,
    SHAPE_OPS,
)
from archsim.workloads.trace import ConvShape, Gemm, Mode, OpKind, Role, TensorAccess


class Importer:
    """Turns the nodes of one bound, shape-inferred ONNX graph into forward ops."""

    def __init__(
        self,
        model: Any,
        infos: dict[str, TensorInfo],
        source: str,
        name: str,
        mode: Mode,
        precision: Precision,
        folded: set[str],
    ) -> None:
        self.graph = model.graph
        self.infos = infos
        self.source = source
        self.train = mode is Mode.TRAIN
        self.g = GraphBuilder(name, precision)
        self.alias: dict[str, str] = {}
        self.const: set[str] = set()
        self.weights: set[str] = set()
        self.skip: set[int] = set()
        self.consumers: Counter[str] = Counter()
        self.single_consumer: dict[str, int] = {}
        for init in self.graph.initializer:
            if init.name in folded:
                self.const.add(init.name)
            else:
                self._constant_or_weight(init.name, infos[init.name])
        for index, node in enumerate(self.graph.node):
            for name in node.input:
                if name:
                    self.consumers[name] += 1
                    self.single_consumer[name] = index
        for out in self.graph.output:
            self.consumers[out.name] += 1
        outputs = {out.name for out in self.graph.output}
        self.rms_norms, inner = find_rms_norms(self.graph, outputs, self.weights)
        self.skip.update(inner)

    def _constant_or_weight(self, name: str, info: TensorInfo) -> None:
        if info.elem_type in FLOAT_TYPES and info.dims is not None and math.prod(info.dims) > 1:
            self.weights.add(name)
        else:
            self.const.add(name)

    def info(self, name: str, node: Any) -> TensorInfo:
        """The shape of ``name``; an unknown shape is a SpecError naming the node."""
        found = self.infos.get(name)
        if found is None or found.dims is None:
            raise SpecError(
                self.source,
                f"node {node.name or node.op_type!r}",
                f"shape inference left the shape of {name!r} unknown; bind the symbolic dimensions or fix the model",
            )
        for dim in found.dims:
            if dim > MAX_DIM:
                raise LimitError(
                    self.source, f"tensor {name!r}", f"a dimension of {dim} exceeds the limit of {MAX_DIM}"
                )
        if found.elements * 8 > MAX_INT:
            raise LimitError(self.source, f"tensor {name!r}", f"{found.elements} elements exceed the limits")
        return found

    def canonical(self, name: str) -> str:
        """The tensor a free op's output is a view of."""
        while name in self.alias:
            name = self.alias[name]
        return name

    def size(self, info: TensorInfo, elements: int) -> int:
        """Bytes of ``elements`` elements of a tensor in the trace: the run's precision for floats."""
        if info.elem_type in FLOAT_TYPES:
            return self.g.size(elements)
        return elements * (MASK_BYTES if info.elem_type in BOOL_TYPES else INT_BYTES)

    def access(self, name: str, node: Any, touched: int | None = None) -> TensorAccess:
        """A read of tensor ``name`` (through views), as a weight when it is one."""
        canon = self.canonical(name)
        info = self.info(canon, node)
        if canon in self.weights:
            return self.g.weight(canon, info.elements, touched)
        return TensorAccess(canon, self.size(info, info.elements if touched is None else touched))

    def out(self, name: str, node: Any) -> TensorAccess:
        """A tensor written by an op."""
        info = self.info(name, node)
        return TensorAccess(name, self.size(info, info.elements))

    def reads(self, node: Any, names: Sequence[str] | None = None) -> list[TensorAccess]:
        """Reads of a node's inputs, constants left out."""
        return [self.access(n, node) for n in (node.input if names is None else names) if n and not self.is_const(n)]

    def is_const(self, name: str) -> bool:
        """True when ``name`` (through views) is a folded constant."""
        return self.canonical(name) in self.const

    def op_name(self, node: Any, index: int) -> str:
        """The op's name: the node's, else its type and index."""
        return node.name or f"{node.op_type}_{index}"

    def int_list(self, node: Any, key: str, value: Any, count: int, least: int = 1) -> list[int]:
        """Attribute ``key`` of ``node`` (its ``value``, or the default) as ``count`` integers of at least ``least``.

        Anything else is a SpecError naming the node and the attribute.
        """
        if (
            not isinstance(value, list)
            or len(value) != count
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= least for v in value)
        ):
            raise SpecError(
                self.source,
                f"node {node.name or node.op_type!r}: {key}",
                f"expected {count} integer{'s' if count != 1 else ''} >= {least}, got {value!r}",
            )
        return list(value)

    # -- node kinds ------------------------------------------------------------------------------

    def conv(self, index: int, node: Any) -> None:
        """``Conv`` -> ``conv2d`` with its shape when regular, else an implicit-GEMM ``matmul``."""
        attrs = node_attrs(node)
        x, w = self.info(node.input[0], node), self.info(node.input[1], node)
        y = self.info(node.output[0], node)
        spatial = len(w.dims or ()) - 2
        kernel = tuple(w.dims or ())[2:]
        group = self.int_list(node, "group", [attrs.get("group", 1)], 1)[0]
        strides = self.int_list(node, "strides", attrs.get("strides", [1] * spatial), spatial)
        dilations = self.int_list(node, "dilations", attrs.get("dilations", [1] * spatial), spatial)
        pads = self.int_list(node, "pads", attrs.get("pads", [0] * 2 * spatial), 2 * spatial, least=0)
        assert x.dims is not None
        assert w.dims is not None
        assert y.dims is not None
        n, c = x.dims[0], x.dims[1]
        k = w.dims[0]
        outputs = math.prod(y.dims[2:])
        gemm = Gemm(group, n * outputs, k // group, (c // group) * math.prod(kernel))
        reads = self.reads(node)
        out = self.out(node.output[0], node)
        auto_pad = attrs.get("auto_pad", "NOTSET")
        if auto_pad not in ("NOTSET", "VALID") and spatial == 2:
            pads = [max(0, (y.dims[2 + i] - 1) * strides[i] + kernel[i] - x.dims[2 + i]) // 2 for i in range(2)] * 2
        regular = (
            spatial == 2
            and group == 1
            and all(d == 1 for d in dilations)
            and len(set(strides)) == 1
            and len(set(pads)) == 1
        )
        if regular:
            shape = ConvShape(n, c, x.dims[2], x.dims[3], k, kernel[0], kernel[1], strides[0], pads[0])
            if (shape.p, shape.q) == tuple(y.dims[2:]):
                self.g.matmul(self.op_name(node, index), gemm, reads, out, conv=shape)
                return
        self.g.matmul(self.op_name(node, index), gemm, reads, out)

    def gemm(self, index: int, node: Any) -> None:
        """``Gemm`` -> ``matmul``, with ``transA`` / ``transB``."""
        attrs = node_attrs(node)
        a, b = self.info(node.input[0], node), self.info(node.input[1], node)
        assert a.dims is not None
        assert b.dims is not None
        m, k = (a.dims[1], a.dims[0]) if attrs.get("transA", 0) else (a.dims[0], a.dims[1])
        n = b.dims[0] if attrs.get("transB", 0) else b.dims[1]
        self.g.matmul(self.op_name(node, index), Gemm(1, m, n, k), self.reads(node), self.out(node.output[0], node))

    def matmul(self, index: int, node: Any) -> None:
        """``MatMul`` -> ``matmul`` (a layer or a batched product), a following bias ``Add`` folded in."""
        a, b = self.info(node.input[0], node), self.info(node.input[1], node)
        assert a.dims is not None
        assert b.dims is not None
        a_dims = a.dims if len(a.dims) > 1 else (1, *a.dims)
        b_dims = b.dims if len(b.dims) > 1 else (*b.dims, 1)
        k, n = b_dims[-2], b_dims[-1]
        if len(b_dims) == 2:  # a layer: fold the left operand's leading dimensions into m
            gemm = Gemm(1, math.prod(a_dims[:-1]), n, k)
        else:
            batch_dims = [max(x, y) for x, y in zip(_pad(a_dims[:-2], len(b_dims) - 2), b_dims[:-2], strict=False)]
            gemm = Gemm(math.prod(batch_dims), a_dims[-2], n, k)
        reads = self.reads(node)
        output = node.output[0]
        follower = self._bias_add(node, output, n)
        if follower is not None:
            bias_index, bias = follower
            self.skip.add(bias_index)
            reads.append(self.access(bias, node))
            output = self.graph.node[bias_index].output[0]
        self.g.matmul(self.op_name(node, index), gemm, reads, self.out(output, node))

    def _bias_add(self, node: Any, output: str, n: int) -> tuple[int, str] | None:
        """The index and bias of an ``Add`` that only adds a length-``n`` weight vector to ``output``."""
        if self.consumers[output] != 1:
            return None
        follower_index = self.single_consumer.get(output)
        if follower_index is None:
            return None
        follower = self.graph.node[follower_index]
        if follower.op_type != "Add" or len(follower.input) != 2:
            return None
        other = follower.input[1] if follower.input[0] == output else follower.input[0]
        info = self.infos.get(other)
        if self.canonical(other) not in self.weights or info is None or info.dims != (n,):
            return None
        return follower_index, other

    def batchnorm(self, index: int, node: Any) -> None:
        """``BatchNormalization`` -> ``batchnorm``; running statistics are state."""
        g = self.g
        x = self.access(node.input[0], node)
        info = self.info(node.input[0], node)
        c = info.dims[1] if info.dims is not None and len(info.dims) > 1 else 1
        elements = info.elements
        name = self.op_name(node, index)
        gamma, beta = self.access(node.input[1], node), self.access(node.input[2], node)
        for stat_name in node.input[3:5]:  # running mean and variance are state, not parameters
            self.weights.discard(stat_name)
            g.params.pop(stat_name, None)
        running = TensorAccess(f"{name}.running_stats", 2 * c * STAT_BYTES, Role.STATE)
        out = self.out(node.output[0], node)
        if not self.train:
            g.add(name, OpKind.BATCHNORM, ELEMENT_FLOPS["norm_infer"][0] * elements, (x, gamma, beta, running), (out,))
            return
        stats = TensorAccess(f"{name}.saved_stats", 2 * c * STAT_BYTES)
        fwd, bwd = ELEMENT_FLOPS["norm"]
        rule = BackwardRule((x.name, gamma.name, stats.name), bwd * elements)
        g.add(name, OpKind.BATCHNORM, fwd * elements, (x, gamma, beta, running), (out, stats, running), rule=rule)

    def elementwise(self, index: int, node: Any) -> None:
        """Activations and element-wise arithmetic -> ``elementwise`` (``softmax``)."""
        fwd, bwd, saved = ELEMENTWISE_FLOPS[node.op_type]
        out = self.out(node.output[0], node)
        elements = self.info(node.output[0], node).elements
        reads = self.reads(node)
        if not reads:  # computed from constants only: folded
            self.const.add(node.output[0])
            return
        extra = max(1, len([n for n in node.input if n]) - 1) if node.op_type == "Sum" else 1
        kind = OpKind.SOFTMAX if node.op_type in ("Softmax", "LogSoftmax") else OpKind.ELEMENTWISE
        keep = {"in": [t.name for t in reads], "out": [out.name], "none": []}[saved]
        rule = BackwardRule(tuple(keep), bwd * elements)
        self.g.add(self.op_name(node, index), kind, fwd * extra * elements, reads, (out,), rule=rule)

    def reduction(self, index: int, node: Any) -> None:
        """Reductions -> ``elementwise``, one FLOP per input element."""
        reads = self.reads(node)
        if not reads:
            self.const.add(node.output[0])
            return
        elements = self.info(node.input[0], node).elements
        out = self.out(node.output[0], node)
        self.g.add(
            self.op_name(node, index), OpKind.ELEMENTWISE, elements, reads, (out,), rule=BackwardRule((), elements)
        )

    def move(self, index: int, node: Any) -> None:
        """Data movement -> a 0-FLOP ``elementwise`` op with its bytes."""
        reads = self.reads(node)
        if not reads:
            for name in node.output:
                self.const.add(name)
            return
        outs = [self.out(n, node) for n in node.output if n]
        moved = self.g.precision.elements_in(sum(t.bytes for t in outs))
        flops = self.info(node.input[0], node).elements if node.op_type == "TopK" else 0  # the router's compares
        self.g.add(self.op_name(node, index), OpKind.ELEMENTWISE, flops, reads, outs, rule=BackwardRule((), moved))

    def pool(self, index: int, node: Any) -> None:
        """Pools -> ``pool``."""
        x = self.info(node.input[0], node)
        outputs = self.info(node.output[0], node).elements
        reads = self.reads(node)
        out = self.out(node.output[0], node)
        name = self.op_name(node, index)
        if node.op_type.startswith("Global"):
            flops = x.elements
            rule = BackwardRule((), x.elements)
        else:
            shape = node_attrs(node).get("kernel_shape", [1])
            window = math.prod(self.int_list(node, "kernel_shape", shape, len(shape) if isinstance(shape, list) else 1))
            if node.op_type == "MaxPool":
                flops, rule = (window - 1) * outputs, BackwardRule((reads[0].name, out.name), outputs)
            else:
                flops, rule = window * outputs, BackwardRule((), x.elements)
        self.g.add(name, OpKind.POOL, flops, reads, (out,), rule=rule)

    def gather(self, index: int, node: Any) -> None:
        """``Gather`` -> ``embedding`` from a weight, else a 0-FLOP copy."""
        data, indices = node.input[0], node.input[1]
        out = self.out(node.output[0], node)
        elements = self.info(node.output[0], node).elements
        if self.is_const(data) and self.is_const(indices):
            self.const.add(node.output[0])
            return
        picked = self.info(indices, node).elements
        reads: list[TensorAccess] = []
        if not self.is_const(indices):
            reads.append(self.access(indices, node))
        name = self.op_name(node, index)
        canon = self.canonical(data)
        if canon in self.weights:
            info = self.info(canon, node)
            assert info.dims is not None
            row = math.prod(info.dims[1:]) if len(info.dims) > 1 else 1
            table = self.g.weight(canon, info.elements, min(info.dims[0], picked) * row)
            saved = tuple(t.name for t in reads)
            self.g.add(name, OpKind.EMBEDDING, 0, (*reads, table), (out,), rule=BackwardRule(saved, elements))
            return
        rows = TensorAccess(canon, out.bytes)  # only the gathered part of the activation is read
        fwd, bwd = ELEMENT_FLOPS["gather"]
        rule = BackwardRule(tuple(t.name for t in reads), bwd * elements)
        self.g.add(name, OpKind.ELEMENTWISE, fwd * elements, (rows, *reads), (out,), rule=rule)

    def dropout(self, index: int, node: Any) -> None:
        """``Dropout`` -> a dropout op with a 1-byte mask in training, a view in inference."""
        if not self.train:
            self.alias[node.output[0]] = node.input[0]
            return
        x = self.access(node.input[0], node)
        elements = self.info(node.output[0], node).elements
        out = self.out(node.output[0], node)
        mask_name = node.output[1] if len(node.output) > 1 and node.output[1] else f"{out.name}.mask"
        mask = TensorAccess(mask_name, elements * MASK_BYTES)
        self.g.elementwise(
            self.op_name(node, index), "dropout", (x,), out, elements, (mask.name,), extra_writes=(mask,)
        )

    def free(self, node: Any) -> None:
        """A view: the output is the input (or a constant when the input is one)."""
        if self.is_const(node.input[0]):
            self.const.update(n for n in node.output if n)
        else:
            self.alias[node.output[0]] = node.input[0]

    def run(self) -> list[str]:
        """Import every node; returns the unsupported op types (one entry per node)."""
        handlers: dict[str, Callable[[int, Any], None]] = {
            "Conv": self.conv,
            "Gemm": self.gemm,
            "MatMul": self.matmul,
            "BatchNormalization": self.batchnorm,
            "Gather": self.gather,
            "Dropout": self.dropout,
            "Attention": partial(attention, self),
            **dict.fromkeys(NORMS, partial(norm, self)),
            **dict.fromkeys(ELEMENTWISE_FLOPS, self.elementwise),
            **dict.fromkeys(REDUCTIONS, self.reduction),
            **dict.fromkeys(MOVES, self.move),
            **dict.fromkeys(POOLS, self.pool),
        }
        unsupported: list[str] = []
        for index, node in enumerate(self.graph.node):
            if index in self.skip:
                continue
            if index in self.rms_norms:
                rms_norm(self, index, node, *self.rms_norms[index])
                continue
            domain = node.domain if node.domain not in ("", "ai.onnx") else ""
            op_type = node.op_type if not domain else f"{domain}.{node.op_type}"
            if node.op_type in SHAPE_OPS and not domain:
                if node.op_type == "Constant" and node.output[0] in self.infos:
                    self._constant_or_weight(node.output[0], self.infos[node.output[0]])
                elif node.op_type != "Range" or all(self.is_const(n) for n in node.input if n):
                    self.const.update(n for n in node.output if n)
                else:
                    unsupported.append(op_type)
                continue
            if node.op_type in FREE and not domain:
                self.free(node)
                continue
            handler = handlers.get(node.op_type) if not domain or node.op_type == "FastGelu" else None
            if handler is None:
                unsupported.append(op_type)
                continue
            if all(self.is_const(n) for n in node.input if n) and node.op_type not in ("Conv", "Gemm", "MatMul"):
                self.const.update(n for n in node.output if n)
                continue
            handler(index, node)
        return unsupported

    def finish(self) -> ForwardGraph:
        """The forward graph, with a softmax-cross-entropy loss over the float outputs in training."""
        g = self.g
        if not self.train:
            return g.graph()
        logits: list[TensorAccess] = []
        rows = elements = 0
        for output in self.graph.output:
            canon = self.canonical(output.name)
            info = self.infos.get(output.name)
            if info is None or info.dims is None or info.elem_type not in FLOAT_TYPES or canon in self.const:
                continue
            logits.append(TensorAccess(canon, g.size(info.elements)))
            elements += info.elements
            rows += info.elements // (info.dims[-1] if info.dims and info.dims[-1] else 1)
        if not logits:
            raise SpecError(self.source, "graph.output", "training needs a float output to put the loss on")
        labels = TensorAccess(LABELS, rows * INT_BYTES)
        loss, rule = g.loss_op("loss", (*logits, labels), elements, (*(t.name for t in logits), labels.name))
        return g.graph(loss, rule)


def _pad(dims: Sequence[int], rank: int) -> list[int]:
    """``dims`` left-padded with ones to ``rank`` (numpy broadcasting)."""
    return [1] * (rank - len(dims)) + list(dims)
