"""ONNX models -> forward graphs (and traces), with shapes from ONNX shape inference; no weights needed.

:func:`import_onnx` reads a ``.onnx`` file with the ``onnx`` package (an optional dependency:
``pip install 'archsim[onnx]'``), binds its symbolic dimensions, runs ONNX shape inference and turns
each node into archsim ops with the conventions of :mod:`archsim.workloads.graph`, so that the
training derivation (:mod:`archsim.workloads.training`) applies to it as to the built-in models.

Binding: a symbolic (or unset) dimension on axis 0 of a graph input is the batch (``batch``; None
keeps a fixed batch, or binds a symbolic one to 1); any other symbolic dimension is the sequence
length (``seq_len``, required when there is one). A fixed dimension cannot be rebound.

Weights: float initializers (and float ``Constant`` outputs) of more than one element are trainable
weights (:attr:`Role.WEIGHT`, counted in the parameters); their data is never read, so a model whose
initializers are external files that are absent, or stripped, imports. Integer initializers, scalars,
and everything computed only from them and from ``Shape`` (shape arithmetic) are constants: folded
away, never ops and never reads.

Ops, with their FLOPs (a MAC is 2; per-element counts are modelling assumptions, as in
:data:`~archsim.workloads.graph.ELEMENT_FLOPS`):

* ``Conv`` -> ``conv2d`` with its :class:`~archsim.workloads.trace.ConvShape` when 2-D, ungrouped,
  undilated, with equal strides and equal pads; any other convolution is a ``matmul`` with the
  implicit-GEMM view (``batch = groups``, ``m = N*P*Q``, ``n = K/groups``, ``k = C/groups*R*S``).
  A bias is a third read.
* ``Gemm``, ``MatMul`` -> ``matmul``. A right operand without batch dimensions folds the left
  operand's leading dimensions into ``m`` (a linear layer); otherwise the broadcast batch dimensions
  are the Gemm ``batch`` (attention's ``Q @ K^T`` and ``probs @ V``). A ``MatMul`` whose only consumer
  is an ``Add`` of a 1-D weight is one op with the bias as its third read, as the built-in linear layers.
* ``BatchNormalization`` -> ``batchnorm`` (5 FLOPs per element in training, with batch statistics
  written for backward; 2 in inference); the running mean and variance are one fp32 state tensor.
  ``LayerNormalization``, ``InstanceNormalization``, ``GroupNormalization``, ``RMSNormalization``
  -> ``layernorm`` (5 per element; training writes two fp32 statistics per normalized row).
* Activations, element-wise arithmetic, comparisons and reductions -> ``elementwise`` (``Softmax``,
  ``LogSoftmax``: ``softmax``) at :data:`ELEMENTWISE_FLOPS` per output element (per input element
  for reductions).
* ``MaxPool`` (``R*S - 1`` compares per output), ``AveragePool`` (``R*S`` per output),
  ``GlobalAveragePool`` / ``GlobalMaxPool`` (one per input element) -> ``pool``.
* ``Gather`` from a weight -> ``embedding`` (no FLOPs; reads only the rows it gathers, and the
  indices unless they are constant, as positions are); from an activation -> a 0-FLOP copy.
* Data movement (``Concat``, ``Split``, ``Slice``, ``Pad``, ``Tile``, ``Cast``, ``Where``...) -> a
  0-FLOP ``elementwise`` op with its bytes; ``Resize`` 1 FLOP per output.
* Free, no op (the output is the input under another name): ``Reshape``, ``Flatten``, ``Squeeze``,
  ``Unsqueeze``, ``Transpose``, ``Identity``, ``Expand``, and ``Dropout`` in inference (in training
  it is a dropout op writing a 1-byte mask).

Any other op is unsupported: the import fails naming every unsupported op type with its count. In
training a softmax-cross-entropy loss over the graph's float outputs is appended (an ONNX model
carries no loss), with int32 labels, one per output row, as the built-in models do.

Bytes are ``elements * precision.bytes`` for float tensors whatever the file's element type, 4 for
integer tensors (ids), 1 for booleans. Limits (:mod:`archsim.limits`): the file at most
:data:`~archsim.limits.MAX_MODEL_FILE_BYTES`, at most :data:`~archsim.limits.MAX_TRACE_OPS` nodes,
every Gemm dimension at most :data:`~archsim.limits.MAX_DIM` and every count at most
:data:`~archsim.limits.MAX_INT`. A file that is not a valid ONNX model (malformed, truncated,
unsorted, with undefined inputs or no opset) is a :class:`~archsim.errors.SpecError`.
"""

