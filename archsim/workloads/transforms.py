"""Transforms of a trace for running it on several chips: communication inserted as ops.

A trace describes one chip's step. Running it data parallel adds what the replicas say to each other:
:func:`with_gradient_all_reduces` inserts one all-reduce op (:attr:`~archsim.workloads.trace.OpKind.COMM`)
per gradient bucket, as PyTorch DistributedDataParallel does:

* the parameter gradients, in the order the backward pass finishes them (their last writer), are
  packed into buckets; a bucket closes when it holds ``bucket_bytes`` (DDP's ``bucket_cap_mb``,
  25 MiB by default) -- :func:`gradient_buckets`;
* each bucket's all-reduce is inserted right after the last op that writes one of its gradients and
  depends on those writers (with ``overlap`` off, on every gradient writer: it waits for the whole
  backward pass);
* every optimizer update op depends on every all-reduce.

The engine (:func:`archsim.engine.parallel.data_parallel_step`) prices compute ops with the chip's
cost model and communication ops with the system's links. :func:`compute_only` is the inverse view: the
compute ops alone, with a dependency through a communication op replaced by that op's own compute
dependencies (the same step on one chip, with nothing to say to anyone).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from archsim.workloads.trace import CommGroup, CommKind, CommOp, Op, OpKind, Phase, Role, Trace

DEFAULT_BUCKET_BYTES = 25 * 2**20
"""Gradient bucket size (PyTorch DistributedDataParallel's ``bucket_cap_mb`` default, 25 MiB)."""


@dataclass(frozen=True)
class Bucket:
    """Parameter gradients all-reduced together: their bytes and the ops that write them."""

    bytes: int
    writers: tuple[int, ...]


def gradient_buckets(ops: Sequence[Op], bucket_bytes: int, keep: Callable[[str], bool] | None = None) -> list[Bucket]:
    """Gradients in the order their last writer appears, packed into buckets of ``bucket_bytes``.

    ``keep`` (None: every gradient) picks the gradients by name.
    """
    last_writer: dict[str, int] = {}
    size: dict[str, int] = {}
    for index, op in enumerate(ops):
        for t in op.writes:
            if t.role is Role.GRADIENT and (keep is None or keep(t.name)):
                last_writer[t.name] = index
                size[t.name] = t.bytes
    buckets: list[Bucket] = []
    nbytes, writers = 0, set()
    for name in sorted(last_writer, key=lambda n: (last_writer[n], n)):
        nbytes += size[name]
        writers.add(last_writer[name])
        if nbytes >= bucket_bytes:
            buckets.append(Bucket(nbytes, tuple(sorted(writers))))
            nbytes, writers = 0, set()
    if writers:
        buckets.append(Bucket(nbytes, tuple(sorted(writers))))
    return buckets


def comm_op(
    name: str, kind: CommKind, nbytes: int, deps: tuple[int, ...], group: CommGroup, phase: Phase = Phase.FORWARD
) -> Op:
    """A communication op: ``kind`` of ``nbytes`` per chip over ``group``, after ``deps``."""
    return Op(name, OpKind.COMM, phase, 0, (), (), deps, comm=CommOp(kind, nbytes, group))


Inserted = list[tuple[str, CommKind, int]]
"""Communication ops to insert after one op: (name, kind, bytes per chip) each, in order."""


def in_stream_after(trace: Trace, after: Callable[[int, Op], Inserted], group: CommGroup) -> tuple[Op, ...]:
    """``trace``'s ops, each followed by the communication ops ``after(index, op)`` names over ``group``.

    The inserted ops run one after another behind their op (in its phase; a backward op's in the
    data-gradient phase), and every later op that depended on the op depends on the last of them
    instead: the chip's stream waits for them, as tensor- and expert-parallel collectives make it.
    """
    ops: list[Op] = []
    position: list[int] = []  # per old op: the new index later ops depend on (its last comm op, or itself)
    for index, op in enumerate(trace.ops):
        deps = tuple(sorted({position[d] for d in op.deps}))
        ops.append(op if deps == op.deps else op.with_deps(deps))
        last = len(ops) - 1
        phase = Phase.BACKWARD_DATA if op.phase.is_backward and op.phase is not Phase.RECOMPUTE else op.phase
        for name, kind, nbytes in after(index, op):
            ops.append(comm_op(name, kind, nbytes, (last,), group, phase))
            last = len(ops) - 1
        position.append(last)
    return tuple(ops)


def with_gradient_all_reduces(
    trace: Trace,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    overlap: bool = True,
    keep: Callable[[str], bool] | None = None,
    group: CommGroup = CommGroup.DATA_PARALLEL,
) -> Trace:
    """``trace`` with an all-reduce of every gradient bucket over the data-parallel group (see the module).

    The all-reduces are named ``all-reduce bK`` (bucket ``K``, in the order the backward pass closes
    them). A trace without parameter gradients (inference) comes back unchanged. ``keep`` picks the
    gradients by name (None: all) and ``group`` is the chips they are all-reduced over (the expert
    weights' over the replicas that hold the same experts: :mod:`archsim.workloads.expert_parallel`),
    whose buckets are named ``GROUP all-reduce bK``.
    """
    buckets = gradient_buckets(trace.ops, bucket_bytes, keep)
    label = "all-reduce" if group is CommGroup.DATA_PARALLEL else f"{group.value} all-reduce"
    if not buckets:
        return trace
    last = max(w for b in buckets for w in b.writers)
    every_writer = tuple(sorted({w for b in buckets for w in b.writers}))
    after = [max(b.writers) if overlap else last for b in buckets]
    updates = [i for i, op in enumerate(trace.ops) if op.phase is Phase.UPDATE]
    if updates and min(updates) <= max(after):
        raise ValueError(f"{trace.name}: an optimizer update comes before the last gradient it needs")
    position: list[int] = []
    ops: list[Op] = []
    reduces: list[int] = []
    pending = 0
    for index, op in enumerate(trace.ops):
        deps = tuple(position[d] for d in op.deps)
        if op.phase is Phase.UPDATE:
            deps = (*deps, *reduces)
        position.append(len(ops))
        ops.append(op if deps == op.deps else op.with_deps(deps))
        while pending < len(buckets) and after[pending] == index:
            bucket = buckets[pending]
            writers = bucket.writers if overlap else every_writer
            reduces.append(len(ops))
            ops.append(
                comm_op(
                    f"{label} b{pending}",
                    CommKind.ALL_REDUCE,
                    bucket.bytes,
                    tuple(position[w] for w in writers),
                    group,
                    Phase.BACKWARD_WEIGHT,
                )
            )
            pending += 1
    return replace(trace, ops=tuple(ops))


def compute_only(trace: Trace) -> Trace:
    """``trace`` without its off-stream communication ops (the same object when it has none).

    A compute op that waited for a communication op waits for that op's compute dependencies instead
    (through any chain of communication ops). In-stream ones (tensor parallel) stay: the chip runs
    them in order with its compute (:attr:`~archsim.workloads.trace.CommOp.in_stream`).
    """
    if not trace.has_link_comm:
        return trace
    reach: list[tuple[int, ...]] = []  # per op: the positions, among compute ops, it stands for
    ops: list[Op] = []
    for op in trace.ops:
        deps = tuple(sorted({p for d in op.deps for p in reach[d]}))
        if op.comm is not None and not op.comm.in_stream:
            reach.append(deps)
            continue
        reach.append((len(ops),))
        ops.append(op if deps == op.deps else op.with_deps(deps))
    return replace(trace, ops=tuple(ops))
