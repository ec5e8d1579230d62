"""Forward graphs: the ops of one forward pass plus what the training derivation needs to know.

A network builder (:mod:`~archsim.workloads.resnet`, :mod:`~archsim.workloads.bert`,
:mod:`~archsim.workloads.gemm`, later an ONNX importer) produces a :class:`ForwardGraph`. The training
derivation in :mod:`~archsim.workloads.training` turns it into backward and update ops; an inference
trace is the forward ops alone.

Conventions every builder follows (the derivation relies on them):

* Tensor names are unique: each activation is written by exactly one op (its *producer*); a tensor
  read but never written is a network input (images, token ids, masks, labels) or a weight.
* A matrix op (``conv2d``, ``matmul``) reads its left operand first and its right operand second
  (for a layer, the right operand is the weight); further reads are biases (weights) that the
  epilogue adds. Its ``flops`` are ``2 * gemm.macs``; the bias add is not counted.
* Bytes are ``precision.nbytes(elements)`` (half a byte an element for int4), except integer inputs
  (token ids, labels, positions: int32, 4 bytes), dropout masks (1 byte per element) and norm
  statistics (fp32, 4 bytes).
* An embedding op reads only the table rows it gathers, so its weight access is smaller than the
  table; parameter counts therefore come from :attr:`ForwardGraph.parameters`, not from reads.

Per-element FLOP counts of the non-matrix ops are the table :data:`ELEMENT_FLOPS`; they are modelling
assumptions (a multiply, add, compare, exp or divide is one FLOP each), not measurements.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from archsim.spec.common import Precision
from archsim.workloads.trace import ConvShape, Gemm, Op, OpKind, Phase, Role, TensorAccess

INT_BYTES = 4
"""Bytes of an integer input element (token id, label, position): int32."""
MASK_BYTES = 1
"""Bytes of a dropout-mask element (uint8)."""
STAT_BYTES = 4
"""Bytes of a norm statistic (mean, inverse std, running mean/var): fp32."""

ELEMENT_FLOPS: Mapping[str, tuple[int, int]] = {
    "relu": (1, 1),  # max(x, 0); backward: select dy where y > 0
    "gelu": (8, 12),  # tanh approximation x/2 (1 + tanh(c (x + a x^3))); backward recomputes it
    "tanh": (4, 3),  # backward: dy (1 - y^2)
    "add": (1, 0),  # per extra input; backward passes dy through
    "dropout": (2, 1),  # compare a random number, scale; backward: dy * mask * scale
    "scale_mask": (2, 1),  # x * scale + additive mask; backward: dy * scale
    "softmax": (5, 4),  # max, subtract, exp, sum, divide; backward: y (dy - sum(dy y))
    "norm": (5, 10),  # mean 1, variance 2, fused scale-shift 2; backward about twice forward
    "norm_infer": (2, 0),  # batchnorm with running statistics: one fused scale-shift
    "loss": (5, 5),  # softmax cross-entropy per logit; backward recomputes softmax, subtracts one-hot
    "gather": (0, 1),  # index copy; backward scatter-adds
    "rmsnorm": (4, 8),  # square, sum, fused rsqrt scale and gain; backward about twice forward
    "rotary": (3, 3),  # x cos + rotate(x) sin per element; backward rotates by the opposite angle
    "silu_mul": (5, 8),  # gate * sigmoid(gate) * up (exp, add, divide, two multiplies); backward both inputs
    "router": (6, 5),  # softmax over the experts' logits plus a compare per logit for the top-k
    "combine": (2, 2),  # per routed copy: gate * expert output, summed over the top-k
}
"""(forward, backward) FLOPs per element of each non-matrix operation, per output element unless
the builder says otherwise."""


@dataclass(frozen=True, slots=True)
class BackwardRule:
    """How to differentiate one non-matrix forward op.

    ``saved`` names the tensors (inputs or outputs of the forward op) its backward op reads besides
    the output gradients; ``flops`` are the backward op's FLOPs. Matrix ops need no rule: their
    backward products follow from the Gemm view.
    """

    saved: tuple[str, ...]
    flops: int


def default_rule(op: Op) -> BackwardRule:
    """Rule for an op no builder described: backward reads every input, costs the forward's FLOPs."""
    return BackwardRule(saved=tuple(t.name for t in op.reads), flops=op.flops)


