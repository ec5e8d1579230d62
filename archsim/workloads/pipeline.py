"""Split a training (or inference) trace into pipeline stages; pure, no SimPy.

A stage is a contiguous run of forward ops (in trace order, which is topological) together with the
backward ops derived from them (a backward op ``X.bwd...``, and a recomputed ``X.recompute``, belongs
to the stage of forward op ``X``, in its backward block) and its share of the optimizer update. Cuts
are placed to balance the stages' time: :func:`split_stages` is given each op's time on one chip and
minimises the largest stage (the pipeline's bottleneck) over contiguous splits, by bisection on the
bottleneck and a greedy fill.

Per microbatch a stage sends the next one the activations that cross the cut (every tensor a later
stage's forward ops read that this or an earlier stage wrote) and receives their gradients back, of
the same size. Memory per chip: the stage's share of weights, gradients, master weights and
optimizer state (the trace's per-parameter bytes times its share of the parameters), plus the
activations it saves for backward times the microbatches in flight (GPipe: all ``M``; 1F1B: ``P - s``
at stage ``s``), plus the trace's transient bytes. Tensors a recomputing trace rebuilds are not saved:
they live only during one microbatch's backward, with the transient bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from archsim.errors import UsageError
from archsim.workloads.trace import Op, Phase, Role, TensorAccess, Trace
from archsim.workloads.training import RECOMPUTE

BACKWARD_MARK = ".bwd"


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: its ops (indices into the trace), update, traffic and memory."""

    index: int
    forward: tuple[int, ...]
    """Forward (and loss) ops, trace order."""
    backward: tuple[int, ...]
    """Backward ops (recomputed forward ops included), trace order."""
    update: Op | None
    """The optimizer update of this stage's parameters (the trace's update scaled to its share)."""
    parameter_fraction: float
    """Share of the trace's parameter-gradient bytes this stage owns."""
    send_bytes: int
    """Activation bytes sent to the next stage per microbatch (its gradients come back, same size)."""
    saved_bytes: int
    """Activation bytes saved for backward per microbatch."""


def _owner(name: str) -> str:
    """The forward op a backward or recomputed op was derived from (``layer1.conv.bwd_data`` -> ``layer1.conv``)."""
    return name.removesuffix(RECOMPUTE).split(BACKWARD_MARK, 1)[0]


