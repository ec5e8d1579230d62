"""Chakra execution traces (MLCommons Chakra ET, protobuf) in and out.

File layout, as Chakra's ``protolib`` writes it: a ``GlobalMetadata`` message, then one ``Node``
message per node, each message preceded by its length as a varint (a gzip-compressed file is read
too). The messages are built at run time from the subset of Chakra's schema written out in
:func:`_schema`, with Chakra's own field numbers (``schema/protobuf/et_def.proto`` of
github.com/mlcommons/chakra at commit a1120ddcb50bb3f436a94c8abb40654907f263a6), in a private
descriptor pool so that Chakra's own generated classes can be imported beside it.

Writing (:func:`write_chakra`): every op is a ``COMP_NODE`` with ``id`` its index, ``data_deps`` its
deps, and the attributes Chakra's feeder reads -- ``num_ops`` (int64: the op's FLOPs),
``tensor_size`` (uint64: its bytes read and written) and ``is_cpu_op`` (false) -- plus ``archsim.*``
attributes that keep everything else (kind, phase, tensors, Gemm and convolution shapes); the
trace's own fields are ``archsim.*`` attributes of the metadata. Other tools ignore attributes they
do not know, and :func:`read_chakra` reads such a file back into an identical trace.

Reading a trace written by another tool (nodes without ``archsim.kind``): nodes are sorted by their
``data_deps`` and ``ctrl_deps`` (file order among ready nodes). A ``COMP_NODE`` becomes a ``matmul``
when its name is a matrix product (``mm``, ``bmm``, ``matmul``, ``addmm``, ``linear``, ``gemm``)
and ``inputs.shapes`` holds two operand shapes ``[..., M, K]`` and ``[..., K, N]``; otherwise an
``elementwise`` op of ``num_ops`` FLOPs that reads ``tensor_size`` bytes. ``COMM_COLL_NODE`` (with
``comm_type`` and ``comm_size`` in bytes) and ``COMM_SEND_NODE`` / ``COMM_RECV_NODE`` become
:class:`CommNode` entries, replayed by :mod:`archsim.chakra_replay` on a system's links; memory
load/store and metadata nodes have no cost and keep only their dependencies. Bad files (malformed,
truncated, cyclic or dangling dependencies, over :data:`~archsim.limits.MAX_TRACE_OPS` nodes) are
:class:`~archsim.errors.SpecError`; the protobuf package is needed (``pip install 'archsim[chakra]'``).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import zlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from archsim.errors import LimitError, SpecError, UsageError
from archsim.limits import MAX_CHAKRA_BYTES, MAX_DIM, MAX_INT, MAX_TRACE_OPS
from archsim.outfile import write_file
from archsim.spec.common import Precision
from archsim.workloads.onnx_import.load import read_model_bytes
from archsim.workloads.trace import ConvShape, Gemm, Mode, Op, OpKind, Phase, Role, TensorAccess, Trace

SUFFIXES = (".et", ".chakra")
"""Workload names ending with one of these are Chakra execution traces."""
VERSION = "0.0.4"
"""The Chakra schema version written in the metadata."""
COMP_NODE, COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE = 4, 5, 6, 7
COLLECTIVES = {
    0: "all-reduce",
    1: "reduce",
    2: "all-gather",
    3: "gather",
    4: "scatter",
    5: "broadcast",
    6: "all-to-all",
    7: "reduce-scatter",
    8: "reduce-scatter",
    9: "barrier",
}
"""Chakra's ``CollectiveCommType`` values by name (``REDUCE_SCATTER_BLOCK`` is a reduce-scatter)."""
_MATRIX_NAME = re.compile(r"(^|[^a-z])(mm|bmm|matmul|addmm|baddbmm|linear|gemm)([^a-z]|$)", re.IGNORECASE)


def is_chakra(workload: str) -> bool:
    """True when ``workload`` names a Chakra execution trace (``*.et``, ``*.chakra``)."""
    return workload.lower().endswith(SUFFIXES)


