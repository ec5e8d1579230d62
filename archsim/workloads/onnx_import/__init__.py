"""ONNX models -> forward graphs (and traces), with shapes from ONNX shape inference; no weights needed.

:func:`import_onnx` reads a ``.onnx`` file with the ``onnx`` package (an optional dependency:
``pip install 'archsim[onnx]'``), binds its symbolic dimensions, runs ONNX shape inference and turns
each node into archsim ops with the conventions of :mod:`archsim.workloads.graph`, so that the
training derivation (:mod:`archsim.workloads.training`) applies to it as to the built-in models.

Binding: a symbolic (or unset) dimension on axis 0 of a graph input is the batch (``batch``; None
keeps a fixed batch, or binds a symbolic one to 1); any other symbolic dimension is the sequence
length (``seq_len``, required when there is one). A fixed dimension cannot be rebound.

Weights: float initializers (and float ``Constant`` outputs) of more than one element are trainable
weights (:attr:`Role.WEIGHT`, counted in the parameters); their data is never read, so a model whose
initializers are external files that are absent, or stripped, imports. Integer initializers, scalars,
and everything computed only from them and from ``Shape`` (shape arithmetic) are constants: folded
away, never ops and never reads.

Ops, with their FLOPs (a MAC is 2; per-element counts are modelling assumptions, as in
:data:`~archsim.workloads.graph.ELEMENT_FLOPS`):

* ``Conv`` -> ``conv2d`` with its :class:`~archsim.workloads.trace.ConvShape` when 2-D, ungrouped,
  undilated, with equal strides and equal pads; any other convolution is a ``matmul`` with the
  implicit-GEMM view (``batch = groups``, ``m = N*P*Q``, ``n = K/groups``, ``k = C/groups*R*S``).
  A bias is a third read.
* ``Gemm``, ``MatMul`` -> ``matmul``. A right operand without batch dimensions folds the left
  operand's leading dimensions into ``m`` (a linear layer); otherwise the broadcast batch dimensions
  are the Gemm ``batch`` (attention's ``Q @ K^T`` and ``probs @ V``). A ``MatMul`` whose only consumer
  is an ``Add`` of a 1-D weight is one op with the bias as its third read, as the built-in linear layers.
* ``Attention`` (opset 23) -> scores ``Q K^T``, scale and mask, softmax and context ``P V`` as the
  built-in decoder builds attention (grouped K/V heads kept; a ``past_key``/``past_value`` cache is
  copied into ``present`` and read whole; :mod:`~archsim.workloads.onnx_import.attention`).
* ``BatchNormalization`` -> ``batchnorm`` (5 FLOPs per element in training, with batch statistics
  written for backward; 2 in inference); the running mean and variance are one fp32 state tensor.
  ``LayerNormalization``, ``InstanceNormalization``, ``GroupNormalization`` -> ``layernorm`` (5 per
  element; training writes two fp32 statistics per normalized row). RMS normalization -- the
  ``RMSNormalization`` node, or the chain a PyTorch RMSNorm exports as (``Pow``, ``ReduceMean``,
  ``Add``, ``Sqrt``, ``Reciprocal`` or ``Div``, ``Mul``, a gain ``Mul``) -- is one ``layernorm`` at the
  built-in decoder's ``rmsnorm`` cost (4 per element, one statistic per row;
  :mod:`~archsim.workloads.onnx_import.norms`).
* Activations, element-wise arithmetic, comparisons and reductions -> ``elementwise`` (``Softmax``,
  ``LogSoftmax``: ``softmax``) at :data:`~archsim.workloads.onnx_import.ops.ELEMENTWISE_FLOPS` per
  output element (per input element for reductions).
* ``MaxPool`` (``R*S - 1`` compares per output), ``AveragePool`` (``R*S`` per output),
  ``GlobalAveragePool`` / ``GlobalMaxPool`` (one per input element) -> ``pool``.
* ``Gather`` from a weight -> ``embedding`` (no FLOPs; reads only the rows it gathers, and the
  indices unless they are constant, as positions are); from an activation -> a 0-FLOP copy.
* Data movement (``Concat``, ``Split``, ``Slice``, ``Pad``, ``Tile``, ``Cast``, ``Where``...) -> a
  0-FLOP ``elementwise`` op with its bytes; ``TopK`` (an MoE router's) the same plus a compare per
  input element; ``Resize`` 1 FLOP per output.
* Free, no op (the output is the input under another name): ``Reshape``, ``Flatten``, ``Squeeze``,
  ``Unsqueeze``, ``Transpose``, ``Identity``, ``Expand``, and ``Dropout`` in inference (in training
  it is a dropout op writing a 1-byte mask).

Any other op is unsupported: the import fails naming every unsupported op type with its count. In
training a softmax-cross-entropy loss over the graph's float outputs is appended (an ONNX model
carries no loss), with int32 labels, one per output row, as the built-in models do.

Bytes are ``precision.nbytes(elements)`` for float tensors whatever the file's element type, 4 for
integer tensors (ids), 1 for booleans. Limits (:mod:`archsim.limits`): the file at most
:data:`~archsim.limits.MAX_MODEL_FILE_BYTES`, at most :data:`~archsim.limits.MAX_TRACE_OPS` nodes,
every Gemm dimension at most :data:`~archsim.limits.MAX_DIM` and every count at most
:data:`~archsim.limits.MAX_INT`. A file that is not a valid ONNX model (malformed, truncated,
unsorted, with undefined inputs or no opset) is a :class:`~archsim.errors.SpecError`.

The package: :mod:`~archsim.workloads.onnx_import.load` reads, checks, binds and shape-infers a model
and folds its shape arithmetic; :mod:`~archsim.workloads.onnx_import.ops` lists the supported op
types and their FLOPs; :mod:`~archsim.workloads.onnx_import.importer` turns nodes into archsim ops;
:mod:`~archsim.workloads.onnx_import.norms` the normalizations; this module holds the entry points.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from archsim.errors import LimitError, SpecError
from archsim.limits import MAX_INT
from archsim.spec.common import Precision
from archsim.spec.model import Optimizer
from archsim.workloads.graph import ForwardGraph
from archsim.workloads.memory import finish_trace
from archsim.workloads.onnx_import.importer import Importer
from archsim.workloads.onnx_import.load import bind, check_structure, fold_constants, infer, load_onnx, strip_weights
from archsim.workloads.onnx_import.ops import SUPPORTED
from archsim.workloads.options import TraceOptions
from archsim.workloads.quantize import at_format
from archsim.workloads.trace import Mode, Trace

__all__ = ["DEFAULT_OPTIMIZER", "import_onnx", "load_onnx", "onnx_graph", "onnx_trace"]

DEFAULT_OPTIMIZER = Optimizer.ADAM
"""Optimizer of an imported model's training step (ONNX files do not say; Adam is the common one)."""