@dataclass(frozen=True)
class ForwardGraph:
    """One forward pass of a network, ready for the training derivation.

    ``loss`` (with ``loss_rule``) is the loss op a training trace appends after the forward ops;
    its deps refer to forward op indices. Network inputs need no gradient unless named in
    ``grad_inputs``. ``grad_outputs`` names tensors whose gradient arrives from outside the graph
    (a lone layer trained without a loss). ``parameters`` counts trainable elements (tied weights
    once).
    """

    name: str
    precision: Precision
    ops: tuple[Op, ...]
    rules: Mapping[int, BackwardRule]
    parameters: int
    loss: Op | None = None
    loss_rule: BackwardRule | None = None
    grad_inputs: frozenset[str] = frozenset()
    grad_outputs: frozenset[str] = frozenset()
    meta: Mapping[str, str] = field(default_factory=dict)
    kv_cache_bytes: int = 0
    """Bytes of a generation's KV cache at its longest, held beside the weights (prefill, decode)."""
    blocks: tuple[int, ...] = ()
    """Per forward op, the repeated block it belongs to, non-decreasing (a decoder: 0 the embeddings,
    ``i + 1`` layer ``i``, then the head); full recomputation keeps each block's input only, and the
    whole of the first (0) and last blocks, which are no repeated blocks. Empty: no blocks marked
    (full recomputation cuts ``sqrt(n)`` segments)."""
    core: frozenset[int] = frozenset()
    """Forward ops selective recomputation runs again (a decoder's attention core); empty: none."""

    def rule(self, index: int) -> BackwardRule:
        """The backward rule of forward op ``index`` (the loss is index ``len(ops)``)."""
        if index == len(self.ops) and self.loss is not None:
            return self.loss_rule or default_rule(self.loss)
        found = self.rules.get(index)
        return found if found is not None else default_rule(self.ops[index])


