"""Normalization nodes -> ``layernorm`` ops, and RMSNorm written out in element-wise nodes found as one.

Layer, instance and group normalization cost the built-in ``norm`` (5 FLOPs per element; training
writes a mean and an inverse deviation per normalized row, fp32). RMS normalization -- the
``RMSNormalization`` node, or the chain a PyTorch RMSNorm exports as, ``Pow(x, 2) -> ReduceMean ->
Add(eps) -> Sqrt -> Reciprocal`` (or ``Div(1, .)``) ``-> Mul(x, .) [-> Mul(., gain)]`` -- is a norm
too: a per-row statistic (the mean square) scales every element. It costs the built-in decoder's
``rmsnorm`` (4 FLOPs per element: square, sum, a fused rsqrt scale and gain) and training writes one
statistic per row, as :mod:`archsim.workloads.decoder` prices Llama's norms.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from archsim.workloads.graph import ELEMENT_FLOPS, STAT_BYTES, BackwardRule
from archsim.workloads.onnx_import.load import node_attrs
from archsim.workloads.trace import OpKind, TensorAccess

if TYPE_CHECKING:
    from archsim.workloads.onnx_import.importer import Importer


def _sole_consumer(consumers: dict[str, list[int]], nodes: Sequence[Any], name: str, op_type: str) -> int | None:
    found = consumers.get(name, [])
    return found[0] if len(found) == 1 and nodes[found[0]].op_type == op_type else None


def find_rms_norms(
    graph: Any, outputs: set[str], weights: set[str]
) -> tuple[dict[int, tuple[str, str | None]], set[int]]:
    """RMSNorm chains in ``graph``: ``{index of the last node: (x, gain or None)}`` and the inner nodes.

    ``outputs`` (the graph's outputs) are never inner: a chain whose step is an output stays apart. A
    final ``Mul`` joins the chain when its other input is one of ``weights`` (the gain).
    """
    nodes = list(graph.node)
    consumers: dict[str, list[int]] = {}
    for index, node in enumerate(nodes):
        for name in node.input:
            if name:
                consumers.setdefault(name, []).append(index)
    for name in outputs:
        consumers.setdefault(name, []).append(-1)
    fused: dict[int, tuple[str, str | None]] = {}
    inner: set[int] = set()

    def follow(index: int | None, op_type: str) -> int | None:
        return None if index is None else _sole_consumer(consumers, nodes, nodes[index].output[0], op_type)

    for index, node in enumerate(nodes):
        if node.op_type != "Pow" or node.domain not in ("", "ai.onnx"):
            continue
        x = node.input[0]
        add = follow(follow(index, "ReduceMean"), "Add")
        root = follow(add, "Sqrt")
        inverse = follow(root, "Reciprocal")
        if inverse is None and root is not None:  # 1 / sqrt(...) written as a division
            inverse = follow(root, "Div")
            if inverse is not None and nodes[inverse].input[1] != nodes[root].output[0]:
                inverse = None
        scaled = follow(inverse, "Mul")
        if inverse is None or scaled is None or x not in nodes[scaled].input:
            continue
        last, gain = scaled, None
        then = follow(scaled, "Mul")
        other = [n for n in nodes[then].input if n != nodes[scaled].output[0]] if then is not None else []
        if then is not None and len(other) == 1 and other[0] in weights:
            last, gain = then, other[0]
        chain = [index, follow(index, "ReduceMean"), add, root, inverse, scaled]
        fused[last] = (x, gain)
        inner.update(i for i in chain if i is not None and i != last)
    return fused, inner


def _emit(imp: Importer, index: int, node: Any, reads: list[TensorAccess], elements: int, rows: int, rms: bool) -> None:
    out = imp.out(node.output[0], node)
    name = imp.op_name(node, index)
    fwd, bwd = ELEMENT_FLOPS["rmsnorm" if rms else "norm"]
    if not imp.train:
        imp.g.add(name, OpKind.LAYERNORM, fwd * elements, reads, (out,))
        return
    stats = TensorAccess(f"{name}.saved_stats", (1 if rms else 2) * rows * STAT_BYTES)
    saved = (reads[0].name, *(t.name for t in reads[1:2]), stats.name)
    imp.g.add(name, OpKind.LAYERNORM, fwd * elements, reads, (out, stats), rule=BackwardRule(saved, bwd * elements))


def norm(imp: Importer, index: int, node: Any) -> None:
    """Layer, instance, group and RMS normalization nodes -> ``layernorm``."""
    info = imp.info(node.input[0], node)
    assert info.dims is not None
    last_axis = node.op_type in ("LayerNormalization", "RMSNormalization")
    axis = int(node_attrs(node).get("axis", -1 if last_axis else 2))
    axis = axis % len(info.dims) if info.dims else 0
    rows = math.prod(info.dims[:axis]) if last_axis else 1
    if node.op_type == "InstanceNormalization":
        rows = math.prod(info.dims[:2])
    elif node.op_type == "GroupNormalization":
        rows = info.dims[0] * int(node_attrs(node).get("num_groups", 1))
    rms = node.op_type == "RMSNormalization"
    _emit(imp, index, node, imp.reads(node, node.input[:3]), info.elements, rows, rms)


def rms_norm(imp: Importer, index: int, node: Any, x: str, gain: str | None) -> None:
    """An RMSNorm chain found by :func:`find_rms_norms`, ending at ``node`` -> one ``layernorm``."""
    info = imp.info(x, node)
    assert info.dims is not None
    rows = info.elements // max(1, info.dims[-1] if info.dims else 1)
    reads = [imp.access(x, node)] + ([imp.access(gain, node)] if gain is not None else [])
    _emit(imp, index, node, reads, info.elements, rows, rms=True)
