"""The step archsim simulates, as one Chakra execution trace per rank, with archsim's calibrated times.

:func:`export_chakra` runs a request through the one run path (:func:`archsim.run.runner.build` and
:func:`~archsim.run.runner.replay_built`, as ``archsim run`` does) and writes what each rank of the
step runs, so that tools that replay Chakra ETs (ASTRA-sim and the like) can take archsim's compute
times to other networks and scales. ``archsim export chakra`` is the command line's door.

**Ranks.** A system of ``N`` chips runs ``D = N / (S T)`` replicas of a pipeline of ``S`` stages of
``T`` tensor-parallel chips each; rank ``r = (p * S + s) * T + t`` is tensor-parallel rank ``t`` of
stage ``s`` of pipeline ``p`` (archsim's placement: chips numbered along the tiers, innermost first, a
tensor-parallel group on ``T`` consecutive chips, then the stages, :mod:`archsim.models.placement`).
The files are ``DIR/NAME.RANK.et`` (Chakra's per-rank naming) for the representative ranks ``s * T``
-- tensor-parallel rank 0 of every stage of pipeline 0; the other ranks run the same nodes on their
own shard and peers -- or, with ``all_ranks``, for every rank. A one-chip target is rank 0 alone.

**What a rank runs.**

* Not pipelined (``S = 1``, one microbatch): the trace's ops in order, with the communication ops the
  run has -- the gradient all-reduces of a data-parallel training step, bucketed as the run buckets
  them (:func:`~archsim.workloads.transforms.with_gradient_all_reduces`), or those of a Chakra ET --;
  with ``S`` or ``M`` set: the stage's blocks in the schedule's order
  (:func:`archsim.engine.parallel.stage_order`, 1F1B or GPipe), each after the block before it. A
  forward block of microbatch ``m`` receives its activations from rank ``r - T`` (when ``s > 0``),
  runs the stage's forward ops and sends its activations to rank ``r + T`` (when ``s < S - 1``); a
  backward block receives gradients from ``r + T``, runs the backward ops and sends to ``r - T``
  (``comm_tag`` ``2m`` forward, ``2m + 1`` backward). Training then all-reduces the stage's gradient
  buckets over its data-parallel group (the ranks of its stage and tensor-parallel rank in every
  pipeline) and runs the stage's update. A tensor-parallel step's collectives (in the trace) name
  their group ``tensor-parallel.stageS.pipelineP`` with its ``T`` ranks.
* Compute nodes carry ``duration_micros``: the op's time in the simulated step (the same for every
  microbatch), rounded to the microsecond as Chakra's schema counts it, exactly in
  ``archsim.duration_s``. Communication nodes carry their bytes and group (``pg_name``
  ``data-parallel.stageS`` or ``all``, ``archsim.group_ranks`` the ranks, for the groups whose ranks
  archsim places; sends and receives their ``comm_src``/``comm_dst``); their time is the consuming
  tool's to simulate (archsim's own is in ``archsim run``'s ``collectives``).

Every file is built before any is written, and a failed write removes those already written.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from archsim.engine.parallel import Schedule, stage_order
from archsim.errors import UsageError
from archsim.outfile import write_file
from archsim.results.records import RunResult
from archsim.spec.library import Library
from archsim.workloads.chakra_format import chakra_bytes
from archsim.workloads.microbatches import BlockKind
from archsim.workloads.pipeline import Stage, stage_memory_bytes, stages_of_ops
from archsim.workloads.trace import CommGroup, CommKind, Mode, Op, Phase, Trace
from archsim.workloads.transforms import comm_op, gradient_buckets

MAX_RANK_FILES = 4096
"""Most files one export writes (``all_ranks`` on a larger system is refused)."""


@dataclass(frozen=True)
class RankTrace:
    """What one rank runs in the step: its ops (communication included) and each op's time."""

    rank: int
    stage: int
    trace: Trace
    durations_s: tuple[float, ...]
    """Per op: its time in the simulated step (0 for communication ops)."""
    comm: dict[int, dict[str, object]]
    """Per communication op (by index): its Chakra attributes (group, peers)."""

    def et_bytes(self) -> bytes:
        """The Chakra ET of the rank."""
        return chakra_bytes(self.trace, durations_s=self.durations_s, comm=self.comm)


