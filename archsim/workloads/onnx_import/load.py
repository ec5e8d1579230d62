"""Reading ONNX files and preparing their graphs for import.

Structure checks, binding of symbolic dimensions, ONNX shape inference and constant folding of shape
arithmetic; the conventions are in :mod:`archsim.workloads.onnx_import`.
"""

from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from archsim.errors import LimitError, SpecError, UsageError
from archsim.limits import MAX_DIM, MAX_MODEL_FILE_BYTES, check_trace_ops

FLOAT_TYPES = frozenset({1, 10, 11, 16, 17, 18, 19, 20, 21, 22, 23})  # float, fp16, double, bf16, fp8 and fp4 types
"""ONNX element types that are floating point (the run's precision in the trace)."""
BOOL_TYPES = frozenset({2, 3, 9})  # uint8, int8, bool: one byte
"""ONNX element types of one byte in the trace."""


def onnx_module() -> Any:
    """The ``onnx`` module, or a UsageError saying how to install it."""
    try:
        import onnx
    except ImportError:
        raise UsageError(
            "onnx", "", "reading ONNX models needs the onnx package: pip install 'archsim[onnx]'"
        ) from None
    return onnx


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
    onnx = onnx_module()
    source = str(path)
    data = read_model_bytes(Path(path), source)
    try:
        model = onnx.load_model_from_string(data)
    except Exception as err:
        raise SpecError(source, "", f"not an ONNX model ({type(err).__name__}: {str(err)[:120]})") from None
    return model


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """What the importer knows about one ONNX tensor."""

    dims: tuple[int, ...] | None
    elem_type: int

    @property
    def elements(self) -> int:
        """Elements of the tensor (its shape must be known)."""
        assert self.dims is not None
        return math.prod(self.dims)


def strip_weights(model: Any) -> None:
    """Drop initializer data that shape inference does not need (float tensors), to save memory."""
    for init in model.graph.initializer:
        if init.data_type in FLOAT_TYPES and math.prod(init.dims) > 64:
            for field in ("raw_data", "float_data", "double_data", "int32_data", "external_data"):
                init.ClearField(field)
            init.data_location = 0


def check_structure(model: Any, source: str) -> None:
    """Opset present, nodes topologically sorted with every input defined, outputs produced."""
    graph = model.graph
    if not any(o.domain in ("", "ai.onnx") for o in model.opset_import):
        raise SpecError(source, "opset_import", "no opset for the default ONNX domain (a truncated or malformed file?)")
    if not graph.node:
        raise SpecError(source, "graph.node", "the graph has no nodes")
    check_trace_ops(len(graph.node), source, "nodes")
    _check_text(graph, source)
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
    for init in graph.initializer:
        check_tensor(init, source, f"initializer {init.name!r}", initializer=True)
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                check_tensor(attr.t, source, f"node {node.name or node.op_type!r}.{attr.name}")


def _check_text(graph: Any, source: str) -> None:
    """Every name the importer reads is text.

    Protobuf hands a string field that is not valid UTF-8 (a corrupted file) back as bytes, which no
    name or message could use.
    """
    fields: list[tuple[str, list[Any]]] = [("graph.name", [graph.name])]
    fields += [
        (f"graph.{part}", [v.name for v in getattr(graph, part)])
        for part in ("input", "output", "initializer", "value_info")
    ]
    for index, node in enumerate(graph.node):
        where = f"graph.node[{index}]"
        fields += [(f"{where}.{name}", [getattr(node, name)]) for name in ("op_type", "domain", "name")]
        fields += [(f"{where}.input", list(node.input)), (f"{where}.output", list(node.output))]
        fields.append((f"{where}.attribute", [a.name for a in node.attribute]))
    for field, values in fields:
        if any(not isinstance(value, str) for value in values):
            raise SpecError(source, field, "not valid UTF-8 text (a corrupted or truncated file?)")


