"""ATen calls of an exported PyTorch graph -> archsim ops (used by :mod:`~archsim.workloads.torch_import`).

:class:`TorchGraph` holds the import's state: aliases (views are free: their output is their input
under another name), the weights, and the *live* values -- those computed from the module's inputs
or parameters. A call none of whose tensor arguments is live (``arange`` positions, a causal mask
from ``ones``/``tril``, rotary ``cos``/``sin`` tables from a buffer, ``zeros_like``) is a constant:
folded, never an op and never a read, as the ONNX importer folds shape arithmetic.

Conventions (FLOPs per element are those of :data:`archsim.workloads.graph.ELEMENT_FLOPS` and of the
ONNX importer's :data:`~archsim.workloads.onnx_import.ops.ELEMENTWISE_FLOPS`):

* ``scaled_dot_product_attention`` -> what :mod:`~archsim.workloads.decoder` builds for attention:
  scores ``Q K^T`` (Gemm ``batch = B G, m = (A/G) S, n = C, k = d`` with ``G`` key/value heads), scale
  and mask (``scale_mask``, 2 per score; 1 without a mask), softmax, dropout when training with
  ``dropout_p``, context ``P V``;
* element-wise arithmetic, comparisons, selects (``where``, ``masked_fill``: 1 per element) and
  activations (``silu`` 4, so SwiGLU's ``silu(gate) * up`` costs the built-in ``silu_mul``'s 5);
* reductions (``sum``, ``amax``, ``any``...): 1 per input element; ``topk`` a compare per input
  element (with ``softmax``, the built-in ``router``'s 6 per logit); ``sort`` ``ceil(log2 n)``
  compares per element;
* data movement -- ``cat``, ``stack``, ``index_select``, ``gather``, ``repeat``, non-accumulating
  scatters -- a 0-FLOP ``elementwise`` op with its bytes (``cat`` of a KV cache is a copy);
  accumulating scatters (``index_add``, ``index_put(accumulate=True)``, ``scatter_add``) 1 per
  added element (with the gate ``mul``, the built-in ``combine``'s 2 per routed copy).

Bytes are elements times the run's precision for floating tensors, 4 for integers, 1 for booleans.
"""

from __future__ import annotations

import math
from typing import Any

from archsim.errors import SpecError
from archsim.spec.common import Precision
from archsim.workloads.graph import ELEMENT_FLOPS, INT_BYTES, MASK_BYTES, STAT_BYTES, BackwardRule, GraphBuilder
from archsim.workloads.onnx_import.ops import ELEMENTWISE_FLOPS as ONNX_FLOPS
from archsim.workloads.trace import Gemm, OpKind, TensorAccess

FREE = frozenset(
    {"view", "reshape", "permute", "transpose", "t", "expand", "flatten", "clone", "contiguous", "unsqueeze",
     "squeeze", "alias", "_unsafe_view", "detach", "dropout", "identity", "split", "split_with_sizes", "chunk",
     "unbind", "slice", "select", "narrow", "view_as", "expand_as", "_to_copy", "to", "type_as", "lift_fresh_copy"}
)  # fmt: skip
"""Views, and casts (archsim holds every floating tensor in the run's precision): no op."""
SHAPE_ONLY = frozenset(
    {"arange", "full", "zeros", "ones", "empty", "scalar_tensor", "full_like", "zeros_like", "ones_like",
     "empty_like", "new_zeros", "new_ones", "new_full", "new_empty", "rand_like", "randn_like"}
)  # fmt: skip
"""Calls whose value depends on shapes only: constants even when they take a live tensor."""
IGNORED_PREFIXES = ("_assert", "sym_", "_check")
"""Runtime checks and symbolic sizes in an exported graph: no value, no op."""
ELEMENTWISE: dict[str, tuple[int, int, str]] = {
    **{aten: ONNX_FLOPS[onnx] for aten, onnx in {
        "add": "Add", "sub": "Sub", "rsub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow", "neg": "Neg",
        "abs": "Abs", "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "reciprocal": "Reciprocal", "erf": "Erf",
        "sigmoid": "Sigmoid", "maximum": "Max", "minimum": "Min", "clamp": "Clip", "floor_divide": "Floor",
        "eq": "Equal", "ne": "Equal", "lt": "Less", "le": "LessOrEqual", "gt": "Greater", "ge": "GreaterOrEqual",
        "logical_and": "And", "logical_or": "Or", "logical_not": "Not", "bitwise_not": "Not",
        "bitwise_and": "And", "bitwise_or": "Or", "remainder": "Floor", "fmod": "Floor",
    }.items()},
    "rsqrt": (1, 2, "out"),  # one reciprocal square root; backward -y^3/2 dy
    "cos": (1, 1, "in"),
    "sin": (1, 1, "in"),
    "silu": (4, 6, "in"),  # x sigmoid(x): the built-in silu_mul (5, 8) less its multiply (1, 2)
    "where": (1, 0, "none"),  # a select per element (a mask); backward routes dy
    "masked_fill": (1, 0, "none"),
    "tril": (1, 0, "none"),
    "triu": (1, 0, "none"),
}  # fmt: skip
"""(forward, backward) FLOPs per output element and what the backward saves, by ATen name."""
REDUCTIONS = frozenset({"sum", "amax", "amin", "any", "all", "argmax", "argmin", "prod", "max", "min", "var", "std"})
MOVES = frozenset(
    {"cat", "stack", "index_select", "gather", "repeat", "repeat_interleave", "roll", "flip", "constant_pad_nd",
     "copy", "index", "scatter", "index_copy"}
)  # fmt: skip
ACCUMULATES = frozenset({"index_add", "scatter_add", "scatter_reduce", "index_put"})