@dataclass(frozen=True)
class _Step:
    """The shape of the simulated step: ranks, stages, replicas, microbatches, schedule."""

    chips: int
    stages: int
    replicas: int
    microbatches: int
    schedule: Schedule
    train: bool
    tensor_parallel: int = 1

    def rank(self, pipeline: int, stage: int, shard: int) -> int:
        """The rank of tensor-parallel rank ``shard`` of stage ``stage`` of pipeline ``pipeline``."""
        return (pipeline * self.stages + stage) * self.tensor_parallel + shard

    def group(self, group: CommGroup, rank: int) -> dict[str, object]:
        """The Chakra attributes naming ``group`` as rank ``rank`` sees it."""
        t = rank % self.tensor_parallel
        stage = rank // self.tensor_parallel % self.stages
        pipeline = rank // (self.tensor_parallel * self.stages)
        if group is CommGroup.DATA_PARALLEL:
            ranks = [self.rank(p, stage, t) for p in range(self.replicas)]
            name = f"data-parallel.stage{stage}" + (f".shard{t}" if self.tensor_parallel > 1 else "")
            return {"pg_name": name, "archsim.group_ranks": ranks}
        if group is CommGroup.TENSOR_PARALLEL:
            ranks = [self.rank(pipeline, stage, u) for u in range(self.tensor_parallel)]
            return {"pg_name": f"tensor-parallel.stage{stage}.pipeline{pipeline}", "archsim.group_ranks": ranks}
        if group is CommGroup.ALL:
            return {"pg_name": "all", "archsim.group_ranks": list(range(self.chips))}
        return {"pg_name": group.value}


def export_chakra(
    target: str,
    workload: str,
    out: str | os.PathLike[str],
    library: Library | None = None,
    *,
    all_ranks: bool = False,
    **run_options: Any,
) -> list[Path]:
    """Simulate ``workload`` on ``target`` and write each rank's Chakra ET into the folder ``out``.

    ``run_options`` are :func:`archsim.simulate`'s (``mode``, ``batch``, ``pipeline_stages``, ...).
    Returns the files written, by rank (see the module docstring).
    """
    from archsim.run.request import RunRequest

    request = RunRequest.of(target, workload, **run_options)
    return write_ranks(rank_traces(request, library or Library(), all_ranks=all_ranks), out)


def rank_traces(request: Any, library: Library, *, all_ranks: bool = False) -> list[RankTrace]:
    """What each exported rank of ``request``'s step runs (a :class:`~archsim.run.request.RunRequest`)."""
    from archsim.run.runner import build, replay_built

    if request.mode is Mode.GENERATE:
        raise UsageError(request.workload, "--mode", "generate is a prefill then decode steps: export one of them")
    built = build(request, library)
    result = replay_built(built, library)
    options = built.options
    step = _Step(
        chips=result.num_chips,
        stages=result.pipeline_stages,
        replicas=result.data_parallel,
        microbatches=result.microbatches,
        schedule=options.schedule,
        train=built.trace.mode is Mode.TRAIN,
        tensor_parallel=request.layout.tensor_parallel,
    )
    if options.interleave > 1:
        raise UsageError(request.target, "--interleave", "an interleaved pipeline's ranks are not exported yet")
    if built.microbatches is not None and options.trace.expert_parallel > 1:
        problem = "a pipelined or accumulated expert-parallel step's ranks are not exported yet"
        raise UsageError(request.target, "--expert-parallel", problem)
    count = step.chips if all_ranks else step.stages
    ranks = list(range(count)) if all_ranks else [step.rank(0, s, 0) for s in range(step.stages)]
    if count > MAX_RANK_FILES:
        raise UsageError(request.target, "--all-ranks", f"{count} files: at most {MAX_RANK_FILES}")
    trace = built.trace
    if built.microbatches is None:
        from archsim.run.data_parallel import replica_communication  # the run's own, as it communicates
        from archsim.spec.software import mechanism

        ep = options.trace.expert_parallel
        overlap = options.overlap and mechanism(built.target.chip.family).overlaps_collectives  # as system_step
        trace = replica_communication(trace, step.replicas, options.zero, ep, options.bucket_bytes, overlap)
        durations = _durations(trace, result.layers)
        return [_flat(rank, trace, durations, step) for rank in ranks]
    stages, op_s, update_s = _stages(built.trace, result, step.stages)
    staged = []
    for rank in ranks:
        s = rank // step.tensor_parallel % step.stages
        staged.append(_staged(rank, built.trace, stages, s, op_s, update_s[s], step, options.bucket_bytes))
    return staged


