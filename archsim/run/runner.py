"""The one function that runs a request: resolve the target, build the trace, replay it.

:func:`run` is every front door's: ``archsim run``, :func:`archsim.simulate`, sweeps, baselines and
the time-to-train runs build a :class:`~archsim.run.request.RunRequest` and call it. It is
:func:`build` (the target resolved once into a system -- a chip is a system of one chip --, the
software stack and its rewrites chosen, the trace built once, the default batch halved until the
step fits, once) then :func:`replay_built`, which hands the built trace to the one replay seam,
:func:`~archsim.run.replay.replay_on_target`. Validation builds each row once and replays it with
many efficiency values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from archsim import memory_fit
from archsim.errors import UsageError
from archsim.limits import check_trace_ops
from archsim.results.records import RunResult
from archsim.run import generation
from archsim.run.context import SystemOptions
from archsim.run.replay import replay_on_target
from archsim.run.request import RunRequest
from archsim.run.target import Target, fabric_for, resolve
from archsim.spec.chip import ChipSpec
from archsim.spec.common import StreamingMemory
from archsim.spec.efficiency import Efficiency
from archsim.spec.library import Library
from archsim.spec.software import SoftwareSpec
from archsim.stack import planned_software, stack_options
from archsim.workloads import build_trace, microbatch_trace, model_decoder
from archsim.workloads.memory import trace_recompute, update_only_bytes
from archsim.workloads.options import Recompute
from archsim.workloads.padding import check_left_out
from archsim.workloads.rebuild import Rebuilder
from archsim.workloads.trace import Mode, Trace

if TYPE_CHECKING:  # a plain run attaches no observer: the module is loaded where one is used
    from archsim.run.observers import RunObserver


@dataclass(frozen=True)
class BuiltRun:
    """A request with its target resolved and its trace built, ready to replay (any number of times)."""

    request: RunRequest
    target: Target
    trace: Trace
    """The trace one chip replays (one microbatch's when pipelined or accumulated)."""
    microbatches: int | None
    """Microbatches per step on a system (None: one batch per step)."""
    options: SystemOptions
    """The layout with the trace options, streaming memory and named stack filled in."""
    rebuild: Rebuilder | None
    """The workload at another batch (None: its batch is fixed), to name the largest that fits."""

    @property
    def software(self) -> SoftwareSpec | None:
        """The stack the request names (None: the chip's default for the trace)."""
        return self.options.software


def run(request: RunRequest, library: Library, *, observers: Sequence[RunObserver] = ()) -> RunResult:
    """Run ``request``: its result, watched by ``observers`` (:mod:`archsim.run.observers`).

    ``generate`` runs a prefill and decode steps (:mod:`archsim.run.generation`); the generation modes
    report the largest batch that fits.
    """
    if request.mode is Mode.GENERATE:
        return run_generate(request, library, observers=observers)
    built = build(request, library)
    result = replay_built(built, library, observers=observers)
    if not request.mode.is_generation:
        return result
    return replace(result, max_batch=largest_batch(built))


def run_generate(request: RunRequest, library: Library, *, observers: Sequence[RunObserver] = ()) -> RunResult:
    """A ``generate`` request: a prefill run and a decode run, combined (:mod:`archsim.run.generation`).

    With no batch asked, each run's default batch is halved until it fits and both take the smaller.
    The observers see the prefill, then one decode step after it (its spans named ``decode.*``).
    """
    prefill_request = replace(request, mode=Mode.PREFILL, gen_len=None)
    decode_request = replace(request, mode=Mode.DECODE)
    prefill, decode = build(prefill_request, library), build(decode_request, library)
    if request.batch is None and prefill.trace.batch != decode.trace.batch:
        batch = min(prefill.trace.batch, decode.trace.batch)
        if prefill.trace.batch != batch:
            prefill = build(replace(prefill_request, batch=batch), library)
        else:
            decode = build(replace(decode_request, batch=batch), library)
    first = replay_built(prefill, library, observers=observers)
    from archsim.run.observers import Shifted

    after = [Shifted(observer, first.step_time_s, "decode.") for observer in observers]
    step = replay_built(decode, library, observers=after)
    gen_len = step.gen_len
    assert gen_len is not None, "a decode run reports its generation length"
    result = generation.combined(first, step, gen_len, decode.target.chip)
    return replace(result, max_batch=largest_batch(decode, prefill))


def largest_batch(*runs: BuiltRun) -> int | None:
    """The largest batch at which every run's step fits (:func:`archsim.run.generation.max_batch`)."""
    first = runs[0]
    return generation.max_batch(first.target.chip, first.options.streaming, [run.rebuild for run in runs])


def build(request: RunRequest, library: Library) -> BuiltRun:
    """Resolve ``request``'s target and build its trace (refusing what the target cannot run)."""
    target = resolve(request.target, library)
    layout, chip, system = request.layout, target.chip, target.linked
    if system is None and layout.spreads:
        raise UsageError(request.target, layout.spreading_flag(), "needs a multi-chip system as the target, not a chip")
    pipelined = layout.pipeline_stages != 1 or layout.microbatches is not None
    if system is not None and request.mode.is_generation and pipelined:  # tensor parallel it may
        flag = "--pipeline-stages" if layout.pipeline_stages != 1 else "--microbatches"
        problem = "prefill and decode run tensor and data parallel only: pipelined generation is not modelled yet"
        raise UsageError(target.source, flag, problem)
    check_zero(request, target)
    precision = chip.run_precision(request.precision)
    if precision not in chip.peak:
        supported = ", ".join(p.value for p in chip.precisions)
        raise UsageError(chip.name, "--precision", f"{precision.value} is not supported (supported: {supported})")
    stack = planned_software(library, chip, request.software, request.workload)
    trace_options = stack_options(
        stack, request.mode, precision, request.fusion, request.recompute, request.gen_len, request.padding
    )
    trace_options = replace(
        trace_options,
        tensor_parallel=layout.tensor_parallel,
        sequence_parallel=layout.sequence_parallel,
        expert_parallel=layout.expert_parallel,
        bn_group=layout.bn_group,
    )
    named = stack if request.software is not None else None
    options = SystemOptions.of(layout, trace_options, request.streaming, named)
    if system is not None:  # a bad --pipeline-stages is refused before any trace is built
        from archsim.models.placement import place  # the multi-chip modules: not loaded for one chip

        fabric = fabric_for(system, library, options.nodes, target.source)
        model = model_decoder(request.workload, library) if layout.tensor_parallel > 1 else None
        placement = place(fabric, layout.pipeline_stages, target.source, layout.tensor_parallel, model)
        check_tiles(layout.expert_parallel, placement.data_parallel, "--expert-parallel", target.source)
        check_bn_group(layout.bn_group, placement.data_parallel, layout.pipeline_stages, target.source)
    seq_len = request.trace_seq_len
    rebuild = Rebuilder(request.workload, library, request.mode, precision, seq_len, trace_options)
    microbatches: int | None = None
    if system is not None and (layout.pipeline_stages != 1 or layout.microbatches not in (None, 1)):
        trace, microbatches = microbatch_trace(
            request.workload,
            library,
            request.mode,
            request.batch,
            precision,
            seq_len,
            layout.microbatches,
            4 * layout.pipeline_stages,
            trace_options,
        )
    else:
        # a Chakra ET's communication nodes become comm ops on a system with links (a chip refuses them)
        communication = system is not None
        trace = build_trace(
            request.workload,
            library,
            request.mode,
            request.batch,
            precision,
            seq_len,
            trace_options,
            communication=communication,
        )
        trace = default_batch_trace(chip, request.streaming, trace, request.batch, rebuild)
    check_trace_ops(len(trace.ops), trace.name)
    check_left_out(request.padding, trace, request.workload)
    return BuiltRun(request, target, trace, microbatches, options, rebuild if "model" in trace.meta else None)


def check_zero(request: RunRequest, target: Target) -> None:
    """Refuse (one line) a ZeRO stage where archsim does not model it: ZeRO shards data-parallel training."""
    layout = request.layout
    if layout.zero == 0:
        return
    if target.linked is None:
        problem = "ZeRO shards training state over data-parallel chips: needs a multi-chip system, not a chip"
        raise UsageError(request.target, "--zero", problem)
    if layout.expert_parallel != 1:
        problem = "ZeRO with expert parallelism (expert state sharded over DP / E) is not modelled yet: use --zero 0"
        raise UsageError(request.target, "--zero", problem)
    if request.mode is not Mode.TRAIN:
        raise UsageError(request.target, "--zero", "ZeRO shards gradients and optimizer state: --mode train only")
    if layout.pipeline_stages != 1 or layout.microbatches not in (None, 1):
        flag = "--pipeline-stages" if layout.pipeline_stages != 1 else "--microbatches"
        problem = f"ZeRO is modelled for data-parallel steps of one micro-batch: leave out {flag} or use --zero 0"
        raise UsageError(request.target, "--zero", problem)


def check_bn_group(bn_group: int, data_parallel: int, pipeline_stages: int, source: str) -> None:
    """Refuse (one line) a batch-norm group that does not tile the data-parallel replicas of one-stage runs."""
    if bn_group == 1:
        return
    if pipeline_stages != 1:
        problem = "shares batch-norm statistics across data-parallel chips: not modelled with --pipeline-stages"
        raise UsageError(source, "--bn-group", problem)
    check_tiles(bn_group, data_parallel, "--bn-group", source)


def check_tiles(group: int, data_parallel: int, flag: str, source: str) -> None:
    """Refuse (one line) a group of ``flag``'s chips that does not tile the data-parallel replicas."""
    if data_parallel % group:
        fits = ", ".join(str(x) for x in range(1, data_parallel + 1) if data_parallel % x == 0)
        problem = f"{group} chips must divide the {data_parallel} data-parallel replicas; {fits} would"
        raise UsageError(source, flag, problem)


def replay_built(
    built: BuiltRun,
    library: Library,
    *,
    observers: Sequence[RunObserver] = (),
    family_efficiency: Efficiency | None = None,
    software: SoftwareSpec | None = None,
) -> RunResult:
    """Replay a built run on its target, watched by ``observers``.

    ``family_efficiency`` and ``software`` replace the family's efficiency parameters and the stack
    (calibration tries values through them).
    """
    stack = software if software is not None else built.software
    return replay_on_target(
        built.target,
        built.trace,
        library,
        replace(built.options, software=stack),
        microbatches=built.microbatches,
        observers=observers,
        family_efficiency=family_efficiency,
        rebuild=built.rebuild,
    )


def default_batch_trace(
    chip: ChipSpec,
    streaming: StreamingMemory,
    trace: Trace,
    batch: int | None,
    rebuild: Callable[[int, Recompute], Trace],
) -> Trace:
    """``trace``, or with no batch asked (``batch`` None) the model's default halved until the step fits."""
    if batch is not None or "model" not in trace.meta:
        return trace
    recompute = trace_recompute(trace)
    while trace.batch > 1 and not memory_fit.fits(chip, streaming, trace.memory_bytes, update_only_bytes(trace.ops)):
        trace = rebuild(trace.batch // 2, recompute)
    return trace
