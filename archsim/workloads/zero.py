"""ZeRO (Rajbhandari et al. 2020, arXiv 1910.02054): a data-parallel step with its training state sharded.

Plain data parallelism keeps every parameter's weights, gradients and optimizer state on every replica
and all-reduces the gradients. ZeRO shards that state over the ``N`` chips of the data-parallel group:

* stage 1 shards the optimizer state (fp32 master weights and moments): each chip updates ``1/N``
  of the parameters. Megatron-LM's *distributed optimizer* is this stage.
* stage 2 also shards the gradients;
* stage 3 also shards the weights.

Memory per chip (:func:`zero_memory`): those parts divided by ``N`` (rounded up); activations, KV
cache and buffers stay whole. The weights a stage-3 chip gathers for the ops running now are
communication buffers, not counted (as :mod:`archsim.workloads.memory` counts none).

Communication, as ops of the trace (:func:`with_zero`):

* stages 1 and 2: each gradient bucket (:func:`~archsim.workloads.transforms.gradient_buckets`) is
  reduce-scattered where plain data parallelism all-reduces it, the optimizer update runs on the
  chip's shard (``1/N`` of its FLOPs and bytes), then each bucket's updated weights are all-gathered.
  A ring all-reduce is a reduce-scatter then an all-gather, so the wire bytes equal plain data
  parallelism's;
* stage 3: the reduce-scatters and the sharded update as in stage 2, no all-gather after the update;
  instead each op's weights are all-gathered before the op reads them, once in the forward pass and
  once in the backward pass (recomputed ops included), as DeepSpeed gathers a module's parameters in
  its pre-forward hook. Consecutive ops' weights are gathered together up to ``bucket_bytes`` (DeepSpeed's
  prefetch bucket). Each gather is prefetched one group ahead: it is issued when the previous group's
  first op may start, so it runs on the communication stream while that group computes. Weights an
  op reads only in part (an embedding table's rows) are gathered whole: the parameter bytes no forward
  op reads are added to the first forward gather.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from archsim.workloads.memory import MemoryPerChip, memory_per_chip
from archsim.workloads.trace import CommGroup, CommKind, Op, Phase, Role, TensorAccess, Trace
from archsim.workloads.transforms import Bucket, comm_op, gradient_buckets, with_gradient_all_reduces

ZERO_STAGES = (0, 1, 2, 3)
"""The ZeRO stages: 0 is plain data parallelism."""


def zero_memory(trace: Trace, stage: int, data_parallel: int) -> MemoryPerChip:
    """What one chip holds running ``trace`` at ZeRO ``stage`` over ``data_parallel`` chips."""
    memory = memory_per_chip(trace)
    if stage == 0 or data_parallel == 1:
        return memory
    parameters = min(trace.precision.nbytes(trace.parameters), memory.weights)
    weights = memory.weights - parameters + math.ceil(parameters / data_parallel) if stage >= 3 else memory.weights
    gradients = math.ceil(memory.gradients / data_parallel) if stage >= 2 else memory.gradients
    optimizer = math.ceil(memory.optimizer_state / data_parallel)
    return MemoryPerChip.of(weights, gradients, optimizer, memory.activations, memory.kv_cache)


def _sharded_update(op: Op, data_parallel: int) -> Op:
    """The optimizer update of one chip's shard: ``1/N`` of the FLOPs and of every tensor, rounded up."""

    def shard(t: TensorAccess) -> TensorAccess:
        return replace(t, bytes=math.ceil(t.bytes / data_parallel))

    flops = math.ceil(op.flops / data_parallel)
    return replace(op, flops=flops, reads=tuple(map(shard, op.reads)), writes=tuple(map(shard, op.writes)))


def weight_gathers(
    ops: Sequence[Op], indices: Sequence[int], bucket_bytes: int, extra: int = 0
) -> list[tuple[int, int]]:
    """``(first op, bytes)`` of each gather of one pass over ``indices``, of weights read for the first time.

    A weight read again in full after a partial read gathers the rest; ``extra`` bytes join the first
    gather (see the module docstring).
    """
    gathered: dict[str, int] = {}  # weight -> bytes gathered so far in this pass
    groups: list[list[int]] = []
    for index in indices:
        new = {
            t.name: t.bytes - gathered.get(t.name, 0)
            for t in ops[index].reads
            if t.role is Role.WEIGHT and t.bytes > gathered.get(t.name, 0)
        }
        if not new:
            continue
        for name, nbytes in new.items():
            gathered[name] = gathered.get(name, 0) + nbytes
        nbytes = sum(new.values())
        if groups and groups[-1][1] < bucket_bytes:
            groups[-1][1] += nbytes
        else:
            groups.append([index, nbytes])
    if groups:
        groups[0][1] += extra
    return [(first, nbytes) for first, nbytes in groups]


def _unread_parameter_bytes(trace: Trace, forward: Sequence[int]) -> int:
    """Parameter bytes no forward op reads (the untouched rows of an embedding table)."""
    sizes: dict[str, int] = {}
    for index in forward:
        for t in trace.ops[index].reads:
            if t.role is Role.WEIGHT:
                sizes[t.name] = max(sizes.get(t.name, 0), t.bytes)
    return max(0, trace.precision.nbytes(trace.parameters) - sum(sizes.values()))