def _durations(trace: Trace, layers: Sequence[Any]) -> list[float]:
    """Each op's time: the layers are the compute ops' records, in trace order."""
    records = iter(layers)
    durations = []
    for op in trace.ops:
        if op.comm is not None and not op.comm.in_stream:  # off the stream: the consumer's to time
            durations.append(0.0)
            continue
        layer = next(records)
        assert layer.name == op.name, f"{layer.name} recorded for {op.name}"
        durations.append(layer.end_s - layer.start_s)
    return durations


def _flat(rank: int, trace: Trace, durations: list[float], step: _Step) -> RankTrace:
    """A rank of an unpipelined step: the trace as it is, its communication ops' groups named."""
    comm = {i: step.group(op.comm.group, rank) for i, op in enumerate(trace.ops) if op.comm is not None}
    return RankTrace(rank, 0, _named(trace, rank, 0, step, trace.ops, trace.memory_bytes), tuple(durations), comm)


def _named(trace: Trace, rank: int, stage: int, step: _Step, ops: Sequence[Op], memory_bytes: int) -> Trace:
    """``trace`` as rank ``rank``'s file: its ops, memory and where it sits in the step."""
    where = {
        "rank": str(rank),
        "stage": str(stage),
        "ranks": str(step.chips),
        "pipeline_stages": str(step.stages),
        "microbatches": str(step.microbatches),
    }
    return replace(trace, ops=tuple(ops), memory_bytes=memory_bytes, meta={**trace.meta, **where})


def _stages(trace: Trace, result: RunResult, count: int) -> tuple[list[Stage], dict[int, float], list[float]]:
    """The run's stages (from the stage each op ran on), each op's time and each stage's update time."""
    recorded = [i for i, op in enumerate(trace.ops) if op.comm is None or op.comm.in_stream]  # a layer each
    computed = [i for i in recorded if trace.ops[i].phase is not Phase.UPDATE]
    layers = [layer for layer in result.layers if layer.phase != Phase.UPDATE.value]
    stage_of: dict[int, int] = {}
    op_s: dict[int, float] = {}
    for i, layer in zip(computed, layers, strict=True):
        assert layer.name == trace.ops[i].name, f"{layer.name} recorded for {trace.ops[i].name}"
        stage_of[i], op_s[i] = layer.stage, layer.end_s - layer.start_s
    update_s = [0.0] * count
    for layer in result.layers:
        if layer.phase == Phase.UPDATE.value:
            update_s[layer.stage] = layer.end_s - layer.start_s
    return stages_of_ops(trace, count, stage_of), op_s, update_s