from __future__ import annotations

import math
import os
import stat
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from archsim.errors import LimitError, SpecError, UsageError
from archsim.limits import MAX_DIM, MAX_INT, MAX_MODEL_FILE_BYTES, check_trace_ops
from archsim.spec.common import Precision
from archsim.spec.model import Optimizer
from archsim.workloads.graph import (
    ELEMENT_FLOPS,
    INT_BYTES,
    MASK_BYTES,
    STAT_BYTES,
    BackwardRule,
    ForwardGraph,
    GraphBuilder,
)
from archsim.workloads.memory import finish_trace
from archsim.workloads.trace import ConvShape, Gemm, Mode, OpKind, Role, TensorAccess, Trace

SUFFIX = ".onnx"
"""Workload names ending with this are ONNX files."""
DEFAULT_OPTIMIZER = Optimizer.ADAM
"""Optimizer of an imported model's training step (ONNX files do not say; Adam is the common one)."""

ELEMENTWISE_FLOPS: Mapping[str, tuple[int, int, str]] = {
    # op type: (forward, backward FLOPs per output element, what the backward saves: in, out or none)
    "Relu": (*ELEMENT_FLOPS["relu"], "out"),
    "Gelu": (*ELEMENT_FLOPS["gelu"], "in"),
    "FastGelu": (*ELEMENT_FLOPS["gelu"], "in"),
    "Tanh": (*ELEMENT_FLOPS["tanh"], "out"),
    "Sigmoid": (4, 3, "out"),
    "HardSigmoid": (2, 1, "in"),
    "HardSwish": (4, 3, "in"),
    "LeakyRelu": (2, 1, "in"),
    "PRelu": (2, 2, "in"),
    "Elu": (3, 2, "in"),
    "Selu": (4, 2, "in"),
    "Softplus": (3, 3, "in"),
    "Mish": (8, 12, "in"),
    "Erf": (8, 4, "in"),
    "Clip": (2, 1, "in"),
    "Add": (*ELEMENT_FLOPS["add"], "none"),
    "Sub": (1, 0, "none"),
    "Sum": (1, 0, "none"),  # per extra input
    "Mul": (1, 2, "in"),
    "Div": (1, 3, "in"),
    "Pow": (1, 3, "in"),
    "Max": (1, 1, "in"),
    "Min": (1, 1, "in"),
    "Mean": (1, 1, "none"),
    "Sqrt": (1, 2, "out"),
    "Reciprocal": (1, 2, "out"),
    "Exp": (1, 1, "out"),
    "Log": (1, 1, "in"),
    "Neg": (1, 1, "none"),
    "Abs": (1, 1, "in"),
    "Floor": (1, 0, "none"),
    "Ceil": (1, 0, "none"),
    "Round": (1, 0, "none"),
    "Sign": (1, 0, "none"),
    "Equal": (1, 0, "none"),
    "Less": (1, 0, "none"),
    "LessOrEqual": (1, 0, "none"),
    "Greater": (1, 0, "none"),
    "GreaterOrEqual": (1, 0, "none"),
    "Not": (1, 0, "none"),
    "And": (1, 0, "none"),
    "Or": (1, 0, "none"),
    "Softmax": (*ELEMENT_FLOPS["softmax"], "out"),
    "LogSoftmax": (*ELEMENT_FLOPS["softmax"], "out"),
    "Resize": (1, 1, "none"),
}
"""(forward, backward) FLOPs per output element of the element-wise ops, and the tensor the
backward reads besides the output gradient; modelling assumptions (one FLOP per multiply, add,
compare, exp or divide), the built-in models' where they have the op."""