_DATA_FIELDS = ("raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


def check_tensor(tensor: Any, source: str, field: str, initializer: bool = False) -> None:
    """Dimensions in range, and data, where the file carries it, of the size the dimensions say.

    ONNX shape inference trusts the dimensions of a constant: ``[2**40]`` over one stored value
    would make it allocate without bound, so such a tensor is refused before inference.
    """
    from onnx import numpy_helper

    for dim in tensor.dims:
        if not 0 <= dim <= MAX_DIM:
            raise LimitError(source, field, f"a dimension of {dim} is outside 0 to {MAX_DIM}")
    if tensor.data_location != 0 or not any(len(getattr(tensor, name)) for name in _DATA_FIELDS):
        return  # no data in the file: only the shape is used
    if initializer and tensor.data_type in FLOAT_TYPES and math.prod(tensor.dims) > 64:
        return  # a weight: strip_weights drops its data before shape inference
    try:
        numpy_helper.to_array(tensor)
    except Exception as err:  # onnx raises ValueError, TypeError or its own errors for bad data
        message = " ".join(str(err).split())[:120]
        raise SpecError(source, field, f"its data does not match its dims {list(tensor.dims)} ({message})") from None


def bind(model: Any, source: str, batch: int | None, seq_len: int | None) -> tuple[int, int | None]:
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


def infer(model: Any, source: str, strict: bool = True) -> dict[str, TensorInfo]:
    """Shapes and element types of every tensor, from ONNX shape inference over the bound model."""
    onnx = onnx_module()
    del model.graph.value_info[:]
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=strict, strict_mode=strict, data_prop=True)
    except Exception as err:
        message = " ".join(str(err).split())[:200]
        raise SpecError(source, "graph", f"ONNX shape inference failed: {message}") from None
    infos: dict[str, TensorInfo] = {}
    for init in inferred.graph.initializer:
        infos[init.name] = TensorInfo(tuple(int(d) for d in init.dims), init.data_type)
    for value in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        if value.name in infos or not value.type.HasField("tensor_type"):
            continue
        tensor = value.type.tensor_type
        dims: tuple[int, ...] | None = None
        if tensor.HasField("shape"):
            known = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
            dims = tuple(known) if all(d >= 0 for d in known) else None
        infos[value.name] = TensorInfo(dims, tensor.elem_type)
    for node in inferred.graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    infos[node.output[0]] = TensorInfo(tuple(int(d) for d in attr.t.dims), attr.t.data_type)
    return infos


MAX_FOLDED_ELEMENTS = 4096
"""Largest tensor constant folding computes (shape arithmetic and masks are far smaller)."""
_FOLD_ROUNDS = 16


def known_values(model: Any) -> dict[str, Any]:
    """Numpy values of the initializers that carry data (integers and small float constants)."""
    from onnx import numpy_helper

    values: dict[str, Any] = {}
    for init in model.graph.initializer:
        if init.data_location == 0 and (init.data_type not in FLOAT_TYPES or math.prod(init.dims) <= 1):
            try:
                values[init.name] = numpy_helper.to_array(init)
            except (ValueError, TypeError):  # a tensor without its data: not a constant we can use
                continue
    return values


def fold_node(
    node: Any, values: dict[str, Any], infos: dict[str, TensorInfo], opsets: dict[str, int]
) -> list[Any] | None:
    """The outputs of ``node`` when every input is a known value (``Shape``: a known shape), else None."""
    import numpy as np
    from onnx.reference import ReferenceEvaluator

    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type in ("Shape", "Size"):
        info = infos.get(node.input[0]) if node.input else None  # no input: left to the importer's checks
        if info is None or info.dims is None:
            return None
        if node.op_type == "Size":
            return [np.array(info.elements, dtype=np.int64)]
        attrs = node_attrs(node)
        start, end = attrs.get("start", 0), attrs.get("end", len(info.dims))
        return [np.array(info.dims[start:end], dtype=np.int64)]
    inputs = [n for n in node.input if n]
    if node.op_type == "Constant":
        value = next((a for a in node.attribute if a.name == "value"), None)
        if value is not None and value.t.data_type in FLOAT_TYPES and math.prod(value.t.dims) > 1:
            return None  # a float Constant of several elements is a weight
    elif not inputs or not all(n in values for n in inputs):
        return None
    if not _small_enough(node, [np.asarray(values[n]) for n in inputs], infos):
        return None
    try:
        outputs = ReferenceEvaluator(node, opsets=opsets).run(None, {n: values[n] for n in inputs})
    except Exception:
        return None
    if any(np.asarray(o).size > MAX_FOLDED_ELEMENTS for o in outputs):
        return None
    return [np.asarray(o) for o in outputs]


