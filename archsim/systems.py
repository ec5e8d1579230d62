"""Runs on multi-chip systems: data parallel, pipeline parallel, and both, in the discrete-event engine.

:func:`run_system` is what :func:`archsim.simulate` calls when the target is a system
(``interconnect/**``, ``kind: system``). It builds the fabric (:mod:`archsim.models.interconnect`),
places pipelines and replicas on it (:mod:`archsim.models.placement`), prices each stage's ops with the
chip's cost model, and runs one step in the engine (:mod:`archsim.engine.parallel`).

**The symmetry shortcut.** All data-parallel replicas run identical compute, and all members of a
tier are joined identically, so the engine simulates one representative chip per pipeline stage and,
per tier, one representative member (with every chip in it that takes part and every link it owns).
Each collective runs tier by tier (hierarchical), so the cost of a step grows with the number of
tiers and the chips of one member, not with the number of chips: a 1,024-chip step simulates the
representative's ops plus a few thousand chunk transfers. The links that are actually shared -- a
member's switch ports among its chips, a ring link among the pipelines' stages, activation sends
against gradient all-reduces -- are still SimPy resources with discrete transfers queueing on them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from archsim import memory_fit
from archsim.api import (
    _choice,
    default_batch_trace,
    finished,
    prompt_or_sequence,
    rebuilder,
    simulate,
    stack_trace_options,
    trace_options,
)
from archsim.collective_run import comm_planner, gradient_call
from archsim.engine.collectives import DEFAULT_CHUNK_BYTES, resolve_algorithm
from archsim.engine.network import Lane
from archsim.engine.parallel import (
    CommLog,
    CommOptions,
    CommPlan,
    Schedule,
    StageWork,
    data_parallel_step,
    pipeline_step,
)
from archsim.engine.replay import OpTiming, replay
from archsim.errors import LimitError, UsageError
from archsim.limits import check_trace_ops
from archsim.models import cost_model_for
from archsim.models.base import CostModel, OpCost, framework_overhead_s
from archsim.models.interconnect import Fabric, build_fabric
from archsim.models.placement import Placement, place
from archsim.results.records import CollectiveRecord, LinkRecord, RunResult, build_system_result
from archsim.results.timeline import MIRRORED_CHIPS, Timeline, TimelineSpan
from archsim.spec.chip import ChipSpec, Efficiency
from archsim.spec.common import Fusion, Precision, StreamingMemory
from archsim.spec.library import Library
from archsim.spec.software import SoftwareSpec
from archsim.spec.system import SystemSpec
from archsim.stack import check_name, default_software, is_kernel, planned_software, stack_efficiency
from archsim.workloads import build_trace, microbatch_trace
from archsim.workloads.memory import resident_bytes
from archsim.workloads.options import TraceOptions
from archsim.workloads.pipeline import Stage, split_stages, stage_memory_bytes, sub_trace
from archsim.workloads.trace import CommOp, Mode, Op, Phase, Trace
from archsim.workloads.transforms import (
    DEFAULT_BUCKET_BYTES,
    compute_only,
    gradient_buckets,
    with_gradient_all_reduces,
)

MAX_NODES = 4096
"""Most copies of a system one run scales out to (the scale-out tier's rings take ``nodes`` steps)."""


@dataclass(frozen=True)
class ParallelOptions:
    """How a workload is spread over a system (the CLI's multi-chip options)."""

    nodes: int = 1
    pipeline_stages: int = 1
    microbatches: int | None = None
    """Microbatches per step (None: 4 per stage when pipelined, else 1)."""
    schedule: Schedule = Schedule.ONE_F_ONE_B
    collective: str | None = None
    """All-reduce algorithm (None or ``auto``: the system's default)."""
    bucket_bytes: int = DEFAULT_BUCKET_BYTES
    overlap: bool = True
    chunk_bytes: float = DEFAULT_CHUNK_BYTES
    trace: TraceOptions = field(default_factory=TraceOptions)
    """How each chip's trace is built (fusion, recomputation, the software's rewrites)."""
    streaming: StreamingMemory = StreamingMemory.NONE
    """What an IPU may keep in streaming memory (:mod:`archsim.memory_fit`)."""
    software: SoftwareSpec | None = None
    """The stack that runs each chip's graph (None: the chip's default)."""


@dataclass
class SystemRun:
    """A run's result and its timeline lanes."""

    result: RunResult
    timeline: Timeline = field(default_factory=Timeline)


def simulate_system(
    target: str,
    workload: str,
    mode: str | Mode = Mode.INFER,
    batch: int | None = None,
    precision: str | Precision | None = None,
    seq_len: int | None = None,
    library: Library | None = None,
    *,
    nodes: int | None = None,
    pipeline_stages: int = 1,
    microbatches: int | None = None,
    schedule: str | Schedule = Schedule.ONE_F_ONE_B,
    collective: str | None = None,
    bucket_bytes: int | None = None,
    overlap: bool = True,
    record: bool = False,
    search_path: Sequence[str] = (),
    fusion: str | Fusion | None = None,
    recompute: bool | None = None,
    streaming_memory: str | StreamingMemory = StreamingMemory.NONE,
    prompt_len: int | None = None,
    gen_len: int | None = None,
    software: str | None = None,
) -> SystemRun:
    """Simulate ``workload`` on a system (or a chip) and return the result and, if ``record``, its timeline.

    * ``batch``: per data-parallel replica (per chip without pipelining); None: the model's default,
      halved until it fits as on one chip (pipelined: the model's default, unchanged).
    * ``nodes``: copies of the system joined by its scale-out fabric (None: 1).
    * ``pipeline_stages``: chips per pipeline (must divide the system's first tier); the global
      batch is ``batch`` times the data-parallel width ``chips / pipeline_stages``.
    * ``microbatches``: per step and replica, each of ``batch / microbatches`` samples whatever the
      source (None: 4 per stage, fewer if the batch does not split; a source of fixed batch, a trace
      file or an inline product, is one microbatch: see :func:`archsim.workloads.microbatch_trace`).
    * ``schedule``: ``1f1b`` or ``gpipe``; ``collective``: ``auto``, ``ring``, ``tree``,
      ``hierarchical`` or ``torus``; ``bucket_bytes``: gradient bucket size (None: 25 MiB);
      ``overlap``: all-reduce buckets during the backward pass.
    * ``software``, ``fusion``, ``recompute``: the stack that runs the graph and what it does, and
      ``streaming_memory`` what an IPU may keep in streaming memory, as in :func:`archsim.simulate`.
    * ``prompt_len``, ``gen_len``: the ``prefill`` and ``decode`` modes' lengths, as in :func:`archsim.simulate`.

    A chip target with none of the multi-chip options runs as :func:`archsim.simulate` does.
    """
    library = library or Library(search_path)
    trace_seq_len = prompt_or_sequence(mode, seq_len, prompt_len)
    explicit = check_name(software)
    trace_options(fusion, recompute, gen_len)
    streaming = _choice(StreamingMemory, streaming_memory, "--streaming-memory")
    for flag, value in (("--nodes", nodes), ("--pipeline-stages", pipeline_stages), ("--microbatches", microbatches)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise UsageError("", flag, f"must be a positive integer, got {value!r}")
    if bucket_bytes is not None and (
        isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) or bucket_bytes < 1
    ):
        raise UsageError("", "--bucket-size", f"must be a positive number of bytes, got {bucket_bytes!r}")
    if nodes is not None and nodes > MAX_NODES:
        raise LimitError("", "--nodes", f"must be at most {MAX_NODES}")
    entry = library.find(["chip", "system"], target)
    if entry.kind == "chip":
        flag = "--nodes" if nodes is not None else "--pipeline-stages" if pipeline_stages != 1 else "--microbatches"
        if nodes is not None or pipeline_stages != 1 or microbatches is not None:
            raise UsageError(target, flag, "needs a multi-chip system as the target, not a chip")
        result = simulate(
            target,
            workload,
            mode,
            batch,
            precision,
            seq_len,
            library,
            fusion=fusion,
            recompute=recompute,
            streaming_memory=streaming,
            prompt_len=prompt_len,
            gen_len=gen_len,
            software=explicit,
        )
        spans = [(layer.name, layer.start_s, layer.end_s, layer.phase) for layer in result.layers]
        timeline = (
            Timeline([(f"chip 0 ({result.target})", [TimelineSpan(*sp) for sp in spans])]) if record else Timeline()
        )
        return SystemRun(result, timeline)
    system = library.system(target)
    source = entry.source
    chip = library.chip(system.chip)
    run_mode = _choice(Mode, mode, "--mode")
    if run_mode.is_generation and (pipeline_stages != 1 or microbatches is not None):
        flag = "--pipeline-stages" if pipeline_stages != 1 else "--microbatches"
        problem = "prefill and decode run data parallel only: pipelined generation is not modelled yet"
        raise UsageError(source, flag, problem)
    run_precision = chip.default_precision if precision is None else _choice(Precision, precision, "--precision")
    if run_precision not in chip.peak:
        supported = ", ".join(p.value for p in chip.precisions)
        raise UsageError(chip.name, "--precision", f"{run_precision.value} is not supported (supported: {supported})")
    stack = planned_software(library, chip, explicit, workload)
    options = ParallelOptions(
        nodes=nodes or 1,
        pipeline_stages=pipeline_stages,
        microbatches=microbatches,
        schedule=_choice(Schedule, schedule, "--schedule"),
        collective=collective,
        bucket_bytes=bucket_bytes or DEFAULT_BUCKET_BYTES,
        overlap=overlap,
        trace=stack_trace_options(stack, run_mode, run_precision, fusion, recompute, gen_len),
        streaming=streaming,
        software=stack if explicit is not None else None,
    )
    return run_system(system, source, workload, run_mode, batch, run_precision, trace_seq_len, library, options, record)


def fabric_for(system: SystemSpec, library: Library, nodes: int, source: str) -> Fabric:
    """The fabric of a validated system scaled to ``nodes``."""
    names = {level.link for level in system.levels.values()}
    if system.scale_out is not None:
        names.add(system.scale_out.link)
    return build_fabric(system, {name: library.link(name) for name in names}, nodes, source)


def run_system(
    system: SystemSpec,
    source: str,
    workload: str,
    mode: Mode,
    batch: int | None,
    precision: Precision,
    seq_len: int | None,
    library: Library,
    options: ParallelOptions,
    record: bool = False,
) -> SystemRun:
    """One step of ``workload`` on ``system``; ``batch`` is per data-parallel replica."""
    # a bad --pipeline-stages is refused before any trace is built
    place(fabric_for(system, library, options.nodes, source), options.pipeline_stages, source)
    trace, microbatches = system_trace(system, source, workload, mode, batch, precision, seq_len, library, options)
    rebuild = rebuilder(workload, library, mode, precision, seq_len, options.trace) if "model" in trace.meta else None
    return replay_system(system, source, trace, microbatches, library, options, record, rebuild=rebuild)


def system_trace(
    system: SystemSpec,
    source: str,
    workload: str,
    mode: Mode,
    batch: int | None,
    precision: Precision,
    seq_len: int | None,
    library: Library,
    options: ParallelOptions,
) -> tuple[Trace, int | None]:
    """The trace one chip replays and the microbatches per step (None: data parallel only)."""
    microbatches = options.microbatches
    if options.pipeline_stages == 1 and microbatches in (None, 1):
        chip = library.chip(system.chip)
        return _data_parallel_trace(workload, library, mode, batch, precision, seq_len, chip, options), None
    trace, count = microbatch_trace(
        workload, library, mode, batch, precision, seq_len, microbatches, 4 * options.pipeline_stages, options.trace
    )
    check_trace_ops(len(trace.ops), trace.name)
    return trace, count


def replay_system(
    system: SystemSpec,
    source: str,
    trace: Trace,
    microbatches: int | None,
    library: Library,
    options: ParallelOptions,
    record: bool = False,
    family_efficiency: Efficiency | None = None,
    rebuild: Callable[[int, bool], Trace] | None = None,
) -> SystemRun:
    """Replay a built trace (see :func:`system_trace`) on ``system``.

    ``family_efficiency`` replaces the family file's efficiency parameters, as in
    :func:`archsim.api.run_trace` (calibration tries values through it). ``rebuild(batch, recompute)``
    builds the workload at another (micro-)batch, so that a refusal names the largest that fits
    (None: the workload fixes its batch).
    """
    fabric = fabric_for(system, library, options.nodes, source)
    asked = resolve_algorithm(options.collective, fabric, source) if options.collective not in (None, "auto") else None
    named = options.software.collective_library if options.software is not None else None
    call = gradient_call(library, system, fabric, options.bucket_bytes, asked, named)
    plans = comm_planner(library, system, fabric, asked, named, source)
    if call is not None:  # the links as the library's protocol for a gradient bucket sees them
        fabric = call.fabric
    placement = place(fabric, options.pipeline_stages, source)
    chip = library.chip(system.chip)
    stack = options.software if options.software is not None else default_software(library, chip, is_kernel(trace))
    efficiency = stack_efficiency(library, chip, stack, trace.precision, family_efficiency)
    algorithm = resolve_algorithm(asked or (call.algorithm if call is not None else None), fabric, source)
    comm = CommOptions(
        algorithm,
        options.bucket_bytes,
        options.overlap,
        call.chunk_bytes if call is not None else options.chunk_bytes,
        call.fixed_s if call is not None else 0.0,
    )
    context = _Context(
        system, source, fabric, placement, chip, efficiency, comm, options, record, trace.mode, rebuild, stack, plans
    )
    run = context.data_parallel(trace) if microbatches is None else context.pipelined(trace, microbatches)
    result = finished(run.result, chip, library, trace)
    return SystemRun(result, run.timeline)


def _data_parallel_trace(
    workload: str,
    library: Library,
    mode: Mode,
    batch: int | None,
    precision: Precision,
    seq_len: int | None,
    chip: ChipSpec,
    options: ParallelOptions,
) -> Trace:
    """The per-chip trace (a Chakra ET's communication included); the default batch is halved until it fits."""
    trace = build_trace(workload, library, mode, batch, precision, seq_len, options.trace, communication=True)
    rebuild = rebuilder(workload, library, mode, precision, seq_len, options.trace)
    trace = default_batch_trace(chip, options.streaming, trace, batch, rebuild)
    check_trace_ops(len(trace.ops), trace.name)
    return trace


@dataclass
class _Context:
    system: SystemSpec
    source: str
    fabric: Fabric
    placement: Placement
    chip: ChipSpec
    efficiency: Efficiency
    comm: CommOptions
    options: ParallelOptions
    record: bool
    mode: Mode
    rebuild: Callable[[int, bool], Trace] | None
    software: SoftwareSpec
    plan_comm: Callable[[CommOp], CommPlan | None]
    """How the collective library runs one of the trace's own collectives (a Chakra ET's)."""

    @property
    def issue_s(self) -> float:
        assert self.efficiency.host_overhead is not None
        return self.efficiency.host_overhead

    @property
    def step_overhead_s(self) -> float:
        """The training loop's per-step cost (an inference loop runs the forward ops only)."""
        assert self.efficiency.step_overhead is not None
        return self.efficiency.step_overhead if self.mode is Mode.TRAIN else 0.0

    def model(self, trace: Trace, needed: int, share: float = 1.0) -> CostModel:
        """The chip's model for ops of ``trace`` on a chip that needs ``needed`` bytes.

        ``share`` is the chip's share of the parameters (a pipeline stage's): that share of the state
        only the update touches is left out of the footprint the ops work with (see
        :func:`~archsim.workloads.memory.resident_bytes`).
        """
        framework_s = framework_overhead_s(self.efficiency)
        footprint = resident_bytes(trace, needed, share)
        return cost_model_for(self.chip, self.efficiency, trace.precision, footprint, framework_s)

    # -- data parallel ---------------------------------------------------------------------------

    def data_parallel(self, trace: Trace) -> SystemRun:
        memory_fit.check_needs(self.chip, self.options.streaming, trace, memory_fit.trace_needs, self.rebuild)
        model = self.model(trace, trace.memory_bytes)
        compute = compute_only(trace)
        single = replay(compute, model, self.issue_s)
        single_end = max((t.end_s for t in single), default=0.0)
        step = self.with_communication(trace)
        costs = iter(t.cost for t in single)
        outcome = data_parallel_step(
            step.ops,
            [None if op.comm is not None else next(costs) for op in step.ops],
            model.separate_units,
            self.placement,
            self.comm,
            self.issue_s,
            self.record,
            self.own_plans(trace, step),
        )
        entries = [(op, t, 0) for op, t in zip(compute.ops, outcome.timings, strict=True)]
        result = self.result(
            trace,
            trace.batch,
            1,
            entries,
            outcome.end_s,
            trace.memory_bytes,
            single_end + self.step_overhead_s if compute.ops else "the trace has no compute op to run on one chip",
            outcome.comm,
            exposed_s=max(0.0, outcome.end_s - single_end),
            bubble=(0.0, 0.0),
        )
        timeline = self.timeline(
            [[(op.name, t.start_s, t.end_s, op.phase.value) for op, t, _ in entries]], outcome.comm
        )
        return SystemRun(result, timeline)

    def with_communication(self, trace: Trace) -> Trace:
        """The trace one replica runs, with its communication ops.

        A trace that brings its own (a Chakra ET) runs as it is; otherwise every replica all-reduces its
        gradient buckets over the data-parallel group (:func:`~archsim.workloads.transforms.with_gradient_all_reduces`).
        """
        if trace.has_comm or self.placement.data_parallel == 1:
            return trace
        return with_gradient_all_reduces(trace, self.comm.bucket_bytes, self.comm.overlap)

    def own_plans(self, trace: Trace, step: Trace) -> dict[int, CommPlan]:
        """The library's plan for each collective ``trace`` brings itself (inserted all-reduces take the bucket's)."""
        if step is not trace:
            return {}
        planned = {i: self.plan_comm(op.comm) for i, op in enumerate(step.ops) if op.comm is not None}
        return {i: plan for i, plan in planned.items() if plan is not None}

    # -- pipeline parallel -----------------------------------------------------------------------

    def pipelined(self, trace: Trace, microbatches: int) -> SystemRun:
        if trace.has_comm:  # a Chakra ET's communication runs on the data-parallel path only
            raise UsageError(trace.name, "--pipeline-stages", "a trace with communication ops runs data parallel only")
        train = trace.mode is Mode.TRAIN
        staged = self.stages_of(trace, microbatches)
        memory_fit.check_needs(
            self.chip,
            self.options.streaming,
            trace,
            lambda t: [need for _, need in (staged if t is trace else self.stages_of(t, microbatches))],
            self.rebuild,
            "--microbatches",
        )
        stages = [stage for stage, _ in staged]
        work: list[StageWork] = []
        blocks: list[tuple[list[OpTiming], list[OpTiming], OpCost | None]] = []
        memory = 0
        for stage, need in staged:
            memory = max(memory, need.bytes)
            model = self.model(trace, need.bytes, stage.parameter_fraction)
            forward = replay(sub_trace(trace, stage.forward, f"{trace.name}.s{stage.index}.fwd"), model, self.issue_s)
            backward = replay(sub_trace(trace, stage.backward, f"{trace.name}.s{stage.index}.bwd"), model, self.issue_s)
            update = model.cost(stage.update) if train and stage.update is not None else None
            work.append(_stage_work(trace, stage, forward, backward, update, self.comm.bucket_bytes))
            blocks.append((forward, backward, update))
        outcome = pipeline_step(
            work, self.placement, self.options.schedule, microbatches, train, self.comm, self.record
        )
        free = pipeline_step(
            work, self.placement, self.options.schedule, microbatches, train, self.comm, communicate=False
        )
        entries, chip_spans = _pipeline_entries(trace, stages, blocks, outcome.tasks)
        busy = [microbatches * (w.forward_s + w.backward_s) for w in work]
        flush = outcome.pipeline_end_s
        bubble_s = max(0.0, sum(flush - b for b in busy) / len(busy))  # no negative rounding residue
        result = self.result(
            trace,
            trace.batch * microbatches,
            microbatches,
            entries,
            outcome.end_s,
            memory,
            self.single_chip_step(trace, microbatches),
            outcome.comm,
            exposed_s=max(0.0, outcome.end_s - free.end_s),
            bubble=(bubble_s, bubble_s / flush if flush > 0 else 0.0),
        )
        return SystemRun(result, self.timeline(chip_spans, outcome.comm))

    def stages_of(self, trace: Trace, microbatches: int) -> list[tuple[Stage, memory_fit.Need]]:
        """The stages of ``trace`` (balanced by time on one chip) and what each stage's chip holds."""
        count = self.options.pipeline_stages
        balance = self.model(trace, trace.memory_bytes // count, 1 / count)
        staged = []
        for stage in split_stages(trace, count, [balance.cost(op).time_s for op in trace.ops]):
            all_inflight = self.options.schedule is Schedule.GPIPE or trace.mode is not Mode.TRAIN
            inflight = microbatches if all_inflight else min(microbatches, count - stage.index)
            needed = stage_memory_bytes(trace, stage, inflight)
            plural = "es" if inflight > 1 else ""
            what = f"stage {stage.index} with {inflight} micro-batch{plural} of {trace.batch} in flight"
            update_only = needed - resident_bytes(trace, needed, stage.parameter_fraction)
            staged.append((stage, memory_fit.Need(what, needed, update_only)))
        return staged

    def single_chip_step(self, trace: Trace, microbatches: int) -> float | str:
        """One chip running the whole per-replica batch as ``microbatches`` accumulated microbatches.

        The reference of ``scaling_efficiency``: the same micro-batch and options on one chip that holds
        the whole step in its memory (In-Processor Memory on IPUs, nothing in streaming memory). When
        one chip cannot, the reason why (a string) instead.
        """
        unheld = memory_fit.one_chip_cannot_hold(self.chip, trace)
        if unheld is not None:
            return unheld
        model = self.model(trace, trace.memory_bytes)
        compute = [i for i, op in enumerate(trace.ops) if op.phase is not Phase.UPDATE]
        timings = replay(sub_trace(trace, compute, trace.name), model, self.issue_s)
        once = max((t.end_s for t in timings), default=0.0)
        update = sum(model.cost(op).time_s for op in trace.ops if op.phase is Phase.UPDATE)
        return microbatches * once + update + self.step_overhead_s

    # -- results ---------------------------------------------------------------------------------

    def result(
        self,
        trace: Trace,
        batch: int,
        microbatches: int,
        entries: Sequence[tuple[Op, OpTiming, int]],
        ops_time_s: float,
        memory: int,
        single_step: float | str,
        comm: CommLog,
        exposed_s: float,
        bubble: tuple[float, float],
    ) -> RunResult:
        step_s = ops_time_s + self.step_overhead_s
        collectives = [CollectiveRecord(*c) for c in sorted(comm.collectives, key=lambda c: (c[3], c[1], c[0]))]
        collectives += [CollectiveRecord(*c) for c in sorted(comm.transfers, key=lambda c: (c[3], c[1], c[0]))]
        return build_system_result(
            target=self.system.name,
            system=self.system.name,
            nodes=self.options.nodes,
            chip=self.chip,
            trace=trace,
            batch=batch,
            entries=entries,
            ops_time_s=ops_time_s,
            step_overhead_s=self.step_overhead_s,
            num_chips=self.fabric.num_chips,
            data_parallel=self.placement.data_parallel,
            pipeline_stages=self.options.pipeline_stages,
            microbatches=microbatches,
            schedule=self.options.schedule.value if self.options.pipeline_stages > 1 else None,
            collective=self.comm.algorithm.value if self.placement.data_parallel > 1 else None,
            memory_bytes=memory,
            single_chip_step_s=single_step if isinstance(single_step, float) else None,
            scaling_note=single_step if isinstance(single_step, str) else None,
            comm_s=comm.busy_s(),
            exposed_comm_s=exposed_s,
            software=self.software.name,
            input_samples_per_s=self.software.input_pipeline,
            bubble_s=bubble[0],
            bubble_fraction=bubble[1],
            links=link_records(comm.lanes, step_s),
            collectives=collectives,
        )

    def timeline(self, per_stage: list[list[tuple[str, float, float, str]]], comm: CommLog) -> Timeline:
        """Compute lanes per chip (mirrored from the representatives) and one lane per simulated link."""
        if not self.record:
            return Timeline()
        stages = len(per_stage)
        spans = [[TimelineSpan(n, s, e, c) for n, s, e, c in lanes] for lanes in per_stage]
        chips = self.fabric.num_chips
        if chips <= MIRRORED_CHIPS:
            chip_lanes = [(f"chip {i} (stage {i % stages})", spans[i % stages]) for i in range(chips)]
        else:
            each = chips // stages
            chip_lanes = [(f"chip {s} (stage {s}, stands for {each} chips)", spans[s]) for s in range(stages)]
        link_lanes = [
            (
                f"{lane.name} [{lane.tier.link}]",
                [TimelineSpan(sp.label, sp.start_s, sp.end_s, "link") for sp in lane.spans],
            )
            for lane in comm.lanes
        ]
        return Timeline(chip_lanes, link_lanes)


def _stage_work(
    trace: Trace,
    stage: Stage,
    forward: list[OpTiming],
    backward: list[OpTiming],
    update: OpCost | None,
    bucket_bytes: int,
) -> StageWork:
    """A stage's block durations, and its gradient buckets with their times within the backward block."""
    backward_ops = [trace.ops[i] for i in stage.backward]
    buckets = tuple(
        (b.bytes, max(backward[w].end_s for w in b.writers)) for b in gradient_buckets(backward_ops, bucket_bytes)
    )
    return StageWork(
        forward_s=max((t.end_s for t in forward), default=0.0),
        backward_s=max((t.end_s for t in backward), default=0.0),
        update_s=update.time_s if update is not None else 0.0,
        send_bytes=stage.send_bytes,
        buckets=buckets,
    )


def _pipeline_entries(
    trace: Trace,
    stages: list[Stage],
    blocks: list[tuple[list[OpTiming], list[OpTiming], OpCost | None]],
    tasks: list[tuple[int, str, int, float, float]],
) -> tuple[list[tuple[Op, OpTiming, int]], list[list[tuple[str, float, float, str]]]]:
    """Layer entries (ops of microbatch 0 placed at their blocks' times) and block spans per stage."""
    first: dict[tuple[int, str], float] = {}
    spans: list[list[tuple[str, float, float, str]]] = [[] for _ in stages]
    updates: dict[int, tuple[float, float]] = {}
    for s, kind, mb, start, end in tasks:
        spans[s].append((f"{kind}{mb}" if kind != "U" else "update", start, end, kind))
        if kind == "U":
            updates[s] = (start, end)
        elif mb == 0:
            first[(s, kind)] = start
    entries: list[tuple[Op, OpTiming, int]] = []
    for stage, (forward, backward, update) in zip(stages, blocks, strict=True):
        s = stage.index
        for indices, timings, kind in ((stage.forward, forward, "F"), (stage.backward, backward, "B")):
            offset = first.get((s, kind), 0.0)
            for i, t in zip(indices, timings, strict=True):
                entries.append((trace.ops[i], OpTiming(offset + t.start_s, offset + t.end_s, t.cost), s))
        if update is not None and stage.update is not None and s in updates:
            start, end = updates[s]
            entries.append((stage.update, OpTiming(start, end, update), s))
    order = {id(op): k for k, op in enumerate(trace.ops)}
    entries.sort(key=lambda e: (order.get(id(e[0]), len(order)), e[2]))
    return entries, spans


def link_records(lanes: Sequence[Lane], step_s: float) -> list[LinkRecord]:
    """Per tier and direction: the representative links' mean traffic and utilization over the step."""
    groups: dict[tuple[str, str, str], list[Lane]] = defaultdict(list)
    for lane in lanes:
        direction = lane.name.rsplit(" ", 1)[-1].rstrip("0123456789")
        groups[(lane.tier.name, lane.tier.link, direction)].append(lane)
    records = []
    for (tier, link, direction), members in groups.items():
        count = len(members)
        utilizations = [lane.busy_s / step_s if step_s > 0 else 0.0 for lane in members]
        records.append(
            LinkRecord(
                tier=tier,
                link=link,
                direction=direction,
                links=count,
                bytes=sum(lane.bytes for lane in members) / count,
                busy_s=sum(lane.busy_s for lane in members) / count,
                utilization=min(sum(utilizations) / count, max(utilizations)),  # no rounding above max
                max_utilization=max(utilizations),
            )
        )
    return records