class GraphBuilder:
    """Accumulates ops in topological order, deriving each op's deps from the tensors it reads."""

    def __init__(self, name: str, precision: Precision) -> None:
        """Start an empty graph called ``name`` whose tensors are in ``precision``.

        A block-scaled format (or the ``fp4`` request) is no precision to build a graph at: a graph is
        built at its storage precision, then quantized (:mod:`archsim.workloads.quantize`).
        """
        if precision.is_generic or precision.block_scaling is not None:
            raise ValueError(f"build at {precision.storage.value} and quantize, not at {precision.value}")
        self.name = name
        self.precision = precision
        self.ops: list[Op] = []
        self.rules: dict[int, BackwardRule] = {}
        self.producer: dict[str, int] = {}
        self.params: dict[str, int] = {}
        self.block = 0
        """The block (:attr:`ForwardGraph.blocks`) the next ops belong to; a builder sets it."""
        self.blocks: list[int] = []
        self.core: set[int] = set()
        """Ops selective recomputation runs again (:attr:`ForwardGraph.core`); a builder adds them."""

    def size(self, elements: int) -> int:
        """Bytes of ``elements`` elements in the run's precision."""
        return self.precision.nbytes(elements)

    def elements(self, tensor: TensorAccess) -> int:
        """Elements of a tensor in the run's precision (:meth:`~archsim.spec.common.Precision.elements_in`)."""
        return self.precision.elements_in(tensor.bytes)

    def act(self, name: str, elements: int) -> TensorAccess:
        """An activation of ``elements`` elements in the run's precision."""
        return TensorAccess(name, self.size(elements))

    def weight(self, name: str, elements: int, touched: int | None = None) -> TensorAccess:
        """A trainable tensor of ``elements`` elements; ``touched`` elements of it are read."""
        self.params[name] = elements
        return TensorAccess(name, self.size(elements if touched is None else touched), Role.WEIGHT)

    def add(
        self,
        name: str,
        kind: OpKind,
        flops: int,
        reads: Sequence[TensorAccess],
        writes: Sequence[TensorAccess],
        *,
        gemm: Gemm | None = None,
        conv: ConvShape | None = None,
        rule: BackwardRule | None = None,
    ) -> Op:
        """Append a forward op; returns it. Deps are the producers of the activations it reads."""
        producer = self.producer
        deps = sorted({producer[t.name] for t in reads if t.name in producer})
        op = Op(name, kind, Phase.FORWARD, flops, tuple(reads), tuple(writes), tuple(deps), gemm, conv)
        index = len(self.ops)
        self.ops.append(op)
        self.blocks.append(self.block)
        if rule is not None:
            self.rules[index] = rule
        for t in writes:
            producer.setdefault(t.name, index)
        return op

    def matmul(
        self,
        name: str,
        gemm: Gemm,
        reads: Sequence[TensorAccess],
        out: TensorAccess,
        conv: ConvShape | None = None,
    ) -> Op:
        """Append a matrix op (``conv2d`` when ``conv`` is given) with flops ``2 * gemm.macs``."""
        kind = OpKind.CONV if conv is not None else OpKind.MATMUL
        return self.add(name, kind, 2 * gemm.macs, reads, (out,), gemm=gemm, conv=conv)

    def elementwise(
        self,
        name: str,
        what: str,
        reads: Sequence[TensorAccess],
        out: TensorAccess,
        elements: int,
        saved: Sequence[str] = (),
        kind: OpKind = OpKind.ELEMENTWISE,
        extra_writes: Sequence[TensorAccess] = (),
    ) -> Op:
        """Append a non-matrix op costing ``ELEMENT_FLOPS[what]`` per element of ``elements``."""
        fwd, bwd = ELEMENT_FLOPS[what]
        rule = BackwardRule(tuple(saved), bwd * elements)
        return self.add(name, kind, fwd * elements, reads, (out, *extra_writes), rule=rule)

    def residual(self, name: str, x: TensorAccess, skip: TensorAccess) -> TensorAccess:
        """Append the residual add of two equal-shaped activations; returns its output ``NAME.out``."""
        elements = self.elements(x)
        out = self.act(f"{name}.out", elements)
        self.elementwise(name, "add", (x, skip), out, elements)
        return out

    def dropout(self, name: str, x: TensorAccess) -> TensorAccess:
        """Append a training dropout of ``x``; returns its output ``NAME.out``.

        It also writes a 1-byte mask per element (``NAME.mask``), its backward's only saved tensor.
        """
        elements = self.elements(x)
        out = self.act(f"{name}.out", elements)
        mask = TensorAccess(f"{name}.mask", elements * MASK_BYTES)
        self.elementwise(name, "dropout", (x,), out, elements, saved=(mask.name,), extra_writes=(mask,))
        return out

    def graph(
        self,
        loss: Op | None = None,
        loss_rule: BackwardRule | None = None,
        grad_inputs: frozenset[str] = frozenset(),
        grad_outputs: frozenset[str] = frozenset(),
        meta: Mapping[str, str] | None = None,
        kv_cache_bytes: int = 0,
    ) -> ForwardGraph:
        """The finished forward graph."""
        return ForwardGraph(
            name=self.name,
            precision=self.precision,
            ops=tuple(self.ops),
            rules=dict(self.rules),
            parameters=sum(self.params.values()),
            loss=loss,
            loss_rule=loss_rule,
            grad_inputs=grad_inputs,
            grad_outputs=grad_outputs,
            meta=dict(meta or {}),
            kv_cache_bytes=kv_cache_bytes,
            blocks=tuple(self.blocks) if any(self.blocks) else (),
            core=frozenset(self.core),
        )

    def loss_op(
        self, name: str, reads: Sequence[TensorAccess], logits: int, saved: Sequence[str]
    ) -> tuple[Op, BackwardRule]:
        """A softmax-cross-entropy loss over ``logits`` elements (not appended; training adds it).

        It writes one fp32 scalar; its backward reads ``saved`` and writes the logits' gradient.
        """
        fwd, bwd = ELEMENT_FLOPS["loss"]
        producer = self.producer
        deps = tuple(sorted({producer[t.name] for t in reads if t.name in producer}))
        op = Op(name, OpKind.LOSS, Phase.FORWARD, fwd * logits, tuple(reads), (TensorAccess(f"{name}.out", 4),), deps)
        return op, BackwardRule(tuple(saved), bwd * logits)
