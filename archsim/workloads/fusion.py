"""Kernel fusion on a forward graph: element-wise epilogues folded into the normalization before them.

With :attr:`Fusion.NORM_ACT` an element-wise op joins the op that wrote its first activation input
when that op is a normalization (batch- or layer-norm, or a normalization that has already taken in
element-wise ops) and nothing else reads that tensor: batch-norm + ReLU, and batch-norm + add + ReLU
in a residual block, become one op. The fused op

* reads what its members read, except the tensors passed between them, and writes what they write
  except those tensors (which never reach memory);
* costs the sum of its members' FLOPs, forward and backward; its backward op saves the union of
  what the members' backward ops save, so a chain is fused only when no member's backward needs a
  tensor passed inside it;
* keeps the normalization's kind, and is named after its members: ``layer1.0.bn3+add+relu3``;
* takes the place of its last member in the trace (an add waits for its other input too).

Fusion happens before the training derivation, so the backward pass is fused the same way (one
backward op per fused op, writing the gradients of every member's inputs). Other graphs pass through
unchanged.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import replace

from archsim.spec.common import Fusion
from archsim.workloads.graph import BackwardRule, ForwardGraph
from archsim.workloads.trace import Op, OpKind, Role, TensorAccess

NORMS = frozenset({OpKind.BATCHNORM, OpKind.LAYERNORM})
"""Ops whose element-wise consumers become their epilogue."""


def fuse(graph: ForwardGraph, fusion: Fusion) -> ForwardGraph:
    """``graph`` with the ops ``fusion`` merges into one op each."""
    if fusion is Fusion.NONE or not graph.ops:
        return graph
    return regroup(graph, _groups(graph, NORMS))


def fuse_epilogues(graph: ForwardGraph, heads: frozenset[OpKind] | None) -> ForwardGraph:
    """``graph`` with element-wise ops fused into the op that produced their input.

    ``heads`` are the kinds that take element-wise epilogues (None: every kind); the conditions are
    those of norm-act fusion (the tensor passed on has no other reader and no backward op needs it).
    """
    return regroup(graph, _groups(graph, heads)) if graph.ops else graph


Merge = Callable[[ForwardGraph, list[int]], tuple[Op, BackwardRule | None]]
"""Builds the op (deps still in the old numbering) and backward rule of one group of ops."""


def regroup(graph: ForwardGraph, found: list[list[int]], merge: Merge | None = None) -> ForwardGraph:
    """``graph`` with each group of ``found`` (every forward op in exactly one) merged into one op."""
    # a fused op runs where its last member ran: an add also waits for its other input
    groups = sorted(found, key=lambda members: members[-1])
    if all(len(members) == 1 for members in groups):
        return graph
    merge = merge or _merged
    new_index: dict[int, int] = {}
    for position, members in enumerate(groups):
        for index in members:
            new_index[index] = position
    ops: list[Op] = []
    rules: dict[int, BackwardRule] = {}
    for position, members in enumerate(groups):
        op, rule = merge(graph, members) if len(members) > 1 else (graph.ops[members[0]], graph.rules.get(members[0]))
        deps = tuple(sorted({new_index[d] for i in members for d in graph.ops[i].deps} - {position}))
        ops.append(replace(op, deps=deps))
        if rule is not None:
            rules[position] = rule
    loss = graph.loss
    if loss is not None:
        loss = replace(loss, deps=tuple(sorted({new_index[d] for d in loss.deps})))
    # a fused op belongs to its last member's block, and to the recomputable core if all its members do
    blocks = tuple(graph.blocks[members[-1]] for members in groups) if graph.blocks else ()
    core = frozenset(p for p, members in enumerate(groups) if all(i in graph.core for i in members))
    return replace(graph, ops=tuple(ops), rules=rules, loss=loss, blocks=blocks, core=core)


def _groups(graph: ForwardGraph, heads: frozenset[OpKind] | None) -> list[list[int]]:
    """Forward ops in trace order, each as the list of ops fused into it (itself first)."""
    readers: dict[str, int] = defaultdict(int)
    for op in (*graph.ops, *([graph.loss] if graph.loss is not None else [])):
        for t in op.reads:
            readers[t.name] += 1
    producer: dict[str, int] = {}
    group_of: dict[int, list[int]] = {}
    groups: list[list[int]] = []
    for index, op in enumerate(graph.ops):
        first = next((t for t in op.reads if t.role is Role.ACTIVATION), None)
        group = group_of.get(producer[first.name]) if first is not None and first.name in producer else None
        if (
            op.kind is OpKind.ELEMENTWISE
            and first is not None
            and group is not None
            and (heads is None or graph.ops[group[0]].kind in heads)
            and readers[first.name] == 1
            and first.name not in graph.grad_outputs
            and first.name == _output(graph.ops[group[-1]])
            and not _saves_inside(graph, [*group, index])
        ):
            group.append(index)
        else:
            group = [index]
            groups.append(group)
        group_of[index] = group
        for t in op.writes:
            producer.setdefault(t.name, index)
    return groups


def _output(op: Op) -> str | None:
    """The tensor an op hands on: its first activation write."""
    return next((t.name for t in op.writes if t.role is Role.ACTIVATION), None)


def _passed(graph: ForwardGraph, members: list[int]) -> set[str]:
    """Tensors handed from one member of a chain to the next (never written to memory when fused)."""
    return {name for i in members[:-1] if (name := _output(graph.ops[i])) is not None}


def _saves_inside(graph: ForwardGraph, members: list[int]) -> bool:
    """True if a member's backward op would read a tensor that fusion keeps out of memory."""
    passed = _passed(graph, members)
    return any(name in passed for i in members for name in graph.rule(i).saved)


def _merged(graph: ForwardGraph, members: list[int]) -> tuple[Op, BackwardRule | None]:
    """The op (deps still in the old numbering) and backward rule of one group."""
    head = graph.ops[members[0]]
    if len(members) == 1:
        return head, graph.rules.get(members[0])
    passed = _passed(graph, members)
    ops = [graph.ops[i] for i in members]
    reads = _unique(t for op in ops for t in op.reads if t.name not in passed)
    last = ops[-1]
    writes = _unique([*last.writes, *(t for op in ops[:-1] for t in op.writes if t.name not in passed)])
    saved = _unique_names(name for i in members for name in graph.rule(i).saved)
    name = "+".join([head.name, *(op.name.rsplit(".", 1)[-1] for op in ops[1:])])
    op = replace(head, name=name, flops=sum(op.flops for op in ops), reads=reads, writes=writes)
    return op, BackwardRule(saved, sum(graph.rule(i).flops for i in members))


def _unique(tensors: Iterable[TensorAccess]) -> tuple[TensorAccess, ...]:
    """Each tensor once, by name, in first-seen order."""
    seen: dict[str, TensorAccess] = {}
    for t in tensors:
        seen.setdefault(t.name, t)
    return tuple(seen.values())


def _unique_names(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))