def _small_enough(node: Any, inputs: list[Any], infos: dict[str, TensorInfo]) -> bool:
    """Whether folding ``node`` stays within :data:`MAX_FOLDED_ELEMENTS`, judged before evaluating it.

    Evaluating first and checking after would let a ``ConstantOfShape`` of ``[10**5, 10**5]`` (or a
    broadcast of large integer tensors) allocate without bound: the inputs must be small, the
    inferred outputs too where inference knows them, and the ops whose output size comes from their
    input values (not their input sizes) are bounded from those values.
    """
    if any(x.size > MAX_FOLDED_ELEMENTS for x in inputs):
        return False
    for name in node.output:
        info = infos.get(name)
        if info is not None and info.dims is not None and info.elements > MAX_FOLDED_ELEMENTS:
            return False
    try:
        bound = _output_elements(node, inputs)
    except (ValueError, TypeError, OverflowError, IndexError):
        return False  # values the op cannot take: leave the node to the importer's own checks
    return bound <= MAX_FOLDED_ELEMENTS


def _output_elements(node: Any, inputs: list[Any]) -> float:
    """The elements of ``node``'s largest output, bounded from its (small) input values.

    Exact or an upper bound for the ops whose size comes from values and for broadcasting ops; for
    the others (``MatMul``, ``Gather``) the broadcast of the inputs' shapes, which with inputs of at
    most :data:`MAX_FOLDED_ELEMENTS` elements keeps the evaluation within its square.
    """
    op = node.op_type
    ints = [[float(v) for v in x.ravel()] for x in inputs]
    if op == "ConstantOfShape":
        return math.prod(ints[0])
    if op == "Range":
        start, limit, delta = (v[0] for v in ints[:3])
        return 0.0 if delta == 0 else max(0.0, math.ceil((limit - start) / delta))
    if op == "Tile":
        return float(inputs[0].size) * math.prod(ints[1])
    if op == "Expand":
        return math.prod(_broadcast([list(inputs[0].shape), ints[1]]))
    if op == "Pad" and len(ints) > 1:
        pads = ints[1]
        rank = len(pads) // 2
        return math.prod(float(d) + pads[i] + pads[i + rank] for i, d in enumerate(inputs[0].shape[:rank]))
    if op == "Resize":
        return math.inf  # sizes or scales from values: not worth folding
    return math.prod(_broadcast([list(x.shape) for x in inputs]))


def _broadcast(shapes: list[list[float]]) -> list[float]:
    """The per-axis largest dimension of ``shapes`` aligned on the right (numpy broadcasting's result)."""
    rank = max((len(shape) for shape in shapes), default=0)
    padded = [[1.0] * (rank - len(shape)) + [float(d) for d in shape] for shape in shapes]
    return [max(column) for column in zip(*padded, strict=True)] if padded else []


def fold_constants(model: Any, source: str) -> set[str]:
    """Fold shape arithmetic into initializers (ONNX shape inference cannot see through all of it).

    Repeats: infer shapes leniently, evaluate every node whose inputs are known values with the
    ONNX reference evaluator, replace it by initializers. Returns the names of the folded tensors.
    """
    from onnx import numpy_helper

    opsets = {o.domain or "": o.version for o in model.opset_import}
    folded: set[str] = set()
    for _ in range(_FOLD_ROUNDS):
        infos = infer(model, source, strict=False)
        values = known_values(model)
        keep = []
        found = False
        for node in model.graph.node:
            outputs = fold_node(node, values, infos, opsets)
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


def node_attrs(node: Any) -> dict[str, Any]:
    """A node's attributes as Python values (ints, floats, strings and lists of them)."""
    onnx = onnx_module()
    values: dict[str, Any] = {}
    for attr in node.attribute:
        if attr.type in (onnx.AttributeProto.INT, onnx.AttributeProto.FLOAT, onnx.AttributeProto.STRING):
            value = onnx.helper.get_attribute_value(attr)
            values[attr.name] = value.decode() if isinstance(value, bytes) else value
        elif attr.type in (onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS):
            values[attr.name] = list(onnx.helper.get_attribute_value(attr))
    return values