def _cuts(weights: Sequence[float], parts: int) -> list[int]:
    """Start indices of ``parts`` contiguous groups of ``weights`` minimising the heaviest group."""
    n = len(weights)
    if parts >= n:
        return list(range(n))

    def fill(limit: float) -> list[int] | None:
        starts, total = [0], 0.0
        for i, w in enumerate(weights):
            if total + w > limit and total > 0.0:
                starts.append(i)
                total = 0.0
                if len(starts) > parts:
                    return None
            total += w
        return starts

    low, high = max(weights), sum(weights)
    for _ in range(60):
        mid = (low + high) / 2
        if fill(mid) is None:
            low = mid
        else:
            high = mid
    starts = fill(high)
    assert starts is not None
    # fewer groups than parts (tiny traces): split the largest groups further
    while len(starts) < parts:
        bounds = [*starts, n]
        widest = max(range(len(starts)), key=lambda k: bounds[k + 1] - bounds[k])
        starts.insert(widest + 1, (bounds[widest] + bounds[widest + 1] + 1) // 2)
    return starts


def split_stages(trace: Trace, stages: int, op_seconds: Sequence[float]) -> list[Stage]:
    """Split ``trace`` into ``stages`` pipeline stages balanced by ``op_seconds`` (one per op).

    More stages than forward ops is a UsageError (every stage holds at least one forward op).
    """
    forward = [i for i, op in enumerate(trace.ops) if op.phase is Phase.FORWARD]
    if stages > len(forward):
        ops = f"{len(forward)} forward op" + ("s" if len(forward) != 1 else "")
        problem = f"{stages} stages but the trace has {ops}: at most {len(forward)}"
        raise UsageError(trace.name, "--pipeline-stages", problem)
    position = {trace.ops[i].name: k for k, i in enumerate(forward)}
    weight = [op_seconds[i] for i in forward]
    owner_of: dict[int, int] = {}
    for i, op in enumerate(trace.ops):
        if op.phase.is_backward:
            k = position.get(_owner(op.name))
            if k is None:  # not named after a forward op: goes with its latest dependency
                k = max((owner_of.get(d, position.get(trace.ops[d].name, 0)) for d in op.deps), default=0)
            owner_of[i] = k
            weight[k] += op_seconds[i]
    starts = _cuts(weight, stages)
    stage_of_forward = [0] * len(forward)
    for s, start in enumerate(starts):
        for k in range(start, starts[s + 1] if s + 1 < len(starts) else len(forward)):
            stage_of_forward[k] = s
    stage_of_op = {i: stage_of_forward[k] for k, i in enumerate(forward)}
    stage_of_op.update({i: stage_of_forward[k] for i, k in owner_of.items()})
    return stages_of_ops(trace, stages, stage_of_op)


def stages_of_ops(trace: Trace, stages: int, stage_of_op: dict[int, int]) -> list[Stage]:
    """The ``stages`` stages of ``trace`` whose forward and backward ops (trace indices) ``stage_of_op`` assigns.

    One walk over the trace gathers what every stage needs (its ops, its parameter gradients, the
    activations it writes and its backward ops read, and those read by a later stage's forward ops).
    """
    ops = trace.ops
    forward: list[list[int]] = [[] for _ in range(stages)]
    backward: list[list[int]] = [[] for _ in range(stages)]
    grads: list[dict[str, int]] = [{} for _ in range(stages)]
    all_grads: dict[str, int] = {}
    written: list[dict[str, int]] = [{} for _ in range(stages)]
    """Activations each stage's forward ops write (bytes of the last write, in trace order)."""
    first_writer: dict[str, int] = {}
    """The earliest stage whose forward ops write each activation."""
    for i, op in enumerate(ops):
        stage = stage_of_op.get(i)
        if op.phase is Phase.FORWARD:
            stage = stage_of_op[i]
            forward[stage].append(i)
            for t in op.writes:
                if t.role is Role.ACTIVATION:
                    written[stage][t.name] = t.bytes
                    first_writer[t.name] = min(stage, first_writer.get(t.name, stage))
        elif op.phase.is_backward:
            backward[stage_of_op[i]].append(i)
        for t in op.writes:
            if t.role is Role.GRADIENT:
                all_grads[t.name] = t.bytes
                if stage is not None:
                    grads[stage][t.name] = t.bytes
    # an activation written at or before stage s and read by a later stage's forward op crosses s
    crossing: list[dict[str, int]] = [{} for _ in range(stages)]
    for i, op in enumerate(ops):
        if op.phase is Phase.FORWARD:
            stage = stage_of_op[i]
            for t in op.reads:
                for s in range(first_writer.get(t.name, stage), stage):
                    crossing[s][t.name] = t.bytes
    rebuilt = _rebuilt(trace)
    updates = [op for op in ops if op.phase is Phase.UPDATE]
    total = sum(all_grads.values())
    result = []
    for s in range(stages):
        fraction = sum(grads[s].values()) / total if all_grads else 1.0 / stages
        update = _scaled(updates[0], fraction, s) if updates else None
        read_by_backward = {t.name for i in backward[s] for t in ops[i].reads} - rebuilt
        saved = sum(b for name, b in written[s].items() if name in read_by_backward)
        send = sum(crossing[s].values()) if s < stages - 1 else 0
        result.append(Stage(s, tuple(forward[s]), tuple(backward[s]), update, fraction, send, saved))
    return result


def _scaled(op: Op, fraction: float, stage: int) -> Op:
    """The optimizer update restricted to a ``fraction`` of the parameters."""

    def part(t: TensorAccess) -> TensorAccess:
        return TensorAccess(t.name, round(t.bytes * fraction), t.role)

    return replace(
        op,
        name=f"{op.name}@stage{stage}",
        flops=round(op.flops * fraction),
        reads=tuple(part(t) for t in op.reads),
        writes=tuple(part(t) for t in op.writes),
        deps=(),
    )


def sub_trace(trace: Trace, indices: Sequence[int], name: str) -> Trace:
    """The ops ``indices`` of ``trace`` as a trace of their own; dependencies outside are dropped.

    A dependency on an op outside the subset is satisfied before the subset starts (an activation
    that arrived from the previous stage, a forward output saved for backward).
    """
    local = {i: k for k, i in enumerate(indices)}
    ops = tuple(replace(trace.ops[i], deps=tuple(local[d] for d in trace.ops[i].deps if d in local)) for i in indices)
    return replace(trace, name=name, ops=ops)


def stage_memory_bytes(
    trace: Trace, stage: Stage, inflight: int, transient_bytes: int = 0, parameters: int | None = None
) -> int:
    """Device memory of one stage's chip with ``inflight`` microbatches' activations saved.

    ``parameters``: :func:`parameter_bytes` of ``trace``, when the caller has it (it walks the trace).
    """
    held = parameter_bytes(trace) if parameters is None else parameters
    return round(held * stage.parameter_fraction) + stage.saved_bytes * inflight + transient_bytes


def parameter_bytes(trace: Trace) -> int:
    """The trace's memory less its saved activations: parameters, gradients and optimizer state."""
    return max(0, trace.memory_bytes - _activation_bytes(trace))


def _rebuilt(trace: Trace) -> set[str]:
    """Tensors recomputed for the backward pass (not saved from the forward pass)."""
    return {t.name for op in trace.ops if op.phase is Phase.RECOMPUTE for t in op.writes}


def _activation_bytes(trace: Trace) -> int:
    """Saved activations of the whole trace for one microbatch (its memory minus parameter state)."""
    read_by_backward = {t.name for op in trace.ops if op.phase.is_backward for t in op.reads} - _rebuilt(trace)
    sizes = {
        t.name: t.bytes
        for op in trace.ops
        if op.phase is Phase.FORWARD
        for t in op.writes
        if t.role is Role.ACTIVATION and t.name in read_by_backward
    }
    return sum(sizes.values())
