"""Chakra execution traces (MLCommons Chakra ET) read into archsim's trace, communication included.

The wire format and writing are in :mod:`archsim.workloads.chakra_format`; :func:`write_chakra` writes
any compute trace, and :func:`read_chakra` reads such a file back into an identical trace.

Reading a trace written by another tool (nodes without ``archsim.kind``): nodes are sorted by their
``data_deps`` and ``ctrl_deps`` (file order among ready nodes). A ``COMP_NODE`` becomes a ``matmul``
when its name is a matrix product (``mm``, ``bmm``, ``matmul``, ``addmm``, ``linear``, ``gemm``)
and ``inputs.shapes`` holds two operand shapes ``[..., M, K]`` and ``[..., K, N]``; otherwise an
``elementwise`` op of ``num_ops`` FLOPs that reads ``tensor_size`` bytes. A ``COMM_COLL_NODE`` (with
``comm_type`` and ``comm_size`` in bytes) becomes a communication op
(:attr:`~archsim.workloads.trace.OpKind.COMM`) of that collective over all chips (every rank is assumed
to run the same trace); ``COMM_SEND_NODE`` / ``COMM_RECV_NODE`` become sends and receives to one peer.
Such a trace runs on a system (:func:`archsim.engine.parallel.data_parallel_step` prices its
communication on the system's links). A communication node archsim wrote (one rank's step,
:mod:`archsim.workloads.chakra_export`) keeps its group and phase (``archsim.group``,
``archsim.phase``); ``ctrl_deps`` count as dependencies as ``data_deps`` do. Memory load/store and
metadata nodes have no cost: a dependency on one is a dependency on what it waits for. Bad files
(malformed, truncated, cyclic or dangling dependencies, over :data:`~archsim.limits.MAX_TRACE_OPS`
nodes) are :class:`~archsim.errors.SpecError`; the protobuf package is needed
(``pip install 'archsim[chakra]'``).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from archsim.errors import LimitError, SpecError
from archsim.limits import MAX_DIM, MAX_INT
from archsim.spec.common import Precision
from archsim.workloads.chakra_format import (
    COMM_COLL_NODE,
    COMM_RECV_NODE,
    COMM_SEND_NODE,
    COMP_NODE,
    attributes,
    chakra_bytes,
    decompress,
    messages,
    schema,
    write_chakra,
)
from archsim.workloads.onnx_import.load import read_model_bytes
from archsim.workloads.trace import (
    CommGroup,
    CommKind,
    ConvShape,
    Gemm,
    Mode,
    Op,
    OpKind,
    Phase,
    Role,
    TensorAccess,
    Trace,
)
from archsim.workloads.transforms import comm_op

__all__ = ["SUFFIXES", "chakra_bytes", "is_chakra", "read_chakra", "write_chakra"]

SUFFIXES = (".et", ".chakra")
"""Workload names ending with one of these are Chakra execution traces."""
COLLECTIVES = {
    0: CommKind.ALL_REDUCE,
    1: CommKind.REDUCE,
    2: CommKind.ALL_GATHER,
    3: CommKind.GATHER,
    4: CommKind.SCATTER,
    5: CommKind.BROADCAST,
    6: CommKind.ALL_TO_ALL,
    7: CommKind.REDUCE_SCATTER,
    8: CommKind.REDUCE_SCATTER,
    9: CommKind.BARRIER,
}
"""Chakra's ``CollectiveCommType`` values (``REDUCE_SCATTER_BLOCK`` is a reduce-scatter)."""
_MATRIX_NAME = re.compile(r"(^|[^a-z])(mm|bmm|matmul|addmm|baddbmm|linear|gemm)([^a-z]|$)", re.IGNORECASE)


def is_chakra(workload: str) -> bool:
    """True when ``workload`` names a Chakra execution trace (``*.et``, ``*.chakra``)."""
    return workload.lower().endswith(SUFFIXES)


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
    if kind.is_comm:
        raise SpecError(source, f"{field}.archsim.kind", "communication is a COMM node, not a compute node")
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
            nbytes = precision.nbytes
            operand_reads = (
                TensorAccess(f"{node.name}#{node.id}.a", nbytes(gemm.batch * m * k)),
                TensorAccess(f"{node.name}#{node.id}.b", nbytes((gemm.batch if len(operands[1]) > 2 else 1) * k * n)),
            )
            out = TensorAccess(f"{node.name}#{node.id}.out", nbytes(gemm.batch * m * n))
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


