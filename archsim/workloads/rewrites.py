"""Graph rewrites of a software stack (:class:`~archsim.spec.software.Rewrite`), as forward-graph transforms.

:func:`apply_rewrites` runs on the forward graph before the training derivation, in a fixed order:

1. ``fold-batchnorm`` (inference): a batch-norm whose input is a convolution's output, read by
   nothing else, is folded into the convolution (an inference engine scales the filter and adds
   the shift as a bias when it builds the engine): the batch-norm op, its FLOPs and its reads of
   scale, shift and running statistics disappear, and the convolution writes the batch-norm's output.
2. ``fuse-attention`` (inference): the score product ``Q @ K^T``, the element-wise ops and the softmax
   after it, and the context product ``P @ V`` run as one kernel (a fused multi-head-attention
   kernel): the score matrix never reaches memory. The fused op is a matrix op whose product stands
   for both (``batch`` doubled: the two products have the same shape up to a transpose and the same
   MACs); its FLOPs are its members'.
3. ``norm-act`` (:mod:`archsim.workloads.fusion`): element-wise ops after a normalization become its
   epilogue.
4. ``fuse-elementwise``: element-wise ops become the epilogue of the op that produced their input,
   whatever its kind, under the same conditions as norm-act. In training a matrix op keeps no
   epilogue (its backward products follow from its shape alone), so there only non-matrix producers
   take element-wise consumers.
5. ``channels-first``: each convolution reads its activation through a transpose to channels-last and
   writes its output through a transpose back, two element-wise copies of no FLOPs (cuDNN's transpose
   kernels around a tensor-core convolution of NCHW data: NVIDIA's tensor cores read NHWC, and a
   framework that keeps NCHW pays a transpose before and after each convolution; PyTorch's
   channels-last memory format exists to avoid them). Their backward ops transpose the gradients back,
   as cuDNN does around the data- and weight-gradient convolutions. Applied last: they are kernels of
   their own, inside the convolution's library call, which no framework fuses.

``recompute`` is applied by the training derivation (:mod:`archsim.workloads.training`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from archsim.spec.common import Fusion
from archsim.spec.software import Rewrite
from archsim.workloads.fusion import fuse, fuse_epilogues, regroup
from archsim.workloads.graph import BackwardRule, ForwardGraph
from archsim.workloads.trace import COMPUTE_KINDS, Gemm, Mode, Op, OpKind, Role

NON_MATRIX = frozenset(kind for kind in COMPUTE_KINDS if not kind.is_matrix)
"""Kinds that take element-wise epilogues in a training graph."""


def apply_rewrites(graph: ForwardGraph, rewrites: frozenset[Rewrite], mode: Mode) -> ForwardGraph:
    """``graph`` with the rewrites applied in the order of the module docstring."""
    if mode is Mode.INFER and Rewrite.FOLD_BATCHNORM in rewrites:
        graph = regroup(graph, _batchnorm_groups(graph), _folded)
    if mode is Mode.INFER and Rewrite.FUSE_ATTENTION in rewrites:
        graph = regroup(graph, _attention_groups(graph), _attention)
    if Rewrite.NORM_ACT in rewrites:
        graph = fuse(graph, Fusion.NORM_ACT)
    if Rewrite.FUSE_ELEMENTWISE in rewrites:
        graph = fuse_epilogues(graph, None if mode is Mode.INFER else NON_MATRIX)
    if Rewrite.CHANNELS_FIRST in rewrites:
        graph = _channels_first(graph)
    return graph


def _channels_first(graph: ForwardGraph) -> ForwardGraph:
    """``graph`` with every convolution between a transpose of its input and one of its output."""
    ops: list[Op] = []
    rules: dict[int, BackwardRule] = {}
    blocks: list[int] = []
    core: set[int] = set()
    position: list[int] = []  # per old op: the new index later ops depend on
    for index, op in enumerate(graph.ops):
        deps = tuple(sorted({position[d] for d in op.deps}))
        block = graph.blocks[index] if graph.blocks else 0
        source = _first_activation(op) if op.kind is OpKind.CONV else None
        out = _output(op) if op.kind is OpKind.CONV else None
        if source is None or out is None:
            new = replace(op, deps=deps)
            carried = [(new, graph.rules.get(index))]
        else:
            x = next(t for t in op.reads if t.name == source)
            y = next(t for t in op.writes if t.name == out)
            x_last, y_last = replace(x, name=f"{x.name}.nhwc"), replace(y, name=f"{y.name}.nhwc")
            name, kind = f"{op.name}.nchw_to_nhwc", OpKind.ELEMENTWISE
            before = replace(
                op, name=name, kind=kind, flops=0, reads=(x,), writes=(x_last,), deps=deps, gemm=None, conv=None
            )
            start = len(ops)
            reads = tuple(x_last if t.name == source else t for t in op.reads)
            writes = tuple(y_last if t.name == out else t for t in op.writes)
            conv = replace(op, reads=reads, writes=writes, deps=tuple(sorted({*deps, start})))
            after = replace(before, name=f"{op.name}.nhwc_to_nchw", reads=(y_last,), writes=(y,), deps=(start + 1,))
            copy = BackwardRule(saved=(), flops=0)  # the gradient's transpose back
            carried = [(before, copy), (conv, graph.rules.get(index)), (after, copy)]
        for new, rule in carried:
            if rule is not None:
                rules[len(ops)] = rule
            if index in graph.core:
                core.add(len(ops))
            ops.append(new)
            blocks.append(block)
        position.append(len(ops) - 1)
    loss = graph.loss
    if loss is not None:
        loss = replace(loss, deps=tuple(sorted({position[d] for d in loss.deps})))
    return replace(
        graph,
        ops=tuple(ops),
        rules=rules,
        loss=loss,
        blocks=tuple(blocks) if graph.blocks else (),
        core=frozenset(core),
    )


def _readers(graph: ForwardGraph) -> dict[str, list[int]]:
    readers: dict[str, list[int]] = defaultdict(list)
    for index, op in enumerate((*graph.ops, *([graph.loss] if graph.loss is not None else []))):
        for t in op.reads:
            readers[t.name].append(index)
    return readers


def _first_activation(op: Op) -> str | None:
    return next((t.name for t in op.reads if t.role is Role.ACTIVATION), None)


def _output(op: Op) -> str | None:
    return next((t.name for t in op.writes if t.role is Role.ACTIVATION), None)


def _private(graph: ForwardGraph, readers: dict[str, list[int]], name: str | None, reader: int) -> bool:
    """True when ``name`` is read by ``reader`` only and is not an output of the graph."""
    return name is not None and readers[name] == [reader] and name not in graph.grad_outputs


def _batchnorm_groups(graph: ForwardGraph) -> list[list[int]]:
    readers = _readers(graph)
    producer = {t.name: i for i, op in enumerate(graph.ops) for t in op.writes}
    folded: dict[int, int] = {}
    for index, op in enumerate(graph.ops):
        source = _first_activation(op)
        conv = producer.get(source) if source is not None else None
        if (
            op.kind is OpKind.BATCHNORM
            and conv is not None
            and graph.ops[conv].kind is OpKind.CONV
            and _output(graph.ops[conv]) == source
            and _private(graph, readers, source, index)
        ):
            folded[conv] = index
    absorbed = set(folded.values())
    return [[i, folded[i]] if i in folded else [i] for i in range(len(graph.ops)) if i not in absorbed]


def _folded(graph: ForwardGraph, members: list[int]) -> tuple[Op, BackwardRule | None]:
    conv, bn = graph.ops[members[0]], graph.ops[members[1]]
    return replace(conv, name=f"{conv.name}+{bn.name.rsplit('.', 1)[-1]}", writes=bn.writes), None


def _attention_groups(graph: ForwardGraph) -> list[list[int]]:
    readers = _readers(graph)
    producer = {t.name: i for i, op in enumerate(graph.ops) for t in op.writes}
    chains: dict[int, list[int]] = {}
    for index, op in enumerate(graph.ops):
        if op.kind is not OpKind.SOFTMAX:
            continue
        chain = [index]
        head = index
        while True:  # back through element-wise ops to the score product
            source = _first_activation(graph.ops[head])
            before = producer.get(source) if source is not None else None
            if before is None or not _private(graph, readers, source, head):
                break
            chain.insert(0, before)
            head = before
            if graph.ops[before].kind is not OpKind.ELEMENTWISE:
                break
        tail = index
        while True:  # on through element-wise ops to the context product
            out = _output(graph.ops[tail])
            after = readers.get(out, []) if out is not None else []
            if len(after) != 1 or after[0] >= len(graph.ops) or not _private(graph, readers, out, after[0]):
                break
            chain.append(after[0])
            tail = after[0]
            if graph.ops[tail].kind is not OpKind.ELEMENTWISE:
                break
        first, last = graph.ops[chain[0]], graph.ops[chain[-1]]
        if (
            first.kind is OpKind.MATMUL
            and last.kind is OpKind.MATMUL
            and first.gemm is not None
            and last.gemm is not None
            and first.gemm.macs == last.gemm.macs
            and _first_activation(last) == _output(graph.ops[chain[-2]])
            and all(graph.ops[i].kind in (OpKind.ELEMENTWISE, OpKind.SOFTMAX) for i in chain[1:-1])
        ):
            chains[chain[0]] = chain
    absorbed = {i for chain in chains.values() for i in chain[1:]}
    return [chains.get(i, [i]) for i in range(len(graph.ops)) if i not in absorbed]


def _attention(graph: ForwardGraph, members: list[int]) -> tuple[Op, BackwardRule | None]:
    ops = [graph.ops[i] for i in members]
    first, last = ops[0], ops[-1]
    assert first.gemm is not None
    passed = {name for op in ops[:-1] if (name := _output(op)) is not None}
    reads = tuple({t.name: t for op in ops for t in op.reads if t.name not in passed}.values())
    g = first.gemm
    gemm = Gemm(2 * g.batch, g.m, g.n, g.k)
    name = f"{first.name.rsplit('.', 1)[0]}.fused_attention"
    flops = sum(op.flops for op in ops)
    return replace(first, name=name, flops=flops, reads=reads, writes=last.writes, gemm=gemm), None
