"""Device memory a step needs (``Trace.memory_bytes``), from its ops; all counts in bytes.

* Persistent in both modes: weights (``precision.nbytes(parameters)``) and buffers (the distinct
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
from dataclasses import dataclass

from archsim.errors import UsageError
from archsim.spec.common import BITS_PER_BYTE, Fusion
from archsim.spec.model import Optimizer
from archsim.spec.software import Rewrite
from archsim.workloads.graph import ForwardGraph
from archsim.workloads.options import Recompute, TraceOptions
from archsim.workloads.rewrites import apply_rewrites
from archsim.workloads.trace import Mode, Op, Phase, Role, Trace
from archsim.workloads.training import MASTER_BYTES, OPTIMIZER_COST, TrainingStep, training_ops

WEIGHT_BYTES_META = "weight_bytes"
"""``Trace.meta`` key of a trace whose weights are not all at its precision (a block-scaled run's,
:mod:`archsim.workloads.quantize`): their bytes, buffers not included."""
RECOMPUTE_META = {Recompute.FULL: "true", Recompute.SELECTIVE: "selective"}
"""A training trace's ``meta["recompute"]`` for what it recomputes (absent: nothing)."""


def trace_recompute(trace: Trace) -> Recompute:
    """What a trace recomputes, from its ``meta`` (:data:`RECOMPUTE_META`)."""
    found = trace.meta.get("recompute")
    return next((level for level, text in RECOMPUTE_META.items() if text == found), Recompute.NONE)


@dataclass(frozen=True, slots=True)
class MemoryPerChip:
    """A chip's memory for one step, by what it holds (bytes); ``total`` is the figure memory fit checks.

    ``weights``: the parameters in the run precision plus buffers (batchnorm statistics);
    ``gradients``: the parameter gradients in the run precision (training); ``optimizer_state``: what
    only the update touches -- the fp32 master weights when the run is narrower than fp32, and the
    optimizer's fp32 state (Adam: 8 bytes per parameter, the two moments); ``activations``: the rest of
    the step (saved, rebuilt and transient activations, or the peak of live ones in inference);
    ``kv_cache``: a generation's keys and values. Mixed-precision Adam is therefore 2 + 2 + 12 bytes
    per parameter before activations, as Rajbhandari et al. (2020, arXiv 1910.02054, Sec. 3.1) count.
    """

    weights: int
    gradients: int
    optimizer_state: int
    activations: int
    kv_cache: int
    total: int

    @classmethod
    def of(cls, weights: int, gradients: int, optimizer_state: int, activations: int, kv_cache: int) -> MemoryPerChip:
        """The split with its ``total``, the sum of the parts."""
        total = weights + gradients + optimizer_state + activations + kv_cache
        return cls(weights, gradients, optimizer_state, activations, kv_cache, total)

    def scaled(self, fraction: float, total: int) -> MemoryPerChip:
        """A pipeline stage's chip: ``fraction`` of each part, activations the rest of ``total``.

        The parts are cut (cache, optimizer state, gradients, weights) where rounding would put them
        above ``total``, so that the split always sums to it.
        """
        parts = [round(part * fraction) for part in (self.weights, self.gradients, self.optimizer_state, self.kv_cache)]
        over = sum(parts) - total
        for index in (3, 2, 1, 0):
            cut = min(max(0, over), parts[index])
            parts[index] -= cut
            over -= cut
        weights, gradients, optimizer, cache = parts
        return MemoryPerChip.of(weights, gradients, optimizer, total - sum(parts), cache)


def weight_bytes(trace: Trace) -> int:
    """Bytes of the trace's parameters: ``meta["weight_bytes"]`` where it says, else all at its precision."""
    found = trace.meta.get(WEIGHT_BYTES_META)
    return int(found) if found is not None else trace.precision.nbytes(trace.parameters)


