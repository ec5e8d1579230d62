"""Derive a training step from any forward graph: loss, backward ops, one fused optimizer update.

The derivation is generic (it needs only the conventions of :mod:`archsim.workloads.graph`, so an
imported graph works as well as a built-in one):

1. The builder's loss op, if any, is appended after the forward ops.
2. Forward ops are visited in reverse order. An op gets backward ops only when one of its outputs
   has received a gradient (the loss is the root; a graph may also name outputs whose gradient
   arrives from outside) and one of its inputs needs one. Network inputs
   need none unless the graph names them in ``grad_inputs``; weights always do.

   * ``conv2d``: ``bwd_data`` (dX) unless X needs no gradient, and ``bwd_weight`` (dW); both keep
     the ConvShape. dW is the Gemm ``m = C*R*S, n = K, k = N*P*Q`` (dW transposed,
     so that its first read, X, is the A operand). dX is ``m = N*H*W, n = C,
     k = K*R*S`` for stride 1; for stride ``s > 1`` that view would multiply by ``s^2`` zeros
     inserted into dY, so dX is the GEMM + col2im form ``m = N*P*Q, n = C*R*S, k = K`` whose MACs
     equal the forward's.
   * ``matmul`` ``C[b,m,n] = A[b,m,k] @ B[b,k,n]``: dA is ``(b, m=M, n=K, k=N)`` reading dC and B;
     dB is ``(b, m=K, n=N, k=M)`` reading A and dC. dB is ``bwd_weight`` when B is a weight (bias
     gradients ride along) and a second ``bwd_data`` op when B is an activation (attention).
   * any other op: one ``.bwd`` op reading the output gradients and the tensors its
     :class:`~archsim.workloads.graph.BackwardRule` saves, writing a gradient for every input that
     needs one (norms: dX, dgamma, dbeta; embeddings: a ``bwd_weight`` scatter into the table rows).

   A gradient written by several ops (a tensor with several consumers, a tied weight) is accumulated:
   every writer after the first also reads it and depends on the previous writer; a non-matrix
   writer adds one FLOP per element, a matrix op accumulates in its epilogue. Matrix backward ops
   have ``flops = 2 * gemm.macs`` exactly: bias gradients (column sums of dC) are epilogue work too,
   as the bias add is in the forward.
3. With ``full`` recomputation of a graph without marked blocks (activation checkpointing, Chen et
   al. 2016, arXiv 1604.06174), the forward ops
   are cut into ``ceil(sqrt(n))`` contiguous segments of about equal op count. Only the checkpoints
   are kept from the forward pass: tensors a later segment (or the loss) reads, network inputs,
   everything the last segment saves (its backward runs first, while it is still live) and the side
   outputs of ops (norm statistics, dropout masks: small, and what frameworks keep). The other
   saved tensors of a segment are rebuilt by running again, just before the first backward op that
   needs one, the forward ops that lead to them from the checkpoints (phase ``recompute``, named
   ``NAME.recompute``, each writing only its main output); the backward ops then depend on those
   copies. The rebuilt tensors of one segment are live only during that segment's backward.

   A graph that marks its blocks (:attr:`~archsim.workloads.graph.ForwardGraph.blocks`: a decoder's
   layers) is cut at them instead, as Megatron-LM's full recomputation does (Korthikanti et al. 2022,
   arXiv 2205.05198, Sec. 5): each block's input is kept, and each block runs again whole, every
   output included -- a dropout mask is drawn again from the saved random state, a norm's statistics
   recomputed -- so a layer keeps ``2 s b h`` bytes (its fp16/bf16 input); the ops before the first
   block and in the last (a decoder's embeddings and head) keep what they save. ``selective``
   recomputation cuts at the graph's :attr:`~archsim.workloads.graph.ForwardGraph.core` ops (a
   decoder's attention core, scores to context) and reruns only those, the same way; everything
   else is kept.
4. One ``optimizer`` op (phase ``update``) over all parameters, depending on every op that writes a
   parameter gradient. Per parameter it reads the gradient (run precision), the fp32 master weight
   (the weight itself when the run is fp32) and the optimizer state, and writes the master weight,
   the state and, in mixed precision, the low-precision weight copy. State and FLOPs per parameter
   are :data:`OPTIMIZER_COST`.

Roles: parameter gradients are :attr:`Role.GRADIENT`; activation gradients are transient
:attr:`Role.ACTIVATION` tensors named ``NAME.grad``; master weights and moments are :attr:`Role.STATE`.
Dependencies: a backward op depends on the ops that wrote the gradients it reads and on the forward
ops whose saved outputs it reads.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from archsim.spec.common import BITS_PER_BYTE
from archsim.spec.model import Optimizer
from archsim.workloads.graph import ForwardGraph
from archsim.workloads.options import Recompute
from archsim.workloads.trace import Gemm, Op, OpKind, Phase, Role, TensorAccess

MASTER_BYTES = 4
"""Bytes of an fp32 master weight."""

OPTIMIZER_COST: Mapping[Optimizer, tuple[int, int]] = {
    Optimizer.SGD_MOMENTUM: (4, 6),  # momentum; weight decay 2, momentum 2, step 2 FLOPs
    Optimizer.ADAM: (8, 12),  # m and v; moments 5, bias-corrected step with sqrt and divide 7
    Optimizer.LAMB: (8, 16),  # as Adam, plus weight and update norms and the trust-ratio scale
}
"""Optimizer state bytes and FLOPs per parameter (fp32 state)."""

GRAD = ".grad"
"""Suffix of a gradient tensor's name."""
RECOMPUTE = ".recompute"
"""Suffix of the name of a forward op run again in the backward pass."""


