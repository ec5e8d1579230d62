"""Chakra's official ET schema, for tests: messages built at run time from a transcription of
``schema/protobuf/et_def.proto`` of github.com/mlcommons/chakra at commit
a1120ddcb50bb3f436a94c8abb40654907f263a6 (every field of GlobalMetadata, Node, IOInfo and the
scalar and list values of AttributeProto used by Chakra's feeder, with the official numbers, and the
NodeType and CollectiveCommType enums), independent of archsim's own subset in
``archsim/workloads/chakra.py``; plus the encoder of Chakra's ``protolib.encodeMessage`` (a varint
length, then the message).
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.internal.encoder import _VarintBytes

F = descriptor_pb2.FieldDescriptorProto
NODE_TYPES = [
    "INVALID_NODE",
    "METADATA_NODE",
    "MEM_LOAD_NODE",
    "MEM_STORE_NODE",
    "COMP_NODE",
    "COMM_SEND_NODE",
    "COMM_RECV_NODE",
    "COMM_COLL_NODE",
]
COMM_TYPES = [
    "ALL_REDUCE",
    "REDUCE",
    "ALL_GATHER",
    "GATHER",
    "SCATTER",
    "BROADCAST",
    "ALL_TO_ALL",
    "REDUCE_SCATTER",
    "REDUCE_SCATTER_BLOCK",
    "BARRIER",
]
VALUES = [
    ("double_val", 3, F.TYPE_DOUBLE),
    ("float_val", 5, F.TYPE_FLOAT),
    ("int32_val", 7, F.TYPE_INT32),
    ("int64_val", 9, F.TYPE_INT64),
    ("uint32_val", 11, F.TYPE_UINT32),
    ("uint64_val", 13, F.TYPE_UINT64),
    ("sint32_val", 15, F.TYPE_SINT32),
    ("sint64_val", 17, F.TYPE_SINT64),
    ("bool_val", 27, F.TYPE_BOOL),
    ("string_val", 29, F.TYPE_STRING),
    ("bytes_val", 31, F.TYPE_BYTES),
]


def _fields(message: Any, *fields: tuple[str, int, int, int, str]) -> None:
    for name, number, kind, label, type_name in fields:
        field = message.field.add(name=name, number=number, type=kind, label=label)
        if type_name:
            field.type_name = type_name


def messages() -> dict[str, Any]:
    proto = descriptor_pb2.FileDescriptorProto(name="et_def.proto", package="ChakraProtoMsg", syntax="proto3")
    opt, rep = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    attr = proto.message_type.add(name="AttributeProto")
    attr.oneof_decl.add(name="value")
    _fields(attr, ("name", 1, F.TYPE_STRING, opt, ""), ("doc_string", 2, F.TYPE_STRING, opt, ""))
    for name, number, kind in VALUES:
        attr.field.add(name=name, number=number, type=kind, label=opt, oneof_index=0)
    for name, number, kind in (("int64_list", 10, F.TYPE_INT64), ("string_list", 30, F.TYPE_STRING)):
        list_name = "Int64List" if kind == F.TYPE_INT64 else "StringList"
        _fields(proto.message_type.add(name=list_name), ("values", 1, kind, rep, ""))
        attr.field.add(
            name=name,
            number=number,
            type=F.TYPE_MESSAGE,
            label=opt,
            oneof_index=0,
            type_name=f".ChakraProtoMsg.{list_name}",
        )
    _fields(
        proto.message_type.add(name="GlobalMetadata"),
        ("version", 1, F.TYPE_STRING, opt, ""),
        ("attr", 2, F.TYPE_MESSAGE, rep, ".ChakraProtoMsg.AttributeProto"),
    )
    for enum_name, values in (("NodeType", NODE_TYPES), ("CollectiveCommType", COMM_TYPES)):
        enum = proto.enum_type.add(name=enum_name)
        for number, value in enumerate(values):
            enum.value.add(name=value, number=number)
    _fields(
        proto.message_type.add(name="IOInfo"),
        ("values", 1, F.TYPE_STRING, opt, ""),
        ("shapes", 2, F.TYPE_STRING, opt, ""),
        ("types", 3, F.TYPE_STRING, opt, ""),
    )
    _fields(
        proto.message_type.add(name="Node"),
        ("id", 1, F.TYPE_UINT64, opt, ""),
        ("name", 2, F.TYPE_STRING, opt, ""),
        ("type", 3, F.TYPE_ENUM, opt, ".ChakraProtoMsg.NodeType"),
        ("ctrl_deps", 4, F.TYPE_UINT64, rep, ""),
        ("data_deps", 5, F.TYPE_UINT64, rep, ""),
        ("start_time_micros", 6, F.TYPE_UINT64, opt, ""),
        ("duration_micros", 7, F.TYPE_UINT64, opt, ""),
        ("inputs", 8, F.TYPE_MESSAGE, opt, ".ChakraProtoMsg.IOInfo"),
        ("outputs", 9, F.TYPE_MESSAGE, opt, ".ChakraProtoMsg.IOInfo"),
        ("attr", 10, F.TYPE_MESSAGE, rep, ".ChakraProtoMsg.AttributeProto"),
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {
        n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"ChakraProtoMsg.{n}"))
        for n in ("GlobalMetadata", "Node", "AttributeProto", "IOInfo")
    }


def encode(*messages: Any) -> bytes:
    """What ``protolib.encodeMessage`` writes for each message, one after the other."""
    return b"".join(_VarintBytes(m.ByteSize()) + m.SerializeToString() for m in messages)