def name_of(target: Any) -> str:
    """``aten.addmm.default`` -> ``addmm`` (in-place ``relu_`` -> ``relu``)."""
    text = str(getattr(target, "__name__", target)).split(".")[0]
    return text.rstrip("_") if text.endswith("_") and not text.startswith("_") else text


def _value(node: Any) -> Any:
    return node.meta.get("val") if hasattr(node, "meta") else None


def dims(value: Any, node: Any) -> tuple[int, ...]:
    """The sizes of tensor ``value`` (of ``node``); a size known only at run time is a SpecError."""
    try:
        return tuple(int(d) for d in value.shape)
    except Exception:  # an unbacked symbol: torch raises its own guard error
        raise SpecError(
            "torch",
            str(node.name),
            "a shape that depends on the data (nonzero, or where on a mask, as MoE loops over experts do); "
            "archsim needs static shapes: route tokens into fixed-size expert buffers",
        ) from None


def shape(node: Any) -> tuple[int, ...]:
    """The shape of ``node``'s value (of its first output for a tuple)."""
    value = _value(node)
    if isinstance(value, tuple | list) and value:  # batch norm, layer norm, pools with indices: the output first
        value = value[0]
    if value is None or not hasattr(value, "shape"):
        raise SpecError("torch", str(node.name), "the exported graph has no shape for this value")
    return dims(value, node)


def numel(node: Any) -> int:
    """Elements of ``node``'s value (of its first output for a tuple)."""
    return math.prod(shape(node))


def is_tensor(arg: Any) -> bool:
    """True for a graph node whose value is a tensor."""
    return hasattr(_value(arg), "shape")


def tensor_args(node: Any) -> list[Any]:
    """The tensor arguments of ``node``, positional then keyword, lists flattened."""
    found: list[Any] = []
    for arg in (*node.args, *node.kwargs.values()):
        for item in arg if isinstance(arg, list | tuple) else (arg,):
            if is_tensor(item):
                found.append(item)
    return found


class TorchGraph:
    """The state of one ATen graph's import: aliases, weights, live values, and the graph builder."""

    def __init__(self, name: str, precision: Precision, train: bool) -> None:
        """Start an empty import of graph ``name``."""
        self.g = GraphBuilder(name, precision)
        self.train = train
        self.alias: dict[str, str] = {}
        self.weights: dict[str, int] = {}
        self.live: set[str] = set()

    def canon(self, node: Any) -> str:
        """The name of the tensor ``node`` is a view of (itself when it is no view)."""
        name = str(node.name)
        while name in self.alias:
            name = self.alias[name]
        return name

    def is_live(self, node: Any) -> bool:
        """True when ``node``'s value depends on the module's inputs or parameters."""
        return self.canon(node) in self.live

    def bytes_of(self, node: Any) -> int:
        """Bytes of ``node``'s value (all its outputs), by element type."""
        value = _value(node)
        total = 0
        for out in value if isinstance(value, tuple | list) else (value,):
            if hasattr(out, "shape"):
                bool_ = str(out.dtype) == "torch.bool"
                count = math.prod(dims(out, node))
                if out.dtype.is_floating_point and not bool_:
                    total += self.g.size(count)
                else:
                    total += count * (MASK_BYTES if bool_ else INT_BYTES)
        return total

    def access(self, node: Any) -> TensorAccess:
        """A read of ``node`` (a weight's read is a weight access)."""
        name = self.canon(node)
        if name in self.weights:
            return self.g.weight(name, self.weights[name])
        return TensorAccess(name, self.bytes_of(node))

    def reads(self, node: Any) -> list[TensorAccess]:
        """Reads of ``node``'s live tensor arguments (constants are never read)."""
        return [self.access(a) for a in tensor_args(node) if self.is_live(a)]

    def out(self, node: Any) -> TensorAccess:
        """The tensor ``node`` writes (all its outputs together)."""
        self.live.add(str(node.name))
        return TensorAccess(str(node.name), self.bytes_of(node))


def elementwise(t: TorchGraph, node: Any, op: str) -> None:
    """An element-wise op of the :data:`ELEMENTWISE` table."""
    fwd, bwd, saved = ELEMENTWISE[op]
    reads, out, elements = t.reads(node), t.out(node), numel(node)
    keep = {"in": [r.name for r in reads], "out": [out.name], "none": []}[saved]
    t.g.add(
        str(node.name),
        OpKind.ELEMENTWISE,
        fwd * elements,
        reads,
        (out,),
        rule=BackwardRule(tuple(keep), bwd * elements),
    )