@dataclass(frozen=True)
class TrainingStep:
    """The ops of a training step and what it keeps in memory from the forward pass."""

    ops: tuple[Op, ...]
    saved: frozenset[str]
    """Forward tensors (network inputs included, weights excluded) kept from the forward pass for
    backward ops to read."""
    recomputed_bytes: int = 0
    """Largest total of the tensors one segment rebuilds (live during its backward); 0 without
    recomputation."""


class _Segments:
    """Which forward tensors a recomputing step keeps, and which ops rebuild the others."""

    def __init__(
        self,
        fwd: list[Op],
        count: int,
        producer: Mapping[str, int],
        saved: Iterable[str],
        blocks: Sequence[int] = (),
        recomputable: frozenset[int] | None = None,
    ) -> None:
        """Segments of the ``count`` forward ops: ``blocks`` (one per op, non-decreasing) or ``sqrt(n)`` of them.

        With ``blocks``, only the segments in ``recomputable`` (None: all) rebuild anything, and a
        rebuilt segment runs whole, every output included (see the module docstring).
        """
        n = count  # the forward ops proper; the loss (index ``count``, if any) is never recomputed
        parts = math.isqrt(n - 1) + 1 if n > 1 else 1
        self.whole = bool(blocks)
        """True when a rebuilt segment runs whole and rebuilds side outputs too (marked blocks)."""
        self.segment = list(blocks) if blocks else [k * parts // n for k in range(n)]
        last = max(self.segment, default=0)
        crossing = {
            t.name
            for index, op in enumerate(fwd)
            for t in op.reads
            if t.name in producer
            and producer[t.name] < n
            and (index >= n or self.segment[producer[t.name]] < self.segment[index])
        }
        self.rebuilt: dict[int, set[str]] = {}
        """Per segment, the saved tensors it rebuilds."""
        main = {
            index: next((t.name for t in op.writes if t.role is Role.ACTIVATION), None) for index, op in enumerate(fwd)
        }
        for name in saved:
            index = producer.get(name)
            if index is None or index >= n or name in crossing or self.segment[index] == last:
                continue
            if (recomputable is not None and self.segment[index] not in recomputable) or (
                not self.whole and main[index] != name
            ):
                continue
            self.rebuilt.setdefault(self.segment[index], set()).add(name)
        self.fwd = fwd
        self.producer = producer
        self.crossing = crossing
        """Tensors a later segment reads: checkpoints, never rebuilt."""
        self.kept_output = {index for index, name in main.items() if name in crossing}
        """Forward ops whose main output is a checkpoint, in memory when the segment is rebuilt."""
        self._ops: dict[int, list[int]] = {}

    def ops_of(self, segment: int) -> list[int]:
        """Forward ops of ``segment`` rebuilding its tensors from the checkpoints, in trace order (found once)."""
        if segment not in self._ops:  # asked again for every saved tensor of the segment a backward op reads
            self._ops[segment] = self._find_ops(segment)
        return self._ops[segment]

    def _find_ops(self, segment: int) -> list[int]:
        if self.whole:
            return [index for index, s in enumerate(self.segment) if s == segment]
        wanted = {self.producer[name] for name in self.rebuilt[segment]}
        needed: set[int] = set()
        while wanted:
            index = wanted.pop()
            if index in needed:
                continue
            needed.add(index)
            wanted.update(d for d in self.fwd[index].deps if self.segment[d] == segment and d not in self.kept_output)
        return sorted(needed)


class _Backward:
    """State of one derivation: tensor sizes and producers, who wrote which gradient so far."""

    def __init__(self, graph: ForwardGraph, segments: _Segments | None = None) -> None:
        self.graph = graph
        self.segments = segments
        self.recomputed: dict[int, int] = {}
        """Forward op index -> index of its recomputed copy."""
        self.fwd: list[Op] = [*graph.ops, *([graph.loss] if graph.loss is not None else [])]
        self.precision = graph.precision
        self.producer: dict[str, int] = {}
        self.size: dict[str, int] = {}
        for index, op in enumerate(self.fwd):
            for t in op.writes:
                if t.name not in self.producer:
                    self.producer[t.name] = index
                    self.size[t.name] = t.bytes
        self.needs: set[str] = set(graph.grad_inputs)
        for op in self.fwd:
            for t in op.reads:
                if t.name not in self.producer:
                    self.size[t.name] = max(self.size.get(t.name, 0), t.bytes)
                if t.role is Role.WEIGHT:
                    self.needs.add(t.name)
            if any(t.name in self.needs for t in op.reads):
                self.needs.update(t.name for t in op.writes if t.role is Role.ACTIVATION)
        self.ops: list[Op] = list(self.fwd)
        self.writers: dict[str, list[int]] = {}
        self.saved: set[str] = set()
        self.param_grad_ops: list[int] = []

    def saved_read(self, t: TensorAccess, deps: set[int]) -> TensorAccess:
        """A forward tensor read again by a backward op: recorded as saved (unless a weight)."""
        if t.role is not Role.ACTIVATION:
            return t
        self.saved.add(t.name)
        if t.name in self.producer:
            index = self.producer[t.name]
            if self.segments is not None and index < len(self.segments.segment):
                segment = self.segments.segment[index]
                if t.name in self.segments.rebuilt.get(segment, ()):
                    self.recompute(segment)
                    index = self.recomputed[index]
            deps.add(index)
        return TensorAccess(t.name, self.size[t.name])

    def recompute(self, segment: int) -> None:
        """Run the forward ops that rebuild ``segment``'s tensors again, unless done already."""
        assert self.segments is not None
        indices = self.segments.ops_of(segment)
        if indices[0] in self.recomputed:
            return
        after = len(self.ops) - 1  # runs once the backward ops before it have freed their memory
        for index in indices:
            op = self.fwd[index]
            deps = {self.recomputed.get(d, d) for d in op.deps}
            if after >= 0:
                deps.add(after)
            self.recomputed[index] = len(self.ops)
            # it rebuilds its main output; side outputs (statistics, masks) and running statistics are
            # kept, unless the segment runs whole (marked blocks)
            writes = tuple(t for t in op.writes if t.role is Role.ACTIVATION)
            writes = writes if self.segments.whole else writes[:1]
            # an op run again whose output is a checkpoint (kept) writes a copy no op reads
            crossing = self.segments.crossing
            writes = tuple(replace(t, name=t.name + RECOMPUTE) if t.name in crossing else t for t in writes)
            self.ops.append(
                replace(op, name=op.name + RECOMPUTE, phase=Phase.RECOMPUTE, writes=writes, deps=tuple(sorted(deps)))
            )

    def grad_of(self, t: TensorAccess) -> TensorAccess:
        """The gradient written for input ``t``: full-size for activations, as read for weights."""
        if t.role is Role.WEIGHT:
            return TensorAccess(t.name + GRAD, t.bytes, Role.GRADIENT)
        return TensorAccess(t.name + GRAD, self.size[t.name])

    def emit(
        self,
        name: str,
        kind: OpKind,
        flops: int,
        reads: list[TensorAccess],
        grads: Iterable[TensorAccess],
        deps: set[int],
        gemm: Gemm | None = None,
        fwd: Op | None = None,
    ) -> None:
        """Append a backward op writing ``grads``, accumulating into gradients already written."""
        index = len(self.ops)
        writes: list[TensorAccess] = []
        written: set[str] = set()
        accumulate = not kind.is_matrix  # a matrix op accumulates in its epilogue (beta = 1)
        weight = data = False
        for g in grads:
            if g.name in written:
                continue
            written.add(g.name)
            previous = self.writers.setdefault(g.name, [])
            if previous:
                reads.append(g)
                deps.update(previous)
                if accumulate:
                    flops += self.precision.elements_in(g.bytes)
            previous.append(index)
            writes.append(g)
            if g.role is Role.GRADIENT:
                weight = True
            else:
                data = True
        phase = Phase.BACKWARD_DATA if data else Phase.BACKWARD_WEIGHT
        if weight:
            self.param_grad_ops.append(index)
        conv = fwd.conv if fwd is not None else None
        self.ops.append(Op(name, kind, phase, flops, tuple(reads), tuple(writes), tuple(sorted(deps)), gemm, conv))

    def matrix(self, op: Op, outs: list[TensorAccess], deps: set[int]) -> None:
        """Gradients dA and dB of a conv or matmul (see the module docstring for the Gemm views)."""
        if op.gemm is None or len(op.reads) < 2:
            raise ValueError(f"matrix op {op.name} needs a gemm view and two operands")
        a, b, extras = op.reads[0], op.reads[1], op.reads[2:]
        g, conv = op.gemm, op.conv
        bias = [self.grad_of(t) for t in extras if t.name in self.needs]
        if a.name in self.needs:
            if conv is None:
                view = Gemm(g.batch, g.m, g.k, g.n)
            elif conv.stride == 1:
                view = Gemm(1, conv.n * conv.h * conv.w, conv.c, conv.k * conv.r * conv.s)
            else:
                view = Gemm(1, conv.n * conv.p * conv.q, conv.c * conv.r * conv.s, conv.k)
            d = set(deps)
            reads = [*outs, self.saved_read(b, d)]
            suffix = "weight_lhs" if a.role is Role.WEIGHT else "data"
            self.emit(f"{op.name}.bwd_{suffix}", op.kind, 2 * view.macs, reads, [self.grad_of(a)], d, view, op)
        if b.name in self.needs or bias:
            if conv is None:
                view = Gemm(g.batch, g.k, g.n, g.m)
            else:
                # dW^T = im2col(X)^T @ dY, so that the first read (X) is the A operand
                view = Gemm(1, conv.c * conv.r * conv.s, conv.k, conv.n * conv.p * conv.q)
            d = set(deps)
            reads = [self.saved_read(a, d), *outs]
            grads = [self.grad_of(b)] if b.name in self.needs else []
            suffix = "weight" if b.role is Role.WEIGHT or not grads else "data_rhs"
            if grads:
                self.emit(f"{op.name}.bwd_{suffix}", op.kind, 2 * view.macs, reads, grads + bias, d, view, op)
            else:  # only the bias needs a gradient: a column sum of dC, one FLOP per element
                flops = self.precision.elements_in(sum(t.bytes for t in outs))
                self.emit(f"{op.name}.bwd_weight", OpKind.ELEMENTWISE, flops, reads[1:], bias, set(deps))

    def other(self, index: int, op: Op, outs: list[TensorAccess], deps: set[int]) -> None:
        """The one backward op of a non-matrix op."""
        grads = [self.grad_of(t) for t in op.reads if t.name in self.needs]
        if not grads:
            return
        rule = self.graph.rule(index)
        known = {t.name: t for t in (*op.reads, *op.writes)}
        saved = [known.get(name) or TensorAccess(name, self.size[name]) for name in rule.saved]
        reads = [*outs, *(self.saved_read(t, deps) for t in saved)]
        self.emit(f"{op.name}.bwd", op.kind, rule.flops, reads, grads, deps)

    def run(self) -> None:
        """Append the backward ops of every forward op, last forward op first."""
        root = len(self.graph.ops) if self.graph.loss is not None else -1
        for index in range(len(self.fwd) - 1, -1, -1):
            op = self.fwd[index]
            seeds = self.graph.grad_outputs
            outs = [
                TensorAccess(t.name + GRAD, self.size[t.name])
                for t in op.writes
                if t.name + GRAD in self.writers or t.name in seeds
            ]
            if not outs and index != root:
                continue
            deps = {w for t in outs for w in self.writers.get(t.name, ())}
            if any(t.name in seeds for t in op.writes):
                deps.add(index)  # a gradient from outside arrives after the forward op ran
            if op.kind.is_matrix:
                self.matrix(op, outs, deps)
            else:
                self.other(index, op, outs, deps)

    def update(self, optimizer: Optimizer) -> None:
        """The fused optimizer step over all parameters."""
        count = self.graph.parameters
        if count == 0:
            return
        state, flops = OPTIMIZER_COST[optimizer]
        grads = TensorAccess("parameters" + GRAD, self.precision.nbytes(count), Role.GRADIENT)
        moments = TensorAccess(f"{optimizer.value}.state", count * state, Role.STATE)
        reads: tuple[TensorAccess, ...]
        writes: tuple[TensorAccess, ...]
        if self.precision.bits < MASTER_BYTES * BITS_PER_BYTE:
            master = TensorAccess("parameters.master", count * MASTER_BYTES, Role.STATE)
            copy = TensorAccess("parameters", self.precision.nbytes(count), Role.WEIGHT)
            reads, writes = (master, grads, moments), (master, moments, copy)
        else:
            weights = TensorAccess("parameters", self.precision.nbytes(count), Role.WEIGHT)
            reads, writes = (weights, grads, moments), (weights, moments)
        deps = tuple(sorted(set(self.param_grad_ops)))
        self.ops.append(
            Op(f"{optimizer.value}.update", OpKind.OPTIMIZER, Phase.UPDATE, flops * count, reads, writes, deps)
        )


def recompute_segments(graph: ForwardGraph, recompute: Recompute) -> tuple[list[int], frozenset[int] | None]:
    """Per forward op its segment, and the segments that rebuild (None: all), for ``recompute``.

    ``full``: the graph's blocks but 0 (empty when it marks none: :class:`_Segments` cuts ``sqrt(n)``);
    ``selective``: a new segment wherever an op enters or leaves the core, the core's segments rebuilding.
    """
    if recompute is Recompute.FULL:  # block 0 (before the first block: the embeddings) is kept
        return list(graph.blocks), frozenset(graph.blocks) - {0} if graph.blocks else None
    segment: list[int] = []
    for index in range(len(graph.ops)):
        inside = index in graph.core
        if index and inside != (index - 1 in graph.core):
            segment.append(segment[-1] + 1)
        else:
            segment.append(segment[-1] if segment else 0)
    return segment, frozenset(segment[i] for i in graph.core)


def training_ops(
    graph: ForwardGraph, optimizer: Optimizer | None, recompute: Recompute | bool = Recompute.NONE
) -> TrainingStep:
    """Forward, loss, backward and (when ``optimizer`` is given) update ops of one training step.

    ``recompute`` (True: ``full``) keeps only checkpoints from the forward pass and runs forward ops
    again for the backward pass (see the module docstring). ``selective`` needs the graph to mark a
    core (``ValueError`` otherwise).
    """
    level = Recompute.of(recompute)
    if level is Recompute.SELECTIVE and not graph.core:
        raise ValueError(f"{graph.name} marks no attention core for selective recomputation")
    derivation = _Backward(graph)
    derivation.run()
    if level is not Recompute.NONE and graph.ops:
        blocks, recomputable = recompute_segments(graph, level)
        segments = _Segments(
            derivation.fwd, len(graph.ops), derivation.producer, derivation.saved, blocks, recomputable
        )
        derivation = _Backward(graph, segments)
        derivation.run()
    if optimizer is not None:
        derivation.update(optimizer)
    ops = tuple(derivation.ops)
    if not derivation.recomputed:
        return TrainingStep(ops, frozenset(derivation.saved))
    assert derivation.segments is not None
    rebuilt = derivation.segments.rebuilt
    dropped = set().union(*rebuilt.values())
    sizes = {name: derivation.size[name] for name in dropped}
    peak = max(sum(sizes[name] for name in names) for names in rebuilt.values())
    return TrainingStep(ops, frozenset(derivation.saved - dropped), peak)
