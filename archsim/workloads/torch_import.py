"""PyTorch modules -> traces, from the graph ``torch.export`` captures on the CPU (optional dependency).

:func:`from_torch` exports ``module`` with ``example_inputs`` (weights need not be trained; any
values do, and shapes come from the exported graph's fake tensors, so nothing is computed), lowers
it to core ATen (keeping ``scaled_dot_product_attention`` and ``silu`` whole) and turns each call
into ops with the same conventions and FLOP counts as the ONNX importer
(:mod:`archsim.workloads.onnx_import`) and the built-in decoder (:mod:`archsim.workloads.decoder`):
``convolution`` -> ``conv2d`` (or a grouped ``matmul``), ``mm``/``addmm``/``bmm``/``matmul``/``linear``
-> ``matmul`` (a weight operand folds the leading dimensions into ``m``; FLOPs ``2 * MACs``),
``scaled_dot_product_attention`` -> scores, scale and mask, softmax and context as the built-in
decoder builds attention (grouped K/V heads kept), batch and layer norms, an RMSNorm written out
(``x * rsqrt(mean(x^2) + eps) * w``, :func:`find_rms_norms`) -> one ``layernorm`` op, softmax, pools,
embeddings, element-wise ops, reductions, ``topk``/``sort``, and data movement (``cat`` of a KV cache,
``stack``, ``index_select``, scatters) with its bytes; the FLOPs of each are in
:mod:`~archsim.workloads.torch_ops`. Views (``view``, ``reshape``, ``permute``, ``transpose``,
``expand``, ``split``/``split_with_sizes``/``chunk`` of a fused QKV, ``slice``, ``select``, ``clone``,
casts, ``dropout`` in inference) are free, and values computed from shapes and buffers only (positions,
causal masks, rotary tables) are constants. Parameters are the weights. Unsupported ATen ops are
listed by name and count in a :class:`~archsim.errors.SpecError`.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from archsim.errors import SpecError, UsageError
from archsim.spec.common import Precision
from archsim.spec.model import Optimizer
from archsim.workloads.graph import ELEMENT_FLOPS, INT_BYTES, MASK_BYTES, STAT_BYTES, BackwardRule
from archsim.workloads.memory import finish_trace
from archsim.workloads.options import TraceOptions
from archsim.workloads.torch_ops import (
    ACCUMULATES,
    ELEMENTWISE,
    FREE,
    IGNORED_PREFIXES,
    MOVES,
    REDUCTIONS,
    SHAPE_ONLY,
    TorchGraph,
    attention,
    elementwise,
    move,
    name_of,
    numel,
    reduction,
    rms_norm,
    shape,
    tensor_args,
)
from archsim.workloads.trace import ConvShape, Gemm, Mode, OpKind, Role, TensorAccess, Trace

UNARY = {"relu": "relu", "gelu": "gelu", "tanh": "tanh"}
"""Activations priced as the built-in models price them (:data:`~archsim.workloads.graph.ELEMENT_FLOPS`)."""
CASTS = frozenset({"_to_copy", "to", "type_as"})


KNOWN = frozenset(
    {"convolution", "mm", "addmm", "bmm", "matmul", "linear", "embedding", "topk", "sort", "layer_norm",
     "native_layer_norm", "softmax", "_softmax", "log_softmax", "_log_softmax", "scaled_dot_product_attention",
     "max_pool2d", "max_pool2d_with_indices", "avg_pool2d", "adaptive_avg_pool2d", "mean", "batch_norm",
     "_native_batch_norm_legit_no_training", "_native_batch_norm_legit_functional", "native_dropout"}
)  # fmt: skip
"""The calls :func:`_node` handles besides the tables'."""
SUPPORTED = KNOWN | SHAPE_ONLY | set(ELEMENTWISE) | set(UNARY) | REDUCTIONS | MOVES | ACCUMULATES
"""Every call imported (folded as a constant when no argument is live)."""