def memory_per_chip(trace: Trace) -> MemoryPerChip:
    """The split of ``trace.memory_bytes`` (its ``total``) by what the step holds.

    Weights are :func:`weight_bytes` plus the state buffers forward ops read; gradients as many bytes as
    the parameters at the run precision in training; the optimizer state is :func:`update_only_bytes`; the
    KV cache is the trace's ``kv_cache_bytes``; activations are what remains. A trace file whose parts exceed its
    ``memory_bytes`` has them cut, in that order, so that the parts always sum to it.
    """
    buffers: dict[str, int] = {}  # state forward ops read
    touched: set[str] = set()  # state any op but the update touches
    updated: dict[str, int] = {}  # state the update touches
    for op in trace.ops:
        update = op.phase is Phase.UPDATE
        for reading, tensors in ((True, op.reads), (False, op.writes)):
            for t in tensors:
                if t.role is not Role.STATE:
                    continue
                if update:
                    updated[t.name] = max(updated.get(t.name, 0), t.bytes)
                    continue
                touched.add(t.name)
                if reading:
                    buffers[t.name] = t.bytes
    left = trace.memory_bytes
    parts: list[int] = []
    train = trace.mode is Mode.TRAIN
    for wanted in (
        weight_bytes(trace) + sum(buffers.values()),
        trace.precision.nbytes(trace.parameters) if train else 0,
        sum(size for name, size in updated.items() if name not in touched) if train else 0,  # update_only_bytes
        int(trace.meta.get("kv_cache_bytes", "0")),
    ):
        parts.append(min(wanted, left))
        left -= parts[-1]
    weights, gradients, optimizer, cache = parts
    return MemoryPerChip.of(weights, gradients, optimizer, left, cache)


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


def resident_bytes(trace: Trace, needed: int | None = None, share: float = 1.0, update_only: int | None = None) -> int:
    """The step's memory (or ``needed``, a chip's) less the state only its optimizer update touches.

    ``share`` is the chip's share of the parameters, and so of that state (a pipeline stage's);
    ``update_only``: :func:`update_only_bytes` of the trace's ops, when the caller has it (it walks them).
    """
    total = trace.memory_bytes if needed is None else needed
    state = update_only_bytes(trace.ops) if update_only is None else update_only
    return max(0, total - round(state * share))


def persistent_bytes(graph: ForwardGraph) -> int:
    """Weights in the run precision plus forward state buffers."""
    buffers: dict[str, int] = {}
    for op in graph.ops:
        for t in op.reads:
            if t.role is Role.STATE:
                buffers[t.name] = t.bytes
    return graph.precision.nbytes(graph.parameters) + sum(buffers.values())


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
    count, precision = graph.parameters, graph.precision
    total = persistent_bytes(graph) + precision.nbytes(count)
    if optimizer is not None:
        state, _ = OPTIMIZER_COST[optimizer]
        total += count * state + (count * MASTER_BYTES if precision.bits < MASTER_BYTES * BITS_PER_BYTE else 0)
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

    ``options`` first rewrites the forward graph (:func:`~archsim.workloads.rewrites.apply_rewrites`); training then
    derives the loss, backward and update ops (:func:`~archsim.workloads.training.training_ops`,
    recomputing forward ops if asked); inference keeps the forward ops. Every builder (built-in
    models, inline GEMMs and convolutions, imported ONNX and PyTorch graphs) ends here, so their
    traces are derived the same way.
    """
    options = options or TraceOptions()
    rewrites = options.applied()
    graph = apply_rewrites(graph, rewrites, mode)
    meta = dict(graph.meta)
    if Rewrite.NORM_ACT in rewrites:
        meta["fusion"] = Fusion.NORM_ACT.value
    # a padding rewrite acts as the graph is built: meta["padding"] says where it did
    built = {Rewrite.REMOVE_PADDING, Rewrite.PACK_SEQUENCES}
    others = sorted(r.value for r in rewrites - {Rewrite.NORM_ACT, Rewrite.RECOMPUTE} - built)
    if others:
        meta["rewrites"] = ",".join(others)
    recompute = Recompute.NONE
    if mode is Mode.TRAIN and Rewrite.RECOMPUTE in rewrites:
        recompute = Recompute.FULL
    elif mode is Mode.TRAIN and options.recomputation is Recompute.SELECTIVE:
        if not graph.core:
            problem = "selective recomputation reruns a decoder's attention core: this workload has none"
            raise UsageError(graph.name, "--recompute", problem)
        recompute = Recompute.SELECTIVE
    if mode is Mode.TRAIN:
        step = training_ops(graph, optimizer, recompute)
        ops, memory = step.ops, training_memory(graph, step, optimizer)
        if optimizer is not None:
            meta["optimizer"] = optimizer.value
        if recompute is not Recompute.NONE:
            meta["recompute"] = RECOMPUTE_META[recompute]
    else:
        ops, memory = graph.ops, inference_memory(graph)
    return Trace(graph.name, mode, batch, graph.precision, ops, graph.parameters, memory, seq_len, meta)