def onnx_graph(
    model: Any,
    source: str,
    mode: Mode,
    batch: int | None,
    precision: Precision,
    seq_len: int | None,
    name: str | None = None,
) -> tuple[ForwardGraph, int, int | None]:
    """The forward graph of an ONNX ``ModelProto`` (modified in place: bound and stripped).

    Returns the graph and the batch and sequence length it was bound to.
    """
    check_structure(model, source)
    unknown = Counter(
        node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        for node in model.graph.node
        if not (node.domain in ("", "ai.onnx") and node.op_type in SUPPORTED)
        and not (node.domain == "com.microsoft" and node.op_type == "FastGelu")
    )
    if unknown:
        listed = ", ".join(f"{op} x{count}" for op, count in sorted(unknown.items()))
        raise SpecError(source, "graph.node", f"unsupported ONNX ops: {listed}")
    strip_weights(model)
    bound_batch, bound_seq = bind(model, source, batch, seq_len)
    folded = fold_constants(model, source)
    infos = infer(model, source)
    graph_name = name or model.graph.name or Path(source).stem
    importer = Importer(model, infos, source, graph_name, mode, precision, folded)
    unsupported = importer.run()
    if unsupported:
        counts = Counter(unsupported)
        listed = ", ".join(f"{op} x{count}" for op, count in sorted(counts.items()))
        raise SpecError(source, "graph.node", f"unsupported ONNX ops: {listed}")
    graph = importer.finish()
    for op in graph.ops:
        if op.flops > MAX_INT or op.bytes > MAX_INT:
            raise LimitError(source, f"node {op.name!r}", f"a count exceeds the limit of {MAX_INT}")
    meta = {"source": "onnx", "file": Path(source).name}
    if model.producer_name:
        meta["producer"] = model.producer_name
    return replace(graph, meta=meta), bound_batch, bound_seq


def import_onnx(
    path: str | os.PathLike[str],
    mode: Mode | str = Mode.INFER,
    batch: int | None = None,
    precision: Precision | str = Precision.FP16,
    seq_len: int | None = None,
    optimizer: Optimizer | str | None = DEFAULT_OPTIMIZER,
    name: str | None = None,
    options: TraceOptions | None = None,
) -> Trace:
    """The trace of one step of the ONNX model at ``path`` (see the module docstring).

    ``optimizer`` is the training step's update (None: no update op); ``options`` fuse ops or
    recompute activations as for the built-in models. Raises
    :class:`~archsim.errors.ArchsimError` subclasses for bad files and arguments.
    """
    run_mode, run_precision = Mode(mode), Precision(precision)
    source = str(path)
    run_optimizer = Optimizer(optimizer) if optimizer is not None else None

    def build(stored: Precision) -> Trace:
        graph, bound_batch, bound_seq = onnx_graph(load_onnx(path), source, run_mode, batch, stored, seq_len, name)
        return finish_trace(graph, run_mode, bound_batch, bound_seq, run_optimizer, options)

    return at_format(run_precision, run_mode, source, build)


def onnx_trace(
    workload: str,
    mode: Mode,
    batch: int | None,
    precision: Precision,
    seq_len: int | None,
    options: TraceOptions | None = None,
) -> Trace:
    """The trace :func:`~archsim.workloads.build_trace` gives for an ONNX file (Adam in training)."""
    return import_onnx(workload, mode, batch, precision, seq_len, DEFAULT_OPTIMIZER, options=options)