@dataclass(frozen=True, slots=True)
class CommNode:
    """A communication node: a collective over all chips, or a point-to-point send or receive."""

    name: str
    collective: str
    """A value of :data:`COLLECTIVES`, or ``send`` / ``recv``."""
    bytes: int
    deps: tuple[int, ...]
    """Positions in :attr:`ChakraTrace.nodes` of the nodes it waits for."""


@dataclass(frozen=True)
class ChakraTrace:
    """A Chakra ET: the compute ops as a trace, and every node in dependency order.

    ``nodes[i]`` is ``("op", j)`` for ``trace.ops[j]``, ``("comm", j)`` for ``comms[j]`` or
    ``("none", j)`` for a node without cost (memory, metadata); ``deps[i]`` are positions in ``nodes``.
    An op's own ``deps`` point to the ops it waits for through any chain of other nodes.
    """

    trace: Trace
    comms: tuple[CommNode, ...]
    nodes: tuple[tuple[str, int], ...]
    deps: tuple[tuple[int, ...], ...]


def _field(name: str, number: int, kind: int, label: int = 1, type_name: str = "", oneof: int | None = None) -> Any:
    from google.protobuf import descriptor_pb2

    field = descriptor_pb2.FieldDescriptorProto(name=name, number=number, type=kind, label=label)
    if type_name:
        field.type_name = type_name
    if oneof is not None:
        field.oneof_index = oneof
    return field


@cache
def _schema() -> dict[str, Any]:
    """Message classes for the subset of Chakra's ``et_def.proto`` archsim reads and writes."""
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError:
        raise UsageError(
            "protobuf", "", "Chakra traces need the protobuf package: pip install 'archsim[chakra]'"
        ) from None
    f = descriptor_pb2.FieldDescriptorProto
    repeated, p = f.LABEL_REPEATED, ".ChakraProtoMsg."
    proto = descriptor_pb2.FileDescriptorProto(name="archsim_chakra_et_def.proto", package="ChakraProtoMsg")
    proto.syntax = "proto3"
    for name, kind in (("Int64List", f.TYPE_INT64), ("Uint64List", f.TYPE_UINT64), ("StringList", f.TYPE_STRING)):
        proto.message_type.add(name=name).field.append(_field("values", 1, kind, repeated))
    attr = proto.message_type.add(name="AttributeProto")
    attr.oneof_decl.add(name="value")
    attr.field.extend(
        [
            _field("name", 1, f.TYPE_STRING),
            _field("doc_string", 2, f.TYPE_STRING),
            _field("double_val", 3, f.TYPE_DOUBLE, oneof=0),
            _field("int32_val", 7, f.TYPE_INT32, oneof=0),
            _field("int64_val", 9, f.TYPE_INT64, oneof=0),
            _field("int64_list", 10, f.TYPE_MESSAGE, type_name=p + "Int64List", oneof=0),
            _field("uint32_val", 11, f.TYPE_UINT32, oneof=0),
            _field("uint64_val", 13, f.TYPE_UINT64, oneof=0),
            _field("uint64_list", 14, f.TYPE_MESSAGE, type_name=p + "Uint64List", oneof=0),
            _field("bool_val", 27, f.TYPE_BOOL, oneof=0),
            _field("string_val", 29, f.TYPE_STRING, oneof=0),
            _field("string_list", 30, f.TYPE_MESSAGE, type_name=p + "StringList", oneof=0),
        ]
    )
    meta = proto.message_type.add(name="GlobalMetadata")
    meta.field.extend(
        [_field("version", 1, f.TYPE_STRING), _field("attr", 2, f.TYPE_MESSAGE, repeated, p + "AttributeProto")]
    )
    io = proto.message_type.add(name="IOInfo")
    io.field.extend([_field(n, i, f.TYPE_STRING) for i, n in enumerate(("values", "shapes", "types"), 1)])
    node = proto.message_type.add(name="Node")
    node.field.extend(
        [
            _field("id", 1, f.TYPE_UINT64),
            _field("name", 2, f.TYPE_STRING),
            _field("type", 3, f.TYPE_INT32),  # the NodeType enum; an int32 on the wire
            _field("ctrl_deps", 4, f.TYPE_UINT64, repeated),
            _field("data_deps", 5, f.TYPE_UINT64, repeated),
            _field("start_time_micros", 6, f.TYPE_UINT64),
            _field("duration_micros", 7, f.TYPE_UINT64),
            _field("inputs", 8, f.TYPE_MESSAGE, type_name=p + "IOInfo"),
            _field("outputs", 9, f.TYPE_MESSAGE, type_name=p + "IOInfo"),
            _field("attr", 10, f.TYPE_MESSAGE, repeated, p + "AttributeProto"),
        ]
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"ChakraProtoMsg.{name}"))
        for name in ("GlobalMetadata", "Node", "AttributeProto")
    }