def read_chakra(path: str | os.PathLike[str], precision: Precision = Precision.FP16) -> Trace:
    """Read a Chakra ET (see the module docstring); ``precision`` prices foreign matrix nodes' operands."""
    source = str(path)
    data = decompress(read_model_bytes(Path(path), source), source)
    framed = messages(data, source)
    if not framed:
        raise SpecError(source, "", "file is empty")
    message = schema()
    from google.protobuf.message import DecodeError

    try:
        meta = message["GlobalMetadata"].FromString(framed[0])
        nodes = [message["Node"].FromString(m) for m in framed[1:]]
    except (DecodeError, ValueError, RecursionError) as err:
        raise SpecError(source, "", f"not a Chakra execution trace ({err})") from None
    header = attributes(meta)
    ours = header.get("archsim.schema_version") == 1
    order, position = _order(nodes, source)
    slot: dict[int, int] = {}  # file position -> position in the sorted node list
    stands_for: list[frozenset[int]] = []  # per sorted node: the ops (their indices) a dependency on it means
    ops: list[Op] = []
    for rank, index in enumerate(order):
        node = nodes[index]
        field = f"nodes[{index}]"
        slot[index] = rank
        ranks = {slot[position[d]] for d in (*node.data_deps, *node.ctrl_deps)}
        deps = tuple(sorted(set().union(*(stands_for[r] for r in ranks))))
        attrs = attributes(node)
        if node.type == COMP_NODE:
            op = (
                _archsim_op(node, attrs, deps, source, field)
                if "archsim.kind" in attrs
                else _foreign_op(node, attrs, deps, precision, source, field)
            )
        elif node.type in (COMM_COLL_NODE, COMM_SEND_NODE, COMM_RECV_NODE):
            op = _comm_op(node, attrs, deps, source, field)
        else:  # no cost: a dependency on it is one on what it waits for
            stands_for.append(frozenset(deps))
            continue
        stands_for.append(frozenset((len(ops),)))
        ops.append(op)
    if not ops:  # a step of no op has no time to divide by
        raise SpecError(source, "nodes", "no compute or communication node")
    if ours:
        if len(ops) != len(nodes) or order != list(range(len(nodes))):
            raise SpecError(
                source, "nodes", "an archsim trace must hold compute and communication nodes only, in order"
            )
        ops = [_check_own_deps(op, i, nodes[i], source) for i, op in enumerate(ops)]
    return _trace(header, ops, source, ours, precision)


def _comm_op(node: Any, attrs: dict[str, Any], deps: tuple[int, ...], source: str, field: str) -> Op:
    """A communication op: a collective over all chips, or a send or receive to one peer."""
    if node.type == COMM_COLL_NODE:
        comm_type = attrs.get("comm_type", 0)
        found = COLLECTIVES.get(comm_type) if isinstance(comm_type, int) else None
        if found is None:
            raise SpecError(source, f"{field}.comm_type", f"unknown collective type {comm_type!r}")
        kind, group = found, CommGroup.ALL
    else:
        kind, group = (CommKind.SEND if node.type == COMM_SEND_NODE else CommKind.RECV), CommGroup.PEER
    size = _count(attrs.get("comm_size", 0), source, f"{field}.comm_size")
    if "archsim.group" not in attrs:
        return comm_op(node.name, kind, size, deps, group)
    try:  # written by archsim: its group and phase as they were
        group, phase = CommGroup(attrs["archsim.group"]), Phase(attrs.get("archsim.phase", ""))
    except ValueError as err:
        raise SpecError(source, f"{field}.archsim.group", str(err)) from None
    return comm_op(node.name, kind, size, deps, group, phase)


def _check_own_deps(op: Op, index: int, node: Any, source: str) -> Op:
    deps = tuple(sorted({int(d) for d in (*node.data_deps, *node.ctrl_deps)}))
    if any(d >= index for d in deps):
        raise SpecError(source, f"nodes[{index}].data_deps", "an op depends on a later op")
    return op.with_deps(deps)


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