def reduction(t: TorchGraph, node: Any, op: str) -> None:
    """A reduction, ``topk`` or ``sort``: compares or adds over the input's elements."""
    source = node.args[0]
    elements = numel(source)
    flops = elements
    if op == "sort":
        dim = int(node.kwargs.get("dim", node.args[1] if len(node.args) > 1 and isinstance(node.args[1], int) else -1))
        flops = elements * max(1, math.ceil(math.log2(max(2, shape(source)[dim] if shape(source) else 1))))
    reads, out = t.reads(node), t.out(node)
    t.g.add(str(node.name), OpKind.ELEMENTWISE, flops, reads, (out,), rule=BackwardRule((), elements))


def move(t: TorchGraph, node: Any, op: str) -> None:
    """Data movement (0 FLOPs) or an accumulating scatter (1 FLOP per added element)."""
    reads, out = t.reads(node), t.out(node)
    moved = numel(node)
    flops = 0
    if op in ACCUMULATES:
        accumulate = op != "index_put" or bool(node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate"))
        added = tensor_args(node)[-1]
        flops = numel(added) if accumulate else 0
        moved = numel(added)
    if op in ("index_select", "gather", "index") and t.is_live(
        node.args[0]
    ):  # only the gathered rows of the source are read
        reads[0] = TensorAccess(reads[0].name, t.bytes_of(node), reads[0].role)
    rule = BackwardRule(tuple(r.name for r in reads[1:] if op in ("index_select", "gather")), moved)
    t.g.add(str(node.name), OpKind.ELEMENTWISE, flops, reads, (out,), rule=rule)


def attention(t: TorchGraph, node: Any) -> None:
    """``scaled_dot_product_attention`` -> scores, scale and mask, softmax, [dropout], context."""
    g, name = t.g, str(node.name)
    args = list(node.args) + [None] * (6 - len(node.args))
    q_node, k_node, v_node = args[:3]
    mask = node.kwargs.get("attn_mask", args[3])
    dropout_p = float(node.kwargs.get("dropout_p", args[4] or 0.0))
    causal = bool(node.kwargs.get("is_causal", args[5] or False))
    q, k, v = shape(q_node), shape(k_node), shape(v_node)
    batch, heads, kv_heads = math.prod(q[:-3]), q[-3], k[-3]
    queries, context, d, dv = q[-2], k[-2], q[-1], v[-1]
    group = heads // kv_heads
    scores_n = batch * heads * queries * context
    scores = g.act(f"{name}.scores.out", scores_n)
    g.matmul(
        f"{name}.scores",
        Gemm(batch * kv_heads, group * queries, context, d),
        (t.access(q_node), t.access(k_node)),
        scores,
    )
    masked = g.act(f"{name}.scale_mask.out", scores_n)
    mask_reads = (t.access(mask),) if mask is not None and t.is_live(mask) else ()
    if mask is not None or causal:
        g.elementwise(f"{name}.scale_mask", "scale_mask", (scores, *mask_reads), masked, scores_n)
    else:
        g.add(f"{name}.scale", OpKind.ELEMENTWISE, scores_n, (scores,), (masked,), rule=BackwardRule((), scores_n))
    probs = g.act(f"{name}.softmax.out", scores_n)
    g.elementwise(f"{name}.softmax", "softmax", (masked,), probs, scores_n, saved=(probs.name,), kind=OpKind.SOFTMAX)
    if t.train and dropout_p > 0:
        probs = g.dropout(f"{name}.dropout", probs)
    g.matmul(
        f"{name}.context", Gemm(batch * kv_heads, group * queries, dv, context), (probs, t.access(v_node)), t.out(node)
    )


def rms_norm(t: TorchGraph, node: Any, x: Any, weight: Any | None) -> None:
    """A fused RMSNorm (see :func:`archsim.workloads.torch_import.find_rms_norms`) -> ``layernorm``.

    4 FLOPs per element (square, sum, a fused rsqrt scale and gain: the built-in ``rmsnorm``);
    training writes one fp32 statistic per row, as the built-in decoder's RMSNorm does.
    """
    g, name = t.g, str(node.name)
    elements = numel(x)
    rows = elements // max(1, shape(x)[-1] if shape(x) else 1)
    reads = [t.access(x)] + ([t.access(weight)] if weight is not None else [])
    out = t.out(node)
    fwd, bwd = ELEMENT_FLOPS["rmsnorm"]
    if not t.train:
        g.add(name, OpKind.LAYERNORM, fwd * elements, reads, (out,))
        return
    stats = TensorAccess(f"{name}.saved_stats", rows * STAT_BYTES)
    rule = BackwardRule((*(r.name for r in reads), stats.name), bwd * elements)
    g.add(name, OpKind.LAYERNORM, fwd * elements, reads, (out, stats), rule=rule)