# -- writing ---------------------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _attr(message: Any, name: str, value: object, unsigned: bool = False) -> None:
    """Append an attribute, typed as Chakra's feeder reads it."""
    attr = message.attr.add(name=name)
    if isinstance(value, bool):
        attr.bool_val = value
    elif isinstance(value, int):
        if unsigned:
            attr.uint64_val = value
        else:
            attr.int64_val = value
    elif isinstance(value, str):
        attr.string_val = value
    elif isinstance(value, list) and all(isinstance(v, int) for v in value):
        attr.int64_list.values.extend(value)
    else:
        assert isinstance(value, list)
        attr.string_list.values.extend(value)


def _tensors_attrs(node: Any, prefix: str, tensors: tuple[TensorAccess, ...]) -> None:
    _attr(node, f"archsim.{prefix}", [t.name for t in tensors])
    _attr(node, f"archsim.{prefix}_bytes", [t.bytes for t in tensors])
    _attr(node, f"archsim.{prefix}_roles", [t.role.value for t in tensors])


def chakra_bytes(trace: Trace) -> bytes:
    """The Chakra ET of ``trace`` (see the module docstring)."""
    schema = _schema()
    meta = schema["GlobalMetadata"](version=VERSION)
    for key, value in (
        ("archsim.schema_version", 1),
        ("archsim.name", trace.name),
        ("archsim.mode", trace.mode.value),
        ("archsim.batch", trace.batch),
        ("archsim.precision", trace.precision.value),
        ("archsim.parameters", trace.parameters),
        ("archsim.memory_bytes", trace.memory_bytes),
    ):
        _attr(meta, key, value)
    if trace.seq_len is not None:
        _attr(meta, "archsim.seq_len", trace.seq_len)
    for key, text in sorted(trace.meta.items()):
        _attr(meta, f"archsim.meta.{key}", text)
    chunks = [meta.SerializeToString()]
    for index, op in enumerate(trace.ops):
        node = schema["Node"](id=index, name=op.name, type=COMP_NODE, data_deps=op.deps)
        _attr(node, "is_cpu_op", False)
        _attr(node, "num_ops", op.flops)
        _attr(node, "tensor_size", op.bytes, unsigned=True)
        _attr(node, "archsim.kind", op.kind.value)
        _attr(node, "archsim.phase", op.phase.value)
        _tensors_attrs(node, "reads", op.reads)
        _tensors_attrs(node, "writes", op.writes)
        if op.gemm is not None:
            g = op.gemm
            _attr(node, "archsim.gemm", [g.batch, g.m, g.n, g.k])
        if op.conv is not None:
            c = op.conv
            _attr(node, "archsim.conv", [c.n, c.c, c.h, c.w, c.k, c.r, c.s, c.stride, c.pad])
        chunks.append(node.SerializeToString())
    return b"".join(_varint(len(chunk)) + chunk for chunk in chunks)


def write_chakra(trace: Trace, path: str | os.PathLike[str]) -> None:
    """Write ``trace`` as a Chakra ET; :func:`read_chakra` reads it back into an identical trace."""
    write_file(path, chakra_bytes(trace))


# -- reading ---------------------------------------------------------------------------------------