def find_rms_norms(graph: Any) -> tuple[dict[str, tuple[Any, Any | None]], set[str]]:
    """RMSNorms written out (``x * rsqrt(mean(x^2, -1) + eps) [* weight]``): ``{last node: (x, weight)}``.

    An RMSNorm is one norm op, as ``layernorm`` is: a per-row statistic (the mean square) scales every
    element, the ``rmsnorm`` of the built-in decoder. Also returns the names of the calls it replaces.
    Casts between the steps (``x.float()``, ``.to(dtype)``) are seen through.
    """
    fused: dict[str, tuple[Any, Any | None]] = {}
    inner: set[str] = set()

    def source(node: Any) -> Any:
        while hasattr(node, "target") and name_of(node.target) in CASTS:
            node = node.args[0]
        return node

    def sole_user(node: Any, op: str) -> Any | None:
        users = list(node.users)
        while len(users) == 1 and name_of(users[0].target) in CASTS:
            users = list(users[0].users)
        return users[0] if len(users) == 1 and name_of(users[0].target) == op else None

    def other(node: Any, one: Any) -> Any:
        a, b = node.args[:2]
        return b if source(a) is source(one) else a

    for node in graph.nodes:
        if node.op != "call_function" or name_of(node.target) != "pow" or node.args[1] != 2:
            continue
        x = source(node.args[0])
        mean = sole_user(node, "mean")
        add = sole_user(mean, "add") if mean is not None and mean.args[1] in ([-1], [len(shape(x)) - 1]) else None
        root = sole_user(add, "rsqrt") if add is not None and not hasattr(add.args[1], "meta") else None
        scaled = sole_user(root, "mul") if root is not None else None
        if scaled is None or source(other(scaled, root)) is not x:
            continue
        last, weight = scaled, None
        gain = sole_user(scaled, "mul")
        if gain is not None:
            w = source(other(gain, scaled))
            if hasattr(w, "meta") and w.op == "placeholder" and shape(w) == shape(x)[-1:]:
                last, weight = gain, w
        fused[str(last.name)] = (x, weight)
        inner.update(str(n.name) for n in (node, mean, add, root, scaled) if n is not None and n is not last)
    return fused, inner