REDUCTIONS = frozenset(
    {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceSumSquare", "ArgMax"}
)
"""Reductions: one FLOP per input element; the backward broadcasts, one per input element."""
MOVES = frozenset(
    {"Concat", "Split", "Slice", "Pad", "Tile", "Cast", "Where", "GatherElements", "ScatterND", "CumSum", "TopK"}
)
"""Data movement: no FLOPs, every tensor read and written once."""
FREE = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Identity", "Expand"})
"""Views: no op; the output is the input under another name."""
SHAPE_OPS = frozenset({"Shape", "Size", "Constant", "ConstantOfShape", "Range", "EyeLike"})
"""Ops whose outputs are constants once the shapes are bound (folded, like the shape arithmetic they feed)."""
NORMS = frozenset({"LayerNormalization", "InstanceNormalization", "GroupNormalization", "RMSNormalization"})
POOLS = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"})
SUPPORTED = frozenset(
    {"Conv", "Gemm", "MatMul", "BatchNormalization", "Gather", "Dropout"}
    | NORMS
    | set(ELEMENTWISE_FLOPS)
    | REDUCTIONS
    | MOVES
    | POOLS
    | FREE
    | SHAPE_OPS
)
"""Every ONNX op type (default domain) the importer turns into ops, folds or treats as a view."""
LABELS = "labels"
"""Name of the int32 label tensor of the training loss."""

_FLOAT_TYPES = frozenset({1, 10, 11, 16, 17, 18, 19, 20, 21, 22, 23})  # float, fp16, double, bf16, fp8 and fp4 types
_BOOL_TYPES = frozenset({2, 3, 9})  # uint8, int8, bool: one byte


def _onnx() -> Any:
    """The ``onnx`` module, or a UsageError saying how to install it."""
    try:
        import onnx
    except ImportError:
        raise UsageError(
            "onnx", "", "reading ONNX models needs the onnx package: pip install 'archsim[onnx]'"
        ) from None
    return onnx


def is_onnx(workload: str) -> bool:
    """True when ``workload`` names an ONNX file (``*.onnx``)."""
    return workload.lower().endswith(SUFFIX)


def read_model_bytes(path: Path, source: str, limit: int = MAX_MODEL_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; anything else is a SpecError."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise SpecError(source, "", "is a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file")
        if info.st_size > limit:
            raise SpecError(source, "", f"file is {info.st_size} bytes, larger than the {limit} allowed")
        return path.read_bytes()
    except FileNotFoundError:
        raise SpecError(source, "", "no such file") from None
    except OSError as err:
        raise SpecError(source, "", f"cannot read: {err.strerror or err}") from None
    except ValueError:
        raise SpecError(source, "", "not a valid file name") from None


def load_onnx(path: str | os.PathLike[str]) -> Any:
    """Parse an ONNX file into a ``ModelProto`` without loading external data; bad files are SpecErrors."""
    onnx = _onnx()
    source = str(path)
    data = read_model_bytes(Path(path), source)
    try:
        model = onnx.load_model_from_string(data)
    except Exception as err:
        raise SpecError(source, "", f"not an ONNX model ({type(err).__name__}: {str(err)[:120]})") from None
    return model


@dataclass(frozen=True, slots=True)
class _Info:
    """What the importer knows about one ONNX tensor."""

    dims: tuple[int, ...] | None
    elem_type: int

    @property
    def elements(self) -> int:
        assert self.dims is not None
        return math.prod(self.dims)


def _strip_weights(model: Any) -> None:
    """Drop initializer data that shape inference does not need (float tensors), to save memory."""
    for init in model.graph.initializer:
        if init.data_type in _FLOAT_TYPES and math.prod(init.dims) > 64:
            for field in ("raw_data", "float_data", "double_data", "int32_data", "external_data"):
                init.ClearField(field)
            init.data_location = 0


def _check_structure(model: Any, source: str) -> None:
    """Opset present, nodes topologically sorted with every input defined, outputs produced."""
    graph = model.graph
    if not any(o.domain in ("", "ai.onnx") for o in model.opset_import):
        raise SpecError(source, "opset_import", "no opset for the default ONNX domain (a truncated or malformed file?)")
    if not graph.node:
        raise SpecError(source, "graph.node", "the graph has no nodes")
    check_trace_ops(len(graph.node), source, "nodes")
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    for index, node in enumerate(graph.node):
        for name in node.input:
            if name and name not in defined:
                raise SpecError(
                    source,
                    f"graph.node[{index}]",
                    f"{node.op_type} {node.name!r} reads {name!r}, which no earlier node, input or initializer defines",
                )
        defined.update(n for n in node.output if n)
    for out in graph.output:
        if out.name not in defined:
            raise SpecError(source, "graph.output", f"{out.name!r} is produced by no node")


def _bind(model: Any, source: str, batch: int | None, seq_len: int | None) -> tuple[int, int | None]:
    """Bind the symbolic dimensions of the graph inputs (see the module docstring); returns (batch, seq_len)."""
    graph = model.graph
    initializers = {t.name for t in graph.initializer}
    fixed_batch: int | None = None
    batch_names: set[str] = set()
    seq_names: set[str] = set()
    for value in graph.input:
        if value.name in initializers or not value.type.HasField("tensor_type"):
            continue
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value > 0:
                if axis == 0:
                    fixed_batch = dim.dim_value if fixed_batch is None else fixed_batch
                continue
            (batch_names if axis == 0 else seq_names).add(dim.dim_param or f"{value.name}[{axis}]")
    seq_names -= batch_names
    input_names = {v.name for v in graph.input}
    if batch_names:
        bound_batch = batch if batch is not None else 1
    elif fixed_batch is not None:
        if batch is not None and batch != fixed_batch:
            raise UsageError(
                source, "--batch", f"the model's batch is fixed at {fixed_batch}; it has no symbolic batch"
            )
        bound_batch = fixed_batch
    else:
        bound_batch = batch if batch is not None else 1
    if seq_names and seq_len is None:
        names = ", ".join(sorted(seq_names))
        raise UsageError(source, "--seq-len", f"the model has symbolic dimensions ({names}); give --seq-len")
    if not seq_names and seq_len is not None:
        raise UsageError(source, "--seq-len", "the model has no symbolic sequence dimension to bind")
    for value in (*graph.input, *graph.output):
        if not value.type.HasField("tensor_type"):
            continue
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value > 0:
                continue
            name = dim.dim_param or f"{value.name}[{axis}]"
            if name in batch_names or (axis == 0 and value.name in input_names):
                dim.dim_value = bound_batch
            elif name in seq_names or value.name in input_names:
                assert seq_len is not None
                dim.dim_value = seq_len
            else:  # an output's own symbol: let shape inference fill it in
                dim.ClearField("dim_param")
    return bound_batch, seq_len if seq_names else None


def _infer(model: Any, source: str, strict: bool = True) -> dict[str, _Info]:
    """Shapes and element types of every tensor, from ONNX shape inference over the bound model."""
    onnx = _onnx()
    del model.graph.value_info[:]
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=strict, strict_mode=strict, data_prop=True)
    except Exception as err:
        message = " ".join(str(err).split())[:200]
        raise SpecError(source, "graph", f"ONNX shape inference failed: {message}") from None
    infos: dict[str, _Info] = {}
    for init in inferred.graph.initializer:
        infos[init.name] = _Info(tuple(int(d) for d in init.dims), init.data_type)
    for value in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        if value.name in infos or not value.type.HasField("tensor_type"):
            continue
        tensor = value.type.tensor_type
        dims: tuple[int, ...] | None = None
        if tensor.HasField("shape"):
            known = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
            dims = tuple(known) if all(d >= 0 for d in known) else None
        infos[value.name] = _Info(dims, tensor.elem_type)
    for node in inferred.graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    infos[node.output[0]] = _Info(tuple(int(d) for d in attr.t.dims), attr.t.data_type)
    return infos


MAX_FOLDED_ELEMENTS = 4096
"""Largest tensor constant folding computes (shape arithmetic and masks are far smaller)."""
_FOLD_ROUNDS = 16


def _known_values(model: Any) -> dict[str, Any]:
    """Numpy values of the initializers that carry data (integers and small float constants)."""
    from onnx import numpy_helper

    values: dict[str, Any] = {}
    for init in model.graph.initializer:
        if init.data_location == 0 and (init.data_type not in _FLOAT_TYPES or math.prod(init.dims) <= 1):
            try:
                values[init.name] = numpy_helper.to_array(init)
            except (ValueError, TypeError):  # a tensor without its data: not a constant we can use
                continue
    return values


def _fold_node(node: Any, values: dict[str, Any], infos: dict[str, _Info], opsets: dict[str, int]) -> list[Any] | None:
    """The outputs of ``node`` when every input is a known value (``Shape``: a known shape), else None."""
    import numpy as np
    from onnx.reference import ReferenceEvaluator

    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type in ("Shape", "Size"):
        info = infos.get(node.input[0])
        if info is None or info.dims is None:
            return None
        if node.op_type == "Size":
            return [np.array(info.elements, dtype=np.int64)]
        attrs = _attrs(node)
        start, end = attrs.get("start", 0), attrs.get("end", len(info.dims))
        return [np.array(info.dims[start:end], dtype=np.int64)]
    inputs = [n for n in node.input if n]
    if node.op_type == "Constant":
        value = next((a for a in node.attribute if a.name == "value"), None)
        if value is not None and value.t.data_type in _FLOAT_TYPES and math.prod(value.t.dims) > 1:
            return None  # a float Constant of several elements is a weight
    elif not inputs or not all(n in values for n in inputs):
        return None
    try:
        outputs = ReferenceEvaluator(node, opsets=opsets).run(None, {n: values[n] for n in inputs})
    except Exception:
        return None
    if any(np.asarray(o).size > MAX_FOLDED_ELEMENTS for o in outputs):
        return None
    return [np.asarray(o) for o in outputs]


def _fold_constants(model: Any, source: str) -> set[str]:
    """Fold shape arithmetic into initializers (ONNX shape inference cannot see through all of it).

    Repeats: infer shapes leniently, evaluate every node whose inputs are known values with the
    ONNX reference evaluator, replace it by initializers. Returns the names of the folded tensors.
    """
    from onnx import numpy_helper

    opsets = {o.domain or "": o.version for o in model.opset_import}
    folded: set[str] = set()
    for _ in range(_FOLD_ROUNDS):
        infos = _infer(model, source, strict=False)
        values = _known_values(model)
        keep = []
        found = False
        for node in model.graph.node:
            outputs = _fold_node(node, values, infos, opsets)
            if outputs is None:
                keep.append(node)
                continue
            found = True
            for name, value in zip(node.output, outputs, strict=False):
                if name:
                    values[name] = value
                    folded.add(name)
                    model.graph.initializer.append(numpy_helper.from_array(value, name))
        if not found:
            break
        del model.graph.node[:]
        model.graph.node.extend(keep)
    return folded


def _attrs(node: Any) -> dict[str, Any]:
    """A node's attributes as Python values (ints, floats, strings and lists of them)."""
    onnx = _onnx()
    values: dict[str, Any] = {}
    for attr in node.attribute:
        if attr.type in (onnx.AttributeProto.INT, onnx.AttributeProto.FLOAT, onnx.AttributeProto.STRING):
            value = onnx.helper.get_attribute_value(attr)
            values[attr.name] = value.decode() if isinstance(value, bytes) else value
        elif attr.type in (onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS):
            values[attr.name] = list(onnx.helper.get_attribute_value(attr))
    return values


class _Importer:
    """Turns the nodes of one bound, shape-inferred ONNX graph into forward ops."""

    def __init__(
        self,
        model: Any,
        infos: dict[str, _Info],
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

    def _constant_or_weight(self, name: str, info: _Info) -> None:
        if info.elem_type in _FLOAT_TYPES and info.dims is not None and math.prod(info.dims) > 1:
            self.weights.add(name)
        else:
            self.const.add(name)

    def info(self, name: str, node: Any) -> _Info:
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

    def elem_bytes(self, info: _Info) -> int:
        """Bytes of one element in the trace: the run's precision for floats."""
        if info.elem_type in _FLOAT_TYPES:
            return self.g.elem
        return MASK_BYTES if info.elem_type in _BOOL_TYPES else INT_BYTES

    def access(self, name: str, node: Any, touched: int | None = None) -> TensorAccess:
        """A read of tensor ``name`` (through views), as a weight when it is one."""
        canon = self.canonical(name)
        info = self.info(canon, node)
        if canon in self.weights:
            return self.g.weight(canon, info.elements, touched)
        return TensorAccess(canon, (info.elements if touched is None else touched) * self.elem_bytes(info))

    def out(self, name: str, node: Any) -> TensorAccess:
        """A tensor written by an op."""
        info = self.info(name, node)
        return TensorAccess(name, info.elements * self.elem_bytes(info))

    def reads(self, node: Any, names: Sequence[str] | None = None) -> list[TensorAccess]:
        """Reads of a node's inputs, constants left out."""
        return [self.access(n, node) for n in (node.input if names is None else names) if n and not self.is_const(n)]

    def is_const(self, name: str) -> bool:
        return self.canonical(name) in self.const

    def op_name(self, node: Any, index: int) -> str:
        return node.name or f"{node.op_type}_{index}"

    # -- node kinds ------------------------------------------------------------------------------

    def conv(self, index: int, node: Any) -> None:
        attrs = _attrs(node)
        x, w = self.info(node.input[0], node), self.info(node.input[1], node)
        y = self.info(node.output[0], node)
        group = int(attrs.get("group", 1))
        spatial = len(w.dims or ()) - 2
        kernel = tuple(w.dims or ())[2:]
        strides = attrs.get("strides", [1] * spatial)
        dilations = attrs.get("dilations", [1] * spatial)
        pads = attrs.get("pads", [0] * 2 * spatial)
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
        attrs = _attrs(node)
        a, b = self.info(node.input[0], node), self.info(node.input[1], node)
        assert a.dims is not None
        assert b.dims is not None
        m, k = (a.dims[1], a.dims[0]) if attrs.get("transA", 0) else (a.dims[0], a.dims[1])
        n = b.dims[0] if attrs.get("transB", 0) else b.dims[1]
        self.g.matmul(self.op_name(node, index), Gemm(1, m, n, k), self.reads(node), self.out(node.output[0], node))

    def matmul(self, index: int, node: Any) -> None:
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

    def norm(self, index: int, node: Any) -> None:
        g = self.g
        info = self.info(node.input[0], node)
        assert info.dims is not None
        axis = int(_attrs(node).get("axis", -1 if node.op_type in ("LayerNormalization", "RMSNormalization") else 2))
        axis = axis % len(info.dims) if info.dims else 0
        rows = math.prod(info.dims[:axis]) if node.op_type in ("LayerNormalization", "RMSNormalization") else 1
        if node.op_type == "InstanceNormalization":
            rows = math.prod(info.dims[:2])
        elif node.op_type == "GroupNormalization":
            rows = info.dims[0] * int(_attrs(node).get("num_groups", 1))
        elements = info.elements
        reads = self.reads(node, node.input[:3])
        out = self.out(node.output[0], node)
        name = self.op_name(node, index)
        fwd, bwd = ELEMENT_FLOPS["norm"]
        if not self.train:
            g.add(name, OpKind.LAYERNORM, fwd * elements, reads, (out,))
            return
        stats = TensorAccess(f"{name}.saved_stats", 2 * rows * STAT_BYTES)
        saved = (reads[0].name, *(t.name for t in reads[1:2]), stats.name)
        g.add(name, OpKind.LAYERNORM, fwd * elements, reads, (out, stats), rule=BackwardRule(saved, bwd * elements))

    def elementwise(self, index: int, node: Any) -> None:
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
        reads = self.reads(node)
        if not reads:
            for name in node.output:
                self.const.add(name)
            return
        outs = [self.out(n, node) for n in node.output if n]
        moved = sum(t.bytes for t in outs) // max(1, self.g.elem)
        self.g.add(self.op_name(node, index), OpKind.ELEMENTWISE, 0, reads, outs, rule=BackwardRule((), moved))

    def pool(self, index: int, node: Any) -> None:
        x = self.info(node.input[0], node)
        outputs = self.info(node.output[0], node).elements
        reads = self.reads(node)
        out = self.out(node.output[0], node)
        name = self.op_name(node, index)
        if node.op_type.startswith("Global"):
            flops = x.elements
            rule = BackwardRule((), x.elements)
        else:
            window = math.prod(_attrs(node).get("kernel_shape", [1]))
            if node.op_type == "MaxPool":
                flops, rule = (window - 1) * outputs, BackwardRule((reads[0].name, out.name), outputs)
            else:
                flops, rule = window * outputs, BackwardRule((), x.elements)
        self.g.add(name, OpKind.POOL, flops, reads, (out,), rule=rule)

    def gather(self, index: int, node: Any) -> None:
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
        if self.is_const(node.input[0]):
            self.const.update(n for n in node.output if n)
        else:
            self.alias[node.output[0]] = node.input[0]

    def run(self) -> list[str]:
        """Import every node; returns the unsupported op types (one entry per node)."""
        handlers = {
            "Conv": self.conv,
            "Gemm": self.gemm,
            "MatMul": self.matmul,
            "BatchNormalization": self.batchnorm,
            "Gather": self.gather,
            "Dropout": self.dropout,
            **dict.fromkeys(NORMS, self.norm),
            **dict.fromkeys(ELEMENTWISE_FLOPS, self.elementwise),
            **dict.fromkeys(REDUCTIONS, self.reduction),
            **dict.fromkeys(MOVES, self.move),
            **dict.fromkeys(POOLS, self.pool),
        }
        unsupported: list[str] = []
        for index, node in enumerate(self.graph.node):
            if index in self.skip:
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
            if info is None or info.dims is None or info.elem_type not in _FLOAT_TYPES or canon in self.const:
                continue
            logits.append(TensorAccess(canon, info.elements * g.elem))
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


def onnx_graph(
    model: Any,
    source: str,
    mode: Mode,
    batch: int | None,
    precision: Precision,
    seq_len: int | None,
    name: str | None = None,
) -> tuple[ForwardGraph, int, int | None]:
    """The forward graph of an ONNX ``ModelProto`` (modified in place: bound and stripped).

    Returns the graph and the batch and sequence length it was bound to.
    """
    _check_structure(model, source)
    unknown = Counter(
        node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        for node in model.graph.node
        if not (node.domain in ("", "ai.onnx") and node.op_type in SUPPORTED)
        and not (node.domain == "com.microsoft" and node.op_type == "FastGelu")
    )
    if unknown:
        listed = ", ".join(f"{op} x{count}" for op, count in sorted(unknown.items()))
        raise SpecError(source, "graph.node", f"unsupported ONNX ops: {listed}")
    _strip_weights(model)
    bound_batch, bound_seq = _bind(model, source, batch, seq_len)
    folded = _fold_constants(model, source)
    infos = _infer(model, source)
    graph_name = name or model.graph.name or Path(source).stem
    importer = _Importer(model, infos, source, graph_name, mode, precision, folded)
    unsupported = importer.run()
    if unsupported:
        counts = Counter(unsupported)
        listed = ", ".join(f"{op} x{count}" for op, count in sorted(counts.items()))
        raise SpecError(source, "graph.node", f"unsupported ONNX ops: {listed}")
    graph = importer.finish()
    for op in graph.ops:
        if op.flops > MAX_INT or op.bytes > MAX_INT:
            raise LimitError(source, f"node {op.name!r}", f"a count exceeds the limit of {MAX_INT}")
    meta = {"source": "onnx", "file": Path(source).name}
    if model.producer_name:
        meta["producer"] = model.producer_name
    return replace(graph, meta=meta), bound_batch, bound_seq


def import_onnx(
    path: str | os.PathLike[str],
    mode: Mode | str = Mode.INFER,
    batch: int | None = None,
    precision: Precision | str = Precision.FP16,
    seq_len: int | None = None,
    optimizer: Optimizer | str | None = DEFAULT_OPTIMIZER,
    name: str | None = None,
) -> Trace:
    """The trace of one step of the ONNX model at ``path`` (see the module docstring).

    ``optimizer`` is the training step's update (None: no update op). Raises
    :class:`~archsim.errors.ArchsimError` subclasses for bad files and arguments.
    """
    run_mode, run_precision = Mode(mode), Precision(precision)
    source = str(path)
    graph, bound_batch, bound_seq = onnx_graph(load_onnx(path), source, run_mode, batch, run_precision, seq_len, name)
    run_optimizer = Optimizer(optimizer) if optimizer is not None else None
    return finish_trace(graph, run_mode, bound_batch, bound_seq, run_optimizer)


def onnx_trace(workload: str, mode: Mode, batch: int | None, precision: Precision, seq_len: int | None) -> Trace:
    """The trace :func:`~archsim.workloads.build_trace` gives for an ONNX file (Adam in training)."""
    return import_onnx(workload, mode, batch, precision, seq_len, DEFAULT_OPTIMIZER)