def with_zero(trace: Trace, stage: int, data_parallel: int, bucket_bytes: int, overlap: bool = True) -> Trace:
    """``trace`` with ZeRO ``stage``'s communication over the data-parallel group (see the module).

    Stage 0 is :func:`~archsim.workloads.transforms.with_gradient_all_reduces`. Comm ops are named
    ``reduce-scatter bK`` and ``all-gather bK`` (gradient bucket ``K``), ``all-gather fwd K`` and
    ``all-gather bwd K`` (stage 3's ``K``-th gather of a pass). A trace without gradients comes back
    unchanged.
    """
    if stage == 0:
        return with_gradient_all_reduces(trace, bucket_bytes, overlap)
    buckets = gradient_buckets(trace.ops, bucket_bytes)
    if not buckets:
        return trace
    last = max(w for b in buckets for w in b.writers)
    every_writer = tuple(sorted({w for b in buckets for w in b.writers}))
    closes: dict[int, list[int]] = {}
    for k, bucket in enumerate(buckets):
        closes.setdefault(max(bucket.writers) if overlap else last, []).append(k)
    updates = [i for i, op in enumerate(trace.ops) if op.phase is Phase.UPDATE]
    if updates and min(updates) <= max(closes):
        raise ValueError(f"{trace.name}: an optimizer update comes before the last gradient it needs")
    if not overlap:  # each bucket waits for the whole backward pass
        buckets = [Bucket(b.bytes, every_writer) for b in buckets]
    before: dict[int, list[tuple[str, int]]] = {}  # op -> gathers issued just before it
    first_of: dict[str, int] = {}  # gather name -> the op that waits for it
    if stage >= 3:
        forward = [i for i, op in enumerate(trace.ops) if op.phase is Phase.FORWARD]
        backward = [i for i, op in enumerate(trace.ops) if op.phase.is_backward]
        passes = (
            ("fwd", weight_gathers(trace.ops, forward, bucket_bytes, _unread_parameter_bytes(trace, forward))),
            ("bwd", weight_gathers(trace.ops, backward, bucket_bytes)),
        )
        for label, groups in passes:
            for k, (first, nbytes) in enumerate(groups):
                name = f"all-gather {label} {k}"
                # prefetched: issued where the previous group may start (the first group: where it may)
                issue = groups[k - 1][0] if k else first
                before.setdefault(issue, []).append((name, nbytes))
                first_of[name] = first
    return _assemble(trace, stage, data_parallel, buckets, closes, before, first_of)


def _assemble(
    trace: Trace,
    stage: int,
    data_parallel: int,
    buckets: list[Bucket],
    closes: dict[int, list[int]],
    before: dict[int, list[tuple[str, int]]],
    first_of: dict[str, int],
) -> Trace:
    """The ops of ``trace`` with the gathers, reduce-scatters and sharded update of :func:`with_zero`."""
    position: list[int] = []
    ops: list[Op] = []
    waits: dict[int, list[int]] = {}  # original op -> comm ops it waits for
    scatters: list[int] = []
    previous_gather: int | None = None
    for index, op in enumerate(trace.ops):
        for name, nbytes in before.get(index, []):
            # a gather may start when the op it is issued at may, after the gather before it
            issued = {position[d] for d in trace.ops[index].deps}
            if previous_gather is not None:
                issued.add(previous_gather)
            previous_gather = len(ops)
            waits.setdefault(first_of[name], []).append(len(ops))
            phase = Phase.FORWARD if " fwd " in name else Phase.BACKWARD_DATA
            group = CommGroup.DATA_PARALLEL
            ops.append(comm_op(name, CommKind.ALL_GATHER, nbytes, tuple(sorted(issued)), group, phase))
        deps = tuple(sorted({*(position[d] for d in op.deps), *waits.get(index, [])}))
        if op.phase is Phase.UPDATE:
            deps = tuple(sorted({*deps, *scatters}))
            op = _sharded_update(op, data_parallel)
        position.append(len(ops))
        ops.append(op if deps == op.deps else op.with_deps(deps))
        if op.phase is Phase.UPDATE and stage < 3:
            update = len(ops) - 1
            for k, bucket in enumerate(buckets):
                gather = comm_op(
                    f"all-gather b{k}",
                    CommKind.ALL_GATHER,
                    bucket.bytes,
                    (update,),
                    CommGroup.DATA_PARALLEL,
                    Phase.UPDATE,
                )
                ops.append(gather)
        for k in closes.get(index, []):
            writers = buckets[k].writers
            scatters.append(len(ops))
            ops.append(
                comm_op(
                    f"reduce-scatter b{k}",
                    CommKind.REDUCE_SCATTER,
                    buckets[k].bytes,
                    tuple(position[w] for w in writers),
                    CommGroup.DATA_PARALLEL,
                    Phase.BACKWARD_WEIGHT,
                )
            )
    return replace(trace, ops=tuple(ops))