def _matrix(t: TorchGraph, node: Any, op: str) -> None:
    """Convolutions and matrix products -> ``conv2d`` / ``matmul``."""
    g, args, name = t.g, node.args, str(node.name)
    if op == "convolution":
        x, w, y = shape(args[0]), shape(args[1]), shape(node)
        stride, pad, dil, groups = list(args[3]), list(args[4]), list(args[5]), int(args[8])
        gemm = Gemm(groups, y[0] * math.prod(y[2:]), w[0] // groups, math.prod(w[1:]))
        conv = None
        if len(w) == 4 and groups == 1 and set(dil) == {1} and len(set(stride)) == 1 and len(set(pad)) == 1:
            conv = ConvShape(x[0], x[1], x[2], x[3], w[0], w[2], w[3], stride[0], pad[0])
        g.matmul(name, gemm, t.reads(node), t.out(node), conv=conv)
        return
    a_node, b_node = (args[1], args[2]) if op == "addmm" else (args[0], args[1])
    a, b, y = shape(a_node), shape(b_node), shape(node)
    if op == "linear" or len(b) == 2:
        gemm = Gemm(1, math.prod(a[:-1]), y[-1], a[-1])
    else:
        gemm = Gemm(math.prod(y[:-2]), y[-2], y[-1], a[-1])
    extra = [args[0]] if op == "addmm" else tensor_args(node)[2:]
    reads = [t.access(a_node), t.access(b_node)] + [t.access(e) for e in extra if t.is_live(e)]
    g.matmul(name, gemm, reads, t.out(node))


def _node(t: TorchGraph, node: Any, op: str) -> bool:
    """Import one call; False when ``op`` is unsupported."""
    g, args, name = t.g, node.args, str(node.name)
    if op in FREE or op == "getitem":
        t.alias[name] = t.canon(args[0])
        return True
    if op in SHAPE_ONLY or not any(t.is_live(a) for a in tensor_args(node)):
        return op in SUPPORTED
    ins = t.reads(node)
    if op in ("convolution", "mm", "addmm", "bmm", "matmul", "linear"):
        _matrix(t, node, op)
    elif op == "scaled_dot_product_attention":
        attention(t, node)
    elif op in ("_native_batch_norm_legit_no_training", "_native_batch_norm_legit_functional", "batch_norm"):
        elements, c = numel(args[0]), shape(args[0])[1]
        running = TensorAccess(f"{name}.running_stats", 2 * c * STAT_BYTES, Role.STATE)
        ins = [t.access(a) for a in tensor_args(node)[:3]]
        if t.train:  # batch statistics, saved for backward; the running statistics are updated
            stats = TensorAccess(f"{name}.saved_stats", 2 * c * STAT_BYTES)
            rule = BackwardRule((ins[0].name, ins[1].name, stats.name), ELEMENT_FLOPS["norm"][1] * elements)
            flops = ELEMENT_FLOPS["norm"][0] * elements
            g.add(name, OpKind.BATCHNORM, flops, (*ins, running), (t.out(node), stats, running), rule=rule)
        else:
            g.add(name, OpKind.BATCHNORM, ELEMENT_FLOPS["norm_infer"][0] * elements, (*ins, running), (t.out(node),))
    elif op in ("layer_norm", "native_layer_norm"):
        elements = numel(args[0])
        rule = BackwardRule(tuple(x.name for x in ins[:2]), ELEMENT_FLOPS["norm"][1] * elements)
        g.add(name, OpKind.LAYERNORM, ELEMENT_FLOPS["norm"][0] * elements, ins[:3], (t.out(node),), rule=rule)
    elif op == "native_dropout":  # training: a 1-byte mask per element, its backward's only saved tensor
        mask = TensorAccess(f"{name}.mask", numel(node) * MASK_BYTES)
        out = TensorAccess(name, g.size(numel(node)))
        t.live.add(name)
        g.elementwise(name, "dropout", ins[:1], out, numel(node), saved=(mask.name,), extra_writes=(mask,))
    elif op in ("softmax", "_softmax", "log_softmax", "_log_softmax"):
        out = t.out(node)
        g.elementwise(name, "softmax", ins[:1], out, numel(node), saved=(out.name,), kind=OpKind.SOFTMAX)
    elif op in UNARY:
        out = t.out(node)
        g.elementwise(name, UNARY[op], ins, out, numel(node), saved=(out.name if op != "gelu" else ins[0].name,))
    elif op in ELEMENTWISE:
        elementwise(t, node, op)
    elif op in ("max_pool2d", "max_pool2d_with_indices", "avg_pool2d", "adaptive_avg_pool2d", "mean"):
        outputs, inputs = numel(node), numel(args[0])
        if op.startswith("max"):
            window = math.prod(args[1])
            rule = BackwardRule((ins[0].name, name), outputs)
            g.add(name, OpKind.POOL, (window - 1) * outputs, ins, (t.out(node),), rule=rule)
        else:
            g.add(name, OpKind.POOL, inputs, ins, (t.out(node),), rule=BackwardRule((), inputs))
    elif op in REDUCTIONS or op in ("topk", "sort"):
        reduction(t, node, op)
    elif op in MOVES or op in ACCUMULATES:
        move(t, node, op)
    elif op == "embedding":
        table, idx = t.canon(args[0]), args[1]
        rows = shape(args[0])
        picked = numel(idx)
        weight = g.weight(table, math.prod(rows), min(rows[0], picked) * rows[1])
        ids = (t.access(idx),) if t.is_live(idx) else ()
        saved = tuple(i.name for i in ids)
        g.add(name, OpKind.EMBEDDING, 0, (*ids, weight), (t.out(node),), rule=BackwardRule(saved, numel(node)))
    else:
        return False
    return True


def _export(torch: Any, module: Any, example_inputs: tuple[Any, ...]) -> Any:
    """``torch.export`` to core ATen, keeping ``scaled_dot_product_attention`` and ``silu`` whole.

    Decomposed, attention would be its math kernel (scaling Q and K apart, guards on fully masked
    rows) and SiLU a sigmoid and a multiply: neither how the built-in models count them.
    """
    try:
        exported = torch.export.export(module, tuple(example_inputs))
        table = torch.export.default_decompositions()
        for op in (torch.ops.aten.scaled_dot_product_attention.default, torch.ops.aten.silu.default):
            table.pop(op, None)
        return exported.run_decompositions(table)
    except Exception as err:
        raise UsageError("torch", "module", f"torch.export failed: {' '.join(str(err).split())[:200]}") from None


def from_torch(
    module: Any,
    example_inputs: tuple[Any, ...],
    mode: Mode | str = Mode.INFER,
    precision: Precision | str = Precision.FP16,
    optimizer: Optimizer | str | None = Optimizer.ADAM,
    name: str | None = None,
    options: TraceOptions | None = None,
) -> Trace:
    """The trace of ``module`` run on ``example_inputs`` (batch: the first input's first dimension).

    ``options`` fuse ops or recompute activations as for the built-in models.
    """
    try:
        import torch
    except ImportError:
        raise UsageError("torch", "", "from_torch needs PyTorch: pip install 'archsim[torch]'") from None
    run_mode, run_precision = Mode(mode), Precision(precision)
    if run_precision.is_generic or run_precision.block_scaling is not None:  # built at fp8, then quantized
        from archsim.workloads.quantize import at_format

        def build(stored: Precision) -> Trace:
            return from_torch(module, example_inputs, run_mode, stored, optimizer, name, options)

        return at_format(run_precision, run_mode, "torch", build)
    if run_mode.is_generation:  # a KV cache and one-token steps come from a decoder description
        raise UsageError("torch", "mode", "prefill and decode are for decoder language models (workloads/*.yaml)")
    module = module.train(run_mode is Mode.TRAIN) if run_mode is Mode.TRAIN else module.eval()
    exported = _export(torch, module, example_inputs)
    graph = exported.graph_module.graph
    signature = exported.graph_signature
    t = TorchGraph(name or type(module).__name__, run_precision, run_mode is Mode.TRAIN)
    constants = {
        *signature.inputs_to_buffers,
        *getattr(signature, "inputs_to_lifted_tensor_constants", {}),
        *getattr(signature, "inputs_to_lifted_custom_objs", {}),
    }
    fused, inner = find_rms_norms(graph)
    unsupported: list[str] = []
    user_inputs: list[Any] = []
    for node in graph.nodes:
        if node.op == "placeholder":
            if node.name in signature.inputs_to_parameters:
                t.weights[node.name] = numel(node)
                t.live.add(node.name)
            elif node.name not in constants:
                user_inputs.append(node)
                t.live.add(node.name)
        elif node.op == "call_function":
            op = name_of(node.target)
            if node.name in inner or op.startswith(IGNORED_PREFIXES):
                continue
            if node.name in fused:
                rms_norm(t, node, *fused[node.name])
            elif not _node(t, node, op):
                unsupported.append(op)
    if unsupported:
        listed = ", ".join(f"{op} x{count}" for op, count in sorted(Counter(unsupported).items()))
        raise SpecError("torch", "graph", f"unsupported ATen ops: {listed}")
    outputs = [a for a in graph.output_node().args[0] if hasattr(a, "meta")] if graph.output_node() else []
    batch = shape(user_inputs[0])[0] if user_inputs and shape(user_inputs[0]) else 1
    if run_mode is Mode.TRAIN and outputs:
        logits = [t.access(o) for o in outputs]
        rows = sum(numel(o) // max(1, shape(o)[-1] if shape(o) else 1) for o in outputs)
        labels = TensorAccess("labels", rows * INT_BYTES)
        elements = sum(numel(o) for o in outputs)
        loss, rule = t.g.loss_op("loss", (*logits, labels), elements, (*(x.name for x in logits), labels.name))
        forward = t.g.graph(loss, rule, meta={"source": "torch"})
    else:
        forward = t.g.graph(meta={"source": "torch"})
    run_optimizer = Optimizer(optimizer) if optimizer is not None else None
    return finish_trace(forward, run_mode, batch, None, run_optimizer, options)
