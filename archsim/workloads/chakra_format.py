"""The Chakra execution trace wire format (MLCommons Chakra ET, protobuf), and writing a trace in it.

File layout, as Chakra's ``protolib`` writes it: a ``GlobalMetadata`` message, then one ``Node``
message per node, each message preceded by its length as a varint (a gzip-compressed file is read
too: :func:`messages`). The messages are built at run time from the subset of Chakra's schema written
out in :func:`schema`, with Chakra's own field numbers (``schema/protobuf/et_def.proto`` of
github.com/mlcommons/chakra at commit a1120ddcb50bb3f436a94c8abb40654907f263a6), in a private
descriptor pool so that Chakra's own generated classes can be imported beside it.

Writing (:func:`write_chakra`): every op is a ``COMP_NODE`` with ``id`` its index, ``data_deps`` its
deps, and the attributes Chakra's feeder reads -- ``num_ops`` (int64: the op's FLOPs),
``tensor_size`` (uint64: its bytes read and written) and ``is_cpu_op`` (false) -- plus ``archsim.*``
attributes that keep everything else (kind, phase, tensors, Gemm and convolution shapes); the
trace's own fields are ``archsim.*`` attributes of the metadata. Other tools ignore attributes they
do not know, and :func:`archsim.workloads.chakra.read_chakra` reads such a file back into an identical
trace. A trace with communication ops is not written (a trace file holds one chip's compute).

One rank's step (:mod:`archsim.workloads.chakra_export`) is written by :func:`chakra_bytes` with
``durations_s`` -- each compute node's ``duration_micros`` (uint64 microseconds, rounded, as the
schema defines it; the exact seconds in ``archsim.duration_s``) -- and ``comm``, the attributes of
its communication ops: a collective is a ``COMM_COLL_NODE`` with ``comm_type`` (Chakra's
``CollectiveCommType``), ``comm_size`` (bytes) and ``pg_name`` (its process group), a send or
receive a ``COMM_SEND_NODE`` / ``COMM_RECV_NODE`` with ``comm_src``, ``comm_dst`` and ``comm_tag``
(int32, as Chakra's feeder reads them) and ``comm_size``; each also keeps ``archsim.group``, its
:class:`~archsim.workloads.trace.CommGroup`, and ``archsim.phase``.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from archsim.errors import LimitError, SpecError, UsageError
from archsim.limits import MAX_CHAKRA_BYTES, MAX_TRACE_OPS
from archsim.outfile import write_file
from archsim.workloads.trace import CommKind, Op, TensorAccess, Trace

VERSION = "0.0.4"
"""The Chakra schema version written in the metadata."""
COMP_NODE, COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE = 4, 5, 6, 7
"""Chakra's ``NodeType`` values archsim reads."""
COMM_TYPES = {
    CommKind.ALL_REDUCE: 0,
    CommKind.REDUCE: 1,
    CommKind.ALL_GATHER: 2,
    CommKind.GATHER: 3,
    CommKind.SCATTER: 4,
    CommKind.BROADCAST: 5,
    CommKind.ALL_TO_ALL: 6,
    CommKind.REDUCE_SCATTER: 7,
    CommKind.BARRIER: 9,
}
"""Chakra's ``CollectiveCommType`` value of each collective archsim writes."""
INT32_ATTRIBUTES = frozenset({"comm_src", "comm_dst", "comm_tag"})
"""Integer attributes Chakra's feeder reads as ``int32_val``."""


def _field(name: str, number: int, kind: int, label: int = 1, type_name: str = "", oneof: int | None = None) -> Any:
    from google.protobuf import descriptor_pb2

    field = descriptor_pb2.FieldDescriptorProto(name=name, number=number, type=kind, label=label)
    if type_name:
        field.type_name = type_name
    if oneof is not None:
        field.oneof_index = oneof
    return field