def _messages(data: bytes, source: str) -> list[bytes]:
    """Split length-delimited messages; a truncated or malformed stream is a SpecError."""
    messages: list[bytes] = []
    pos = 0
    while pos < len(data):
        length = shift = 0
        while True:
            if pos >= len(data) or shift > 35:
                raise SpecError(source, f"message {len(messages)}", "truncated or malformed length prefix")
            byte = data[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if pos + length > len(data):
            raise SpecError(
                source, f"message {len(messages)}", f"truncated: {length} bytes announced, {len(data) - pos} left"
            )
        messages.append(data[pos : pos + length])
        pos += length
        if len(messages) > MAX_TRACE_OPS + 1:
            raise LimitError(source, "nodes", f"more than the {MAX_TRACE_OPS} allowed")
    return messages


def _value(attr: Any) -> Any:
    which = attr.WhichOneof("value")
    if which is None:
        return None
    value = getattr(attr, which)
    return list(value.values) if which.endswith("_list") else value


def _attrs(message: Any) -> dict[str, Any]:
    return {a.name: _value(a) for a in message.attr}


_CHUNK_BYTES = 2**20
"""Bytes decompressed at a time."""


def _decompress(data: bytes, source: str) -> bytes:
    if not data.startswith(b"\x1f\x8b"):
        return data
    chunks: list[bytes] = []
    size = 0
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
            while chunk := stream.read(_CHUNK_BYTES):
                size += len(chunk)
                if size > MAX_CHAKRA_BYTES:  # before keeping it: memory stays within the limit
                    raise LimitError(source, "", f"decompresses to more than {MAX_CHAKRA_BYTES} bytes")
                chunks.append(chunk)
    except (OSError, EOFError, zlib.error) as err:
        raise SpecError(source, "", f"corrupt gzip stream: {err}") from None
    return b"".join(chunks)


def _count(value: Any, source: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT:
        raise SpecError(source, field, f"must be an integer in 0..{MAX_INT}, got {value!r}")
    return value


def _dims(values: Any, size: int, source: str, field: str) -> list[int]:
    if not isinstance(values, list) or len(values) != size or not all(isinstance(v, int) for v in values):
        raise SpecError(source, field, f"expected {size} integers, got {values!r}")
    if any(v < 0 or v > MAX_DIM for v in values):
        raise LimitError(source, field, f"a dimension is outside 0..{MAX_DIM}")
    return list(values)


def _tensors(attrs: dict[str, Any], prefix: str, source: str, field: str) -> tuple[TensorAccess, ...]:
    names, sizes, roles = (attrs.get(f"archsim.{prefix}{s}", []) for s in ("", "_bytes", "_roles"))
    if not (isinstance(names, list) and isinstance(sizes, list) and isinstance(roles, list)) or not (
        len(names) == len(sizes) == len(roles)
    ):
        raise SpecError(source, f"{field}.archsim.{prefix}", "names, bytes and roles must be lists of one length")
    try:
        return tuple(
            TensorAccess(str(n), _count(b, source, f"{field}.archsim.{prefix}_bytes"), Role(r))
            for n, b, r in zip(names, sizes, roles, strict=True)
        )
    except ValueError as err:
        raise SpecError(source, f"{field}.archsim.{prefix}_roles", str(err)) from None


def _archsim_op(node: Any, attrs: dict[str, Any], deps: tuple[int, ...], source: str, field: str) -> Op:
    """An op written by :func:`write_chakra`, exactly."""
    try:
        kind, phase = OpKind(attrs["archsim.kind"]), Phase(attrs.get("archsim.phase", ""))
    except ValueError as err:
        raise SpecError(source, field, str(err)) from None
    gemm = conv = None
    if "archsim.gemm" in attrs:
        b, m, n, k = _dims(attrs["archsim.gemm"], 4, source, f"{field}.archsim.gemm")
        gemm = Gemm(b, m, n, k)
    if "archsim.conv" in attrs:
        conv = ConvShape(*_dims(attrs["archsim.conv"], 9, source, f"{field}.archsim.conv"))
    flops = _count(attrs.get("num_ops", 0), source, f"{field}.num_ops")
    reads, writes = _tensors(attrs, "reads", source, field), _tensors(attrs, "writes", source, field)
    return Op(node.name, kind, phase, flops, reads, writes, deps, gemm, conv)


def _shapes(text: str) -> list[list[int]] | None:
    if not text or len(text) > 10_000:
        return None
    try:
        shapes = json.loads(text)
    except ValueError:
        return None
    if not isinstance(shapes, list):
        return None
    usable = [
        s for s in shapes if isinstance(s, list) and s and all(isinstance(d, int) and 0 < d <= MAX_DIM for d in s)
    ]
    return usable if len(usable) == len(shapes) else None


def _foreign_op(
    node: Any, attrs: dict[str, Any], deps: tuple[int, ...], precision: Precision, source: str, field: str
) -> Op:
    """An op for a compute node another tool wrote (see the module docstring)."""
    flops = _count(attrs.get("num_ops", 0), source, f"{field}.num_ops")
    size = _count(attrs.get("tensor_size", 0), source, f"{field}.tensor_size")
    shapes = _shapes(node.inputs.shapes) if node.HasField("inputs") else None
    if _MATRIX_NAME.search(node.name) and shapes is not None:
        operands = [s for s in shapes if len(s) >= 2][-2:]
        if len(operands) == 2 and operands[0][-1] == operands[1][-2]:
            (*lead, m, k), n = operands[0], operands[1][-1]
            batch = 1
            for d in lead:
                batch *= d
            if len(operands[1]) == 2:  # a layer: the leading dimensions are rows
                batch, m = 1, batch * m
            gemm = Gemm(batch, m, n, k)
            e = precision.bytes
            operand_reads = (
                TensorAccess(f"{node.name}#{node.id}.a", gemm.batch * m * k * e),
                TensorAccess(f"{node.name}#{node.id}.b", (gemm.batch if len(operands[1]) > 2 else 1) * k * n * e),
            )
            out = TensorAccess(f"{node.name}#{node.id}.out", gemm.batch * m * n * e)
            return Op(
                node.name, OpKind.MATMUL, Phase.FORWARD, flops or 2 * gemm.macs, operand_reads, (out,), deps, gemm
            )
    reads = (TensorAccess(f"{node.name}#{node.id}.tensors", size),)
    return Op(node.name, OpKind.ELEMENTWISE, Phase.FORWARD, flops, reads, (), deps)


def _order(nodes: list[Any], source: str) -> tuple[list[int], dict[int, int]]:
    """Node positions in dependency order (file order among ready ones), and id -> file position."""
    position: dict[int, int] = {}
    for index, node in enumerate(nodes):
        if node.id in position:
            raise SpecError(source, f"nodes[{index}].id", f"node id {node.id} appears twice")
        position[node.id] = index
    waiting = [0] * len(nodes)
    users: list[list[int]] = [[] for _ in nodes]
    for index, node in enumerate(nodes):
        for dep in {*node.data_deps, *node.ctrl_deps}:
            if dep not in position:
                raise SpecError(source, f"nodes[{index}].data_deps", f"node {node.id} depends on missing node {dep}")
            waiting[index] += 1
            users[position[dep]].append(index)
    import heapq

    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        index = heapq.heappop(ready)
        order.append(index)
        for user in users[index]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, user)
    if len(order) != len(nodes):
        raise SpecError(source, "nodes", "the dependencies form a cycle")
    return order, position


def read_chakra(path: str | os.PathLike[str], precision: Precision = Precision.FP16) -> ChakraTrace:
    """Read a Chakra ET (see the module docstring); ``precision`` prices foreign matrix nodes' operands."""
    source = str(path)
    data = _decompress(read_model_bytes(Path(path), source), source)
    messages = _messages(data, source)
    if not messages:
        raise SpecError(source, "", "file is empty")
    schema = _schema()
    from google.protobuf.message import DecodeError

    try:
        meta = schema["GlobalMetadata"].FromString(messages[0])
        nodes = [schema["Node"].FromString(m) for m in messages[1:]]
    except (DecodeError, ValueError, RecursionError) as err:
        raise SpecError(source, "", f"not a Chakra execution trace ({err})") from None
    header = _attrs(meta)
    ours = header.get("archsim.schema_version") == 1
    order, position = _order(nodes, source)
    slot: dict[int, int] = {}  # file position -> position in the sorted node list
    entries: list[tuple[str, int]] = []
    all_deps: list[tuple[int, ...]] = []
    ops: list[Op] = []
    comms: list[CommNode] = []
    op_deps: list[set[int]] = []  # per sorted node: the ops it waits for, through any chain
    for rank, index in enumerate(order):
        node = nodes[index]
        field = f"nodes[{index}]"
        slot[index] = rank
        deps = tuple(sorted({slot[position[d]] for d in (*node.data_deps, *node.ctrl_deps)}))
        reach: set[int] = set()
        for d in deps:
            kind, j = entries[d]
            reach |= {j} if kind == "op" else op_deps[d]
        attrs = _attrs(node)
        if node.type == COMP_NODE:
            op_reach = tuple(sorted(reach))
            op = (
                _archsim_op(node, attrs, op_reach, source, field)
                if "archsim.kind" in attrs
                else _foreign_op(node, attrs, op_reach, precision, source, field)
            )
            entries.append(("op", len(ops)))
            ops.append(op)
        elif node.type in (COMM_COLL_NODE, COMM_SEND_NODE, COMM_RECV_NODE):
            if node.type == COMM_COLL_NODE:
                comm_type = attrs.get("comm_type", 0)
                found = COLLECTIVES.get(comm_type) if isinstance(comm_type, int) else None
                if found is None:
                    raise SpecError(source, f"{field}.comm_type", f"unknown collective type {comm_type!r}")
                collective = found
            else:
                collective = "send" if node.type == COMM_SEND_NODE else "recv"
            size = _count(attrs.get("comm_size", 0), source, f"{field}.comm_size")
            entries.append(("comm", len(comms)))
            comms.append(CommNode(node.name, collective, size, deps))
        else:
            entries.append(("none", index))
        op_deps.append(reach)
        all_deps.append(deps)
    if not ops and not comms:  # a step of no op has no time to divide by
        raise SpecError(source, "nodes", "no compute or communication node")
    if ours:
        if len(ops) != len(nodes) or order != list(range(len(nodes))):
            raise SpecError(source, "nodes", "an archsim trace must hold compute nodes only, in order")
        ops = [_check_own_deps(op, i, nodes[i], source) for i, op in enumerate(ops)]
    trace = _trace(header, ops, source, ours, precision)
    return ChakraTrace(trace, tuple(comms), tuple(entries), tuple(all_deps))


def _check_own_deps(op: Op, index: int, node: Any, source: str) -> Op:
    deps = tuple(int(d) for d in node.data_deps)
    if any(d >= index for d in deps):
        raise SpecError(source, f"nodes[{index}].data_deps", "an op depends on a later op")
    return Op(op.name, op.kind, op.phase, op.flops, op.reads, op.writes, deps, op.gemm, op.conv)


def _trace(header: dict[str, Any], ops: list[Op], source: str, ours: bool, precision: Precision) -> Trace:
    if not ours:
        return Trace(Path(source).stem, Mode.INFER, 1, precision, tuple(ops), 0, 0, None, {"source": "chakra"})
    try:
        seq = header.get("archsim.seq_len")
        trace = Trace(
            name=str(header["archsim.name"]),
            mode=Mode(header["archsim.mode"]),
            batch=_count(header["archsim.batch"], source, "metadata.archsim.batch"),
            precision=Precision(header["archsim.precision"]),
            ops=tuple(ops),
            parameters=_count(header["archsim.parameters"], source, "metadata.archsim.parameters"),
            memory_bytes=_count(header["archsim.memory_bytes"], source, "metadata.archsim.memory_bytes"),
            seq_len=None if seq is None else _count(seq, source, "metadata.archsim.seq_len"),
            meta={k.removeprefix("archsim.meta."): str(v) for k, v in header.items() if k.startswith("archsim.meta.")},
        )
    except KeyError as err:
        raise SpecError(source, "metadata", f"missing attribute {err.args[0]}") from None
    except ValueError as err:
        raise SpecError(source, "metadata", str(err)) from None
    if trace.batch < 1:
        raise SpecError(source, "metadata.archsim.batch", "must be positive")
    return trace
