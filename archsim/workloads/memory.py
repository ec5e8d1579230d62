"""Device memory a step needs (``Trace.memory_bytes``), from its ops; all counts in bytes.

* Persistent in both modes: weights (``parameters * precision.bytes``) and buffers (the distinct
  :attr:`Role.STATE` tensors the forward ops read, e.g. batchnorm running statistics).
* Inference adds the peak of live activations (and, generating text, the KV cache): a tensor is live
  from the op that writes it (or first reads it, for a network input) through the last op that reads
  it, ops running one at a time in trace order. This bounds the activation memory of a sequential
  schedule from above.
* Training adds parameter gradients (run precision), fp32 master weights (when the run precision is
  narrower than fp32 and there is an optimizer), the optimizer state, the saved activations (every
  forward tensor a backward op reads, counted once at its full size; an in-place ReLU's input is
  therefore no extra copy, since only its output is saved) and a transient term: the largest set
  of unsaved activations and activation gradients that any single op reads and writes. With
  recomputation the saved activations are the checkpoints, plus the largest set of tensors one
  segment rebuilds for its backward pass.

Not counted: framework workspace, allocator fragmentation, communication buffers.

:func:`resident_bytes` is the part the forward and backward ops work with: the step's memory less the
state only the optimizer update touches (fp32 master weights and moments), which a chip may keep in
slower memory and stream in for the update (the IPU's optimizer-state offloading).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from archsim.spec.common import Fusion
from archsim.spec.model import Optimizer
from archsim.workloads.fusion import fuse
from archsim.workloads.graph import ForwardGraph
from archsim.workloads.options import TraceOptions
from archsim.workloads.trace import Mode, Op, Phase, Role, Trace
from archsim.workloads.training import MASTER_BYTES, OPTIMIZER_COST, TrainingStep, training_ops


def update_only_bytes(ops: Sequence[Op]) -> int:
    """Bytes of the state tensors (master weights, optimizer moments) no op but the update reads."""
    touched: set[str] = set()
    sizes: dict[str, int] = {}
    for op in ops:
        for t in (*op.reads, *op.writes):
            if t.role is not Role.STATE:
                continue
            if op.phase is Phase.UPDATE:
                sizes[t.name] = max(sizes.get(t.name, 0), t.bytes)
            else:
                touched.add(t.name)
    return sum(size for name, size in sizes.items() if name not in touched)


def resident_bytes(trace: Trace, needed: int | None = None, share: float = 1.0) -> int:
    """The step's memory (or ``needed``, a chip's) less the state only its optimizer update touches.

    ``share`` is the chip's share of the parameters, and so of that state (a pipeline stage's).
    """
    total = trace.memory_bytes if needed is None else needed
    return max(0, total - round(update_only_bytes(trace.ops) * share))


def persistent_bytes(graph: ForwardGraph) -> int:
    """Weights in the run precision plus forward state buffers."""
    buffers: dict[str, int] = {}
    for op in graph.ops:
        for t in op.reads:
            if t.role is Role.STATE:
                buffers[t.name] = t.bytes
    return graph.parameters * graph.precision.bytes + sum(buffers.values())


def peak_live_bytes(ops: Sequence[Op]) -> int:
    """Largest total of activation bytes live at once when ``ops`` run one at a time in order."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    size: dict[str, int] = {}
    for index, op in enumerate(ops):
        for t in (*op.reads, *op.writes):
            if t.role is not Role.ACTIVATION:
                continue
            first.setdefault(t.name, index)
            last[t.name] = index
            size[t.name] = max(size.get(t.name, 0), t.bytes)
    delta = [0] * (len(ops) + 1)
    for name, start in first.items():
        delta[start] += size[name]
        delta[last[name] + 1] -= size[name]
    peak = live = 0
    for change in delta:
        live += change
        peak = max(peak, live)
    return peak


def inference_memory(graph: ForwardGraph) -> int:
    """Weights, buffers, the peak of live activations of the forward ops and a generation's KV cache.

    The cache (:attr:`ForwardGraph.kv_cache_bytes`) is counted whole beside the live activations, so
    the one layer's keys and values an op is reading are counted twice: an upper bound.
    """
    return persistent_bytes(graph) + peak_live_bytes(graph.ops) + graph.kv_cache_bytes


def _transient_bytes(ops: Iterable[Op], saved: frozenset[str]) -> int:
    """Largest total of unsaved activation bytes (activations and their gradients) one op touches."""
    peak = 0
    for op in ops:
        touched = {
            t.name: t.bytes for t in (*op.reads, *op.writes) if t.role is Role.ACTIVATION and t.name not in saved
        }
        peak = max(peak, sum(touched.values()))
    return peak


def training_memory(graph: ForwardGraph, step: TrainingStep, optimizer: Optimizer | None) -> int:
    """Weights, buffers, gradients, master weights, optimizer state, saved and transient activations."""
    count, elem = graph.parameters, graph.precision.bytes
    total = persistent_bytes(graph) + count * elem
    if optimizer is not None:
        state, _ = OPTIMIZER_COST[optimizer]
        total += count * state + (count * MASTER_BYTES if elem < MASTER_BYTES else 0)
    sizes: dict[str, int] = {}
    for op in step.ops:
        for t in (*op.reads, *op.writes):
            if t.name in step.saved:
                sizes[t.name] = max(sizes.get(t.name, 0), t.bytes)
    return total + sum(sizes.values()) + step.recomputed_bytes + _transient_bytes(step.ops, step.saved)


def finish_trace(
    graph: ForwardGraph,
    mode: Mode,
    batch: int,
    seq_len: int | None,
    optimizer: Optimizer | None,
    options: TraceOptions | None = None,
) -> Trace:
    """Turn a forward graph into the trace of ``mode``, with its memory estimate.

    ``options`` first fuses the forward graph (:func:`~archsim.workloads.fusion.fuse`); training then
    derives the loss, backward and update ops (:func:`~archsim.workloads.training.training_ops`,
    recomputing forward ops if asked); inference keeps the forward ops. Every builder (built-in
    models, inline GEMMs and convolutions, imported ONNX and PyTorch graphs) ends here, so their
    traces are derived the same way.
    """
    options = options or TraceOptions()
    graph = fuse(graph, options.fusion)
    meta = dict(graph.meta)
    if options.fusion is not Fusion.NONE:
        meta["fusion"] = options.fusion.value
    if mode is Mode.TRAIN:
        step = training_ops(graph, optimizer, options.recompute)
        ops, memory = step.ops, training_memory(graph, step, optimizer)
        if optimizer is not None:
            meta["optimizer"] = optimizer.value
        if options.recompute:
            meta["recompute"] = "true"
    else:
        ops, memory = graph.ops, inference_memory(graph)
    return Trace(graph.name, mode, batch, graph.precision, ops, graph.parameters, memory, seq_len, meta)
