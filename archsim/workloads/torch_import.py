"""PyTorch modules -> traces, from the graph ``torch.export`` captures on the CPU (optional dependency).

:func:`from_torch` exports ``module`` with ``example_inputs`` (weights need not be trained; any
values do, and shapes come from the exported graph's fake tensors, so nothing is computed) and
turns each ATen call into ops with the same conventions and FLOP counts as the ONNX importer
(:mod:`archsim.workloads.onnx_import`): ``convolution`` -> ``conv2d`` (or a grouped ``matmul``),
``mm``/``addmm``/``bmm``/``matmul``/``linear`` -> ``matmul`` (a weight operand folds the leading
dimensions into ``m``), batch and layer norms, softmax, pools, embeddings, element-wise ops;
views (``view``, ``reshape``, ``permute``, ``transpose``, ``t``, ``expand``, ``flatten``, ``clone``,
``contiguous``, ``dropout`` in inference) are free. Parameters and buffers of the module are the
weights. Unsupported ATen ops are listed by name and count in a :class:`~archsim.errors.SpecError`.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from archsim.errors import SpecError, UsageError
from archsim.spec.common import Precision
from archsim.spec.model import Optimizer
from archsim.workloads.graph import ELEMENT_FLOPS, INT_BYTES, STAT_BYTES, BackwardRule, GraphBuilder
from archsim.workloads.memory import finish_trace
from archsim.workloads.options import TraceOptions
from archsim.workloads.trace import ConvShape, Gemm, Mode, OpKind, Role, TensorAccess, Trace

FREE = frozenset(
    {"view", "reshape", "permute", "transpose", "t", "expand", "flatten", "clone", "contiguous", "unsqueeze",
     "squeeze", "alias", "_unsafe_view", "detach", "dropout", "identity"}
)  # fmt: skip
UNARY = {"relu": "Relu", "gelu": "Gelu", "tanh": "Tanh", "sigmoid": "Sigmoid", "silu": "HardSwish"}
BINARY = frozenset({"add", "sub", "mul", "div"})


def _name(target: Any) -> str:
    """``aten.addmm.default`` -> ``addmm`` (in-place ``relu_`` -> ``relu``)."""
    text = str(getattr(target, "__name__", target)).split(".")[0]
    return text.rstrip("_") if text.endswith("_") and not text.startswith("_") else text


class _Torch:
    def __init__(self, name: str, precision: Precision, train: bool) -> None:
        self.g = GraphBuilder(name, precision)
        self.train = train
        self.alias: dict[str, str] = {}
        self.weights: dict[str, int] = {}
        self.ints: set[str] = set()

    def canon(self, node: Any) -> str:
        name = str(node.name)
        while name in self.alias:
            name = self.alias[name]
        return name

    def access(self, node: Any) -> TensorAccess:
        name = self.canon(node)
        if name in self.weights:
            return self.g.weight(name, self.weights[name])
        return TensorAccess(name, _numel(node) * (INT_BYTES if name in self.ints else self.g.elem))

    def out(self, node: Any) -> TensorAccess:
        return TensorAccess(str(node.name), _numel(node) * self.g.elem)


def _shape(node: Any) -> tuple[int, ...]:
    value = node.meta.get("val")
    if isinstance(value, tuple | list) and value:  # batch norm, layer norm, pools with indices: the output first
        value = value[0]
    if value is None or not hasattr(value, "shape"):
        raise SpecError("torch", str(node.name), "the exported graph has no shape for this value")
    return tuple(int(d) for d in value.shape)


def _numel(node: Any) -> int:
    return math.prod(_shape(node))


def _tensor_args(args: Any) -> list[Any]:
    return [a for a in args if hasattr(a, "meta") and "val" in a.meta and hasattr(a.meta["val"], "shape")]


def _node(t: _Torch, node: Any, op: str, unsupported: list[str]) -> None:
    g, args = t.g, node.args
    if op in FREE:
        t.alias[str(node.name)] = t.canon(args[0])
        return
    ins = [t.access(a) for a in _tensor_args(args)]
    name = str(node.name)
    if op == "convolution":
        x, w, y = _shape(args[0]), _shape(args[1]), _shape(node)
        stride, pad, dil, groups = list(args[3]), list(args[4]), list(args[5]), int(args[8])
        gemm = Gemm(groups, y[0] * math.prod(y[2:]), w[0] // groups, math.prod(w[1:]))
        conv = None
        if len(w) == 4 and groups == 1 and set(dil) == {1} and len(set(stride)) == 1 and len(set(pad)) == 1:
            conv = ConvShape(x[0], x[1], x[2], x[3], w[0], w[2], w[3], stride[0], pad[0])
        g.matmul(name, gemm, ins, t.out(node), conv=conv)
    elif op in ("mm", "addmm", "bmm", "matmul", "linear"):
        a_node, b_node = (args[1], args[2]) if op == "addmm" else (args[0], args[1])
        a, b, y = _shape(a_node), _shape(b_node), _shape(node)
        k = a[-1]
        if op == "linear" or len(b) == 2:
            gemm = Gemm(1, math.prod(a[:-1]), y[-1], k)
        else:
            gemm = Gemm(math.prod(y[:-2]), y[-2], y[-1], k)
        reads = [t.access(a_node), t.access(b_node)] + ([t.access(args[0])] if op == "addmm" else ins[2:])
        g.matmul(name, gemm, reads, t.out(node))
    elif op in ("_native_batch_norm_legit_no_training", "_native_batch_norm_legit_functional", "batch_norm"):
        elements, c = _numel(args[0]), _shape(args[0])[1]
        running = TensorAccess(f"{name}.running_stats", 2 * c * STAT_BYTES, Role.STATE)
        if t.train:  # batch statistics, saved for backward; the running statistics are updated
            stats = TensorAccess(f"{name}.saved_stats", 2 * c * STAT_BYTES)
            rule = BackwardRule((ins[0].name, ins[1].name, stats.name), ELEMENT_FLOPS["norm"][1] * elements)
            flops = ELEMENT_FLOPS["norm"][0] * elements
            g.add(name, OpKind.BATCHNORM, flops, (*ins[:3], running), (t.out(node), stats, running), rule=rule)
        else:
            g.add(
                name, OpKind.BATCHNORM, ELEMENT_FLOPS["norm_infer"][0] * elements, (*ins[:3], running), (t.out(node),)
            )
    elif op in ("layer_norm", "native_layer_norm"):
        elements = _numel(args[0])
        rule = BackwardRule(tuple(x.name for x in ins[:2]), ELEMENT_FLOPS["norm"][1] * elements)
        g.add(name, OpKind.LAYERNORM, ELEMENT_FLOPS["norm"][0] * elements, ins[:3], (t.out(node),), rule=rule)
    elif op in ("softmax", "_softmax", "log_softmax", "_log_softmax"):
        out = t.out(node)
        g.elementwise(name, "softmax", ins[:1], out, _numel(node), saved=(out.name,), kind=OpKind.SOFTMAX)
    elif op in UNARY:
        out = t.out(node)
        what = {"relu": "relu", "gelu": "gelu", "tanh": "tanh"}.get(op)
        if what is None:
            g.add(
                name,
                OpKind.ELEMENTWISE,
                4 * _numel(node),
                ins,
                (out,),
                rule=BackwardRule((ins[0].name,), 3 * _numel(node)),
            )
        else:
            g.elementwise(
                name, what, ins, out, _numel(node), saved=(out.name if op in ("relu", "tanh") else ins[0].name,)
            )
    elif op in BINARY:
        g.add(name, OpKind.ELEMENTWISE, _numel(node), ins, (t.out(node),), rule=BackwardRule((), 0))
    elif op in ("max_pool2d", "max_pool2d_with_indices", "avg_pool2d", "adaptive_avg_pool2d", "mean"):
        outputs, inputs = _numel(node), _numel(args[0])
        if op.startswith("max"):
            window = math.prod(args[1])
            rule = BackwardRule((ins[0].name, name), outputs)
            g.add(name, OpKind.POOL, (window - 1) * outputs, ins, (t.out(node),), rule=rule)
        else:
            g.add(name, OpKind.POOL, inputs, ins, (t.out(node),), rule=BackwardRule((), inputs))
    elif op == "embedding":
        table, idx = t.canon(args[0]), args[1]
        rows = _shape(args[0])
        t.ints.add(t.canon(idx))
        picked = _numel(idx)
        weight = g.weight(table, math.prod(rows), min(rows[0], picked) * rows[1])
        ids = t.access(idx)
        g.add(name, OpKind.EMBEDDING, 0, (ids, weight), (t.out(node),), rule=BackwardRule((ids.name,), _numel(node)))
    elif op == "getitem":
        t.alias[name] = t.canon(args[0])
    else:
        unsupported.append(op)


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
    if run_mode.is_generation:  # a KV cache and one-token steps come from a decoder description
        raise UsageError("torch", "mode", "prefill and decode are for decoder language models (workloads/*.yaml)")
    module = module.train(run_mode is Mode.TRAIN) if run_mode is Mode.TRAIN else module.eval()
    try:
        exported = torch.export.export(module, tuple(example_inputs)).run_decompositions()
    except Exception as err:
        raise UsageError("torch", "module", f"torch.export failed: {' '.join(str(err).split())[:200]}") from None
    graph = exported.graph_module.graph
    signature = exported.graph_signature
    t = _Torch(name or type(module).__name__, run_precision, run_mode is Mode.TRAIN)
    params = {**signature.inputs_to_parameters, **signature.inputs_to_buffers}
    unsupported: list[str] = []
    user_inputs: list[Any] = []
    for node in graph.nodes:
        if node.op == "placeholder":
            if node.name in params and node.name in signature.inputs_to_parameters:
                t.weights[node.name] = _numel(node)
            elif node.name not in params:
                user_inputs.append(node)
                if not _shape(node) or str(node.meta["val"].dtype).startswith(("torch.int", "torch.long")):
                    t.ints.add(node.name)
        elif node.op == "call_function":
            _node(t, node, _name(node.target), unsupported)
    if unsupported:
        listed = ", ".join(f"{op} x{count}" for op, count in sorted(Counter(unsupported).items()))
        raise SpecError("torch", "graph", f"unsupported ATen ops: {listed}")
    outputs = [a for a in graph.output_node().args[0] if hasattr(a, "meta")] if graph.output_node() else []
    batch = _shape(user_inputs[0])[0] if user_inputs and _shape(user_inputs[0]) else 1
    if run_mode is Mode.TRAIN and outputs:
        logits = [t.access(o) for o in outputs]
        rows = sum(_numel(o) // max(1, _shape(o)[-1] if _shape(o) else 1) for o in outputs)
        labels = TensorAccess("labels", rows * INT_BYTES)
        elements = sum(_numel(o) for o in outputs)
        loss, rule = t.g.loss_op("loss", (*logits, labels), elements, (*(x.name for x in logits), labels.name))
        forward = t.g.graph(loss, rule, meta={"source": "torch"})
    else:
        forward = t.g.graph(meta={"source": "torch"})
    run_optimizer = Optimizer(optimizer) if optimizer is not None else None
    return finish_trace(forward, run_mode, batch, None, run_optimizer, options)