@cache
def schema() -> dict[str, Any]:
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
    elif isinstance(value, float):
        attr.double_val = value
    elif isinstance(value, int):
        if name in INT32_ATTRIBUTES:
            attr.int32_val = value
        elif unsigned:
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


def chakra_bytes(
    trace: Trace,
    *,
    durations_s: Sequence[float] | None = None,
    comm: Mapping[int, Mapping[str, object]] | None = None,
) -> bytes:
    """The Chakra ET of ``trace`` (see the module docstring).

    ``durations_s``: each op's time (compute nodes' ``duration_micros``); ``comm``: the attributes of
    each communication op, by op index. A trace with communication ops and no ``comm`` is refused.
    """
    if trace.has_comm and comm is None:
        raise UsageError(trace.name, "", "has communication ops: only one chip's compute is written as a Chakra ET")
    message = schema()
    meta = message["GlobalMetadata"](version=VERSION)
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
        if op.comm is not None:
            assert comm is not None
            chunks.append(_comm_node(message["Node"], index, op, comm[index]).SerializeToString())
            continue
        node = message["Node"](id=index, name=op.name, type=COMP_NODE, data_deps=op.deps)
        if durations_s is not None:
            node.duration_micros = round(durations_s[index] * 1e6)
            _attr(node, "archsim.duration_s", float(durations_s[index]))
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


def _comm_node(node_class: Any, index: int, op: Op, attributes: Mapping[str, object]) -> Any:
    """The node of communication op ``op`` (see the module docstring)."""
    assert op.comm is not None
    kind = op.comm.kind
    if kind.is_point_to_point:
        node_type = COMM_SEND_NODE if kind is CommKind.SEND else COMM_RECV_NODE
    else:
        node_type = COMM_COLL_NODE
    node = node_class(id=index, name=op.name, type=node_type, data_deps=op.deps)
    _attr(node, "is_cpu_op", False)
    if node_type == COMM_COLL_NODE:
        _attr(node, "comm_type", COMM_TYPES[kind])
    _attr(node, "comm_size", op.comm.bytes)
    for name, value in attributes.items():
        _attr(node, name, value)
    _attr(node, "archsim.group", op.comm.group.value)
    _attr(node, "archsim.phase", op.phase.value)
    return node


def write_chakra(trace: Trace, path: str | os.PathLike[str]) -> None:
    """Write ``trace`` as a Chakra ET; :func:`read_chakra` reads it back into an identical trace."""
    write_file(path, chakra_bytes(trace))


# -- reading -------------------------------------------------------------------------------------


def messages(data: bytes, source: str) -> list[bytes]:
    """Split length-delimited messages; a truncated or malformed stream is a SpecError."""
    found: list[bytes] = []
    pos = 0
    while pos < len(data):
        length = shift = 0
        while True:
            if pos >= len(data) or shift > 35:
                raise SpecError(source, f"message {len(found)}", "truncated or malformed length prefix")
            byte = data[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if pos + length > len(data):
            raise SpecError(
                source, f"message {len(found)}", f"truncated: {length} bytes announced, {len(data) - pos} left"
            )
        found.append(data[pos : pos + length])
        pos += length
        if len(found) > MAX_TRACE_OPS + 1:
            raise LimitError(source, "nodes", f"more than the {MAX_TRACE_OPS} allowed")
    return found


def _value(attr: Any) -> Any:
    which = attr.WhichOneof("value")
    if which is None:
        return None
    value = getattr(attr, which)
    return list(value.values) if which.endswith("_list") else value


def attributes(message: Any) -> dict[str, Any]:
    """A message's attributes by name (list values as lists)."""
    return {a.name: _value(a) for a in message.attr}


_CHUNK_BYTES = 2**20
"""Bytes decompressed at a time."""


def decompress(data: bytes, source: str) -> bytes:
    """``data`` gunzipped when it is a gzip stream (within :data:`~archsim.limits.MAX_CHAKRA_BYTES`)."""
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