def _staged(
    rank: int,
    trace: Trace,
    stages: list[Stage],
    s: int,
    op_s: dict[int, float],
    update_s: float,
    step: _Step,
    bucket_bytes: int,
) -> RankTrace:
    """Rank ``rank`` (stage ``s``) of a pipelined or accumulated step (see the module docstring)."""
    stage, last = stages[s], step.stages - 1
    ops: list[Op] = []
    durations: list[float] = []
    comm: dict[int, dict[str, object]] = {}
    forward_at: dict[int, dict[int, int]] = {}  # microbatch -> trace index -> node
    before: tuple[int, ...] = ()  # the previous block's last ops

    def transfer(name: str, kind: CommKind, nbytes: int, deps: tuple[int, ...], peer: int, tag: int) -> int:
        ops.append(comm_op(name, kind, nbytes, deps, CommGroup.PEER))
        durations.append(0.0)
        src, dst = (rank, peer) if kind is CommKind.SEND else (peer, rank)
        comm[len(ops) - 1] = {"comm_src": src, "comm_dst": dst, "comm_tag": tag}
        return len(ops) - 1

    backward_at: dict[int, int] = {}
    for kind, m in stage_order(step.schedule, s, step.stages, step.microbatches, step.train):
        forward = kind is BlockKind.FORWARD
        tag = 2 * m + (0 if forward else 1)
        entry = before
        if (forward and s > 0) or (not forward and s < last):
            nbytes = stages[s - 1].send_bytes if forward else stage.send_bytes
            what = "activations" if forward else "gradients"
            peer = rank + (-1 if forward else 1) * step.tensor_parallel
            entry = (transfer(f"recv {what} mb{m}", CommKind.RECV, nbytes, before, peer, tag),)
        local: dict[int, int] = {}
        for i in stage.forward if forward else stage.backward:
            deps = {local[d] for d in trace.ops[i].deps if d in local}
            if not forward:
                deps |= {forward_at[m][d] for d in trace.ops[i].deps if d in forward_at[m]}
            local[i] = len(ops)
            ops.append(trace.ops[i].with_deps(tuple(sorted(deps | set(entry)))))
            durations.append(op_s.get(i, 0.0))
            if ops[-1].comm is not None:  # a collective the trace brings (tensor parallelism's)
                comm[local[i]] = step.group(ops[-1].comm.group, rank)
            if not forward:
                backward_at[i] = local[i]
        used = {d for i in local for d in ops[local[i]].deps}
        before = tuple(sorted(node for node in local.values() if node not in used))
        if forward:
            forward_at[m] = local
        if (forward and s < last) or (not forward and s > 0):
            nbytes = stage.send_bytes if forward else stages[s - 1].send_bytes
            what = "activations" if forward else "gradients"
            peer = rank + (1 if forward else -1) * step.tensor_parallel
            transfer(f"send {what} mb{m}", CommKind.SEND, nbytes, before, peer, tag)
    reduces: list[int] = []
    if step.train and step.replicas > 1:
        backward_ops = [trace.ops[i] for i in stage.backward]
        for k, bucket in enumerate(gradient_buckets(backward_ops, bucket_bytes)):
            writers = tuple(sorted(backward_at[stage.backward[w]] for w in bucket.writers))
            group, phase = CommGroup.DATA_PARALLEL, Phase.BACKWARD_WEIGHT
            ops.append(comm_op(f"all-reduce b{k}", CommKind.ALL_REDUCE, bucket.bytes, writers, group, phase))
            durations.append(0.0)
            comm[len(ops) - 1] = step.group(CommGroup.DATA_PARALLEL, rank)
            reduces.append(len(ops) - 1)
    if step.train and stage.update is not None:
        ops.append(stage.update.with_deps(tuple(reduces) or before))
        durations.append(update_s)
    inflight = step.microbatches if step.schedule is Schedule.GPIPE or not step.train else None
    held = min(step.microbatches, step.stages - s) if inflight is None else inflight
    memory = stage_memory_bytes(trace, stage, held)
    return RankTrace(rank, s, _named(trace, rank, s, step, ops, memory), tuple(durations), comm)


def write_ranks(ranks: Sequence[RankTrace], out: str | os.PathLike[str]) -> list[Path]:
    """Write each rank's ET as ``out/NAME.RANK.et``; all or none (see the module docstring)."""
    contents = [(rank, rank.et_bytes()) for rank in ranks]
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise UsageError(str(folder), "--out", "is not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(str(folder), "--out", f"cannot create: {err.strerror or err}") from None
    written: list[Path] = []
    try:
        for rank, data in contents:
            path = folder / f"{rank.trace.name}.{rank.rank}.et"
            write_file(path, data)
            written.append(path)
    except UsageError:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    return written
