"""The Python API: simulate a workload on a target and get the same records the CLI prints.

>>> from archsim import simulate
>>> result = simulate("v100", "resnet50", mode="train", batch=256)
>>> round(result.throughput)  # doctest: +SKIP
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from archsim import memory_fit
from archsim.engine import replay
from archsim.errors import LimitError, UsageError
from archsim.limits import MAX_ARGUMENT, check_trace_ops
from archsim.models import cost_model_for
from archsim.models.base import framework_overhead_s
from archsim.results.power import priced
from archsim.results.records import RunResult, build_result
from archsim.spec.chip import ChipSpec, Efficiency
from archsim.spec.common import Fusion, Precision, StreamingMemory
from archsim.spec.library import Library
from archsim.spec.software import Rewrite, SoftwareSpec
from archsim.stack import check_name, default_software, is_kernel, planned_software, stack_efficiency, stack_options
from archsim.uncertainty import with_error_bars
from archsim.workloads import build_trace
from archsim.workloads.memory import resident_bytes, update_only_bytes
from archsim.workloads.options import TraceOptions
from archsim.workloads.trace import Mode, Trace


@dataclass(frozen=True)
class Target:
    """A resolved target: the chip it runs on and how many of them."""

    name: str
    chip: ChipSpec
    num_chips: int = 1


E = TypeVar("E", bound=enum.Enum)


def _choice(cls: type[E], value: object, flag: str) -> E:
    if isinstance(value, cls):
        return value
    try:
        return cls(value)
    except ValueError:
        choices = ", ".join(m.value for m in cls)
        raise UsageError("", flag, f"{value!r} is not one of {choices}") from None


def resolve_target(name: str, library: Library) -> Target:
    """A chip name, alias or YAML path -> Target."""
    chip = library.chip(name)
    return Target(name=chip.name, chip=chip)


def preferred_capacity_bytes(chip: ChipSpec) -> int:
    """Memory a step's working set must fit: the in-processor memory on IPUs, the main memory elsewhere.

    See :func:`archsim.memory_fit.capacity_bytes`; an IPU keeps data in streaming memory only when a
    run asks for it (``streaming_memory``).
    """
    return memory_fit.capacity_bytes(chip)


def simulate(
    target: str,
    workload: str,
    mode: str | Mode = Mode.INFER,
    batch: int | None = None,
    precision: str | Precision | None = None,
    seq_len: int | None = None,
    library: Library | None = None,
    search_path: Sequence[str] = (),
    *,
    nodes: int | None = None,
    pipeline_stages: int = 1,
    microbatches: int | None = None,
    schedule: str = "1f1b",
    collective: str | None = None,
    bucket_bytes: int | None = None,
    overlap: bool = True,
    fusion: str | Fusion | None = None,
    recompute: bool | None = None,
    streaming_memory: str | StreamingMemory = StreamingMemory.NONE,
    prompt_len: int | None = None,
    gen_len: int | None = None,
    software: str | None = None,
) -> RunResult:
    """Replay ``workload`` on ``target`` and return the run's records.

    ``target`` is a chip name, alias or YAML path; ``workload`` a model name, a trace file or
    ``gemm:MxNxK``. ``batch`` is per chip (None: the model's default for the mode, halved until the
    step fits the chip's memory -- the in-processor memory on IPUs); ``precision``
    None means the chip's default (fp16, or bf16 on TPUs). Bad arguments raise
    :class:`~archsim.errors.ArchsimError` subclasses naming the argument. ``software`` names the
    stack that runs the graph (``software/``; None: the chip's default, see :mod:`archsim.stack`);
    ``fusion`` (``none`` or ``norm-act``) and ``recompute`` override what that stack does (None: as
    it does; :class:`~archsim.workloads.options.TraceOptions`). ``streaming_memory`` (``none``,
    ``optimizer-state`` or ``all``) says what an IPU may keep in streaming memory instead of
    In-Processor Memory (:mod:`archsim.memory_fit`; other chips ignore it); a step that does not fit
    is refused with :class:`~archsim.errors.CapacityError` naming the largest batch that fits.
    ``mode`` ``prefill`` and ``decode`` (decoder language models) take ``prompt_len`` instead of
    ``seq_len`` and, for decode, ``gen_len`` (:mod:`archsim.workloads.decoder`; None: 128 each).

    ``target`` may also be a multi-chip system (``interconnect/systems/``); the keyword arguments
    then spread the workload over it (see :func:`archsim.systems.simulate_system`, where they are
    documented): ``batch`` is per data-parallel replica and ``nodes`` scales the system out.
    """
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise UsageError("", "--batch", f"must be a positive integer, got {batch!r}")
    if seq_len is not None and (isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1):
        raise UsageError("", "--seq-len", f"must be a positive integer, got {seq_len!r}")
    for flag, value in (("--batch", batch), ("--seq-len", seq_len)):
        if value is not None and value > MAX_ARGUMENT:
            raise LimitError("", flag, f"must be at most {MAX_ARGUMENT}")
    library = library or Library(search_path)
    trace_seq_len = prompt_or_sequence(mode, seq_len, prompt_len)
    explicit = check_name(software)
    trace_options(fusion, recompute, gen_len)  # checked before anything is built
    streaming = _choice(StreamingMemory, streaming_memory, "--streaming-memory")
    multichip = nodes is not None or pipeline_stages != 1 or microbatches is not None
    if multichip or library.find(["chip", "system"], target).kind == "system":
        from archsim.systems import simulate_system  # imported here: archsim.systems builds on this module

        return simulate_system(
            target,
            workload,
            mode,
            batch,
            precision,
            seq_len,
            library,
            nodes=nodes,
            pipeline_stages=pipeline_stages,
            microbatches=microbatches,
            schedule=schedule,
            collective=collective,
            bucket_bytes=bucket_bytes,
            overlap=overlap,
            fusion=fusion,
            recompute=recompute,
            streaming_memory=streaming,
            prompt_len=prompt_len,
            gen_len=gen_len,
            software=explicit,
        ).result
    resolved = resolve_target(target, library)
    chip = resolved.chip
    run_mode = _choice(Mode, mode, "--mode")
    run_precision = chip.default_precision if precision is None else _choice(Precision, precision, "--precision")
    if run_precision not in chip.peak:
        supported = ", ".join(p.value for p in chip.precisions)
        raise UsageError(chip.name, "--precision", f"{run_precision.value} is not supported (supported: {supported})")
    stack = planned_software(library, chip, explicit, workload)
    options = stack_trace_options(stack, run_mode, run_precision, fusion, recompute, gen_len)
    rebuild = rebuilder(workload, library, run_mode, run_precision, trace_seq_len, options)
    trace = build_trace(workload, library, run_mode, batch, run_precision, trace_seq_len, options)
    trace = default_batch_trace(chip, streaming, trace, batch, rebuild)
    named = stack if explicit is not None else None
    return run_trace(
        resolved,
        trace,
        library,
        software=named,
        streaming=streaming,
        rebuild=rebuild if "model" in trace.meta else None,
    )


def rebuilder(
    workload: str, library: Library, mode: Mode, precision: Precision, seq_len: int | None, options: TraceOptions
) -> Callable[[int, bool], Trace]:
    """``rebuild(batch, recompute)``: ``workload``'s trace at another batch, with or without recomputation."""

    def rebuild(batch: int, recompute: bool) -> Trace:
        # asked explicitly, recomputation replaces what the software stack does
        explicit = replace(options, recompute=recompute, rewrites=options.rewrites - {Rewrite.RECOMPUTE})
        return build_trace(workload, library, mode, batch, precision, seq_len, explicit)

    return rebuild


def default_batch_trace(
    chip: ChipSpec,
    streaming: StreamingMemory,
    trace: Trace,
    batch: int | None,
    rebuild: Callable[[int, bool], Trace],
) -> Trace:
    """``trace``, or with no batch asked (``batch`` None) the model's default halved until the step fits."""
    if batch is not None or "model" not in trace.meta:
        return trace
    recompute = trace.meta.get("recompute") == "true"
    while trace.batch > 1 and not memory_fit.fits(chip, streaming, trace.memory_bytes, update_only_bytes(trace.ops)):
        trace = rebuild(trace.batch // 2, recompute)
    return trace


def trace_options(fusion: str | Fusion | None, recompute: bool | None, gen_len: int | None = None) -> TraceOptions:
    """The trace options asked explicitly, checked (``--fusion``, ``--recompute``, ``--gen-len``; None: not asked)."""
    if recompute is not None and not isinstance(recompute, bool):
        raise UsageError("", "--recompute", f"must be true or false, got {recompute!r}")
    _count(gen_len, "--gen-len")
    fused = Fusion.NONE if fusion is None else _choice(Fusion, fusion, "--fusion")
    return TraceOptions(fused, bool(recompute), gen_len=gen_len)


def stack_trace_options(
    stack: SoftwareSpec,
    mode: Mode,
    precision: Precision,
    fusion: str | Fusion | None,
    recompute: bool | None,
    gen_len: int | None = None,
) -> TraceOptions:
    """The trace options of a run on ``stack``: its rewrites, with ``fusion``/``recompute`` over them."""
    trace_options(fusion, recompute, gen_len)
    chosen = None if fusion is None else _choice(Fusion, fusion, "--fusion")
    return stack_options(stack, mode, precision, chosen, recompute, gen_len)


def _count(value: object, flag: str) -> None:
    """Refuse a count argument that is not None or an integer in ``1 .. MAX_ARGUMENT``."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError("", flag, f"must be a positive integer, got {value!r}")
    if value > MAX_ARGUMENT:
        raise LimitError("", flag, f"must be at most {MAX_ARGUMENT}")


def prompt_or_sequence(mode: str | Mode, seq_len: int | None, prompt_len: int | None) -> int | None:
    """The sequence length a trace is built with: the prompt's in ``prefill`` and ``decode``, else ``seq_len``.

    Each mode takes its own flag: ``--prompt-len`` when generating text, ``--seq-len`` otherwise.
    """
    _count(prompt_len, "--prompt-len")
    generating = _choice(Mode, mode, "--mode").is_generation
    if generating and seq_len is not None:
        raise UsageError("", "--seq-len", "prefill and decode take the prompt's length: use --prompt-len")
    if not generating and prompt_len is not None:
        raise UsageError("", "--prompt-len", "is for --mode prefill and decode; other modes take --seq-len")
    return prompt_len if generating else seq_len


def run_trace(
    target: Target,
    trace: Trace,
    library: Library,
    family_efficiency: Efficiency | None = None,
    software: SoftwareSpec | None = None,
    *,
    streaming: StreamingMemory = StreamingMemory.NONE,
    rebuild: Callable[[int, bool], Trace] | None = None,
) -> RunResult:
    """Replay an already built trace on a resolved target.

    ``family_efficiency`` replaces the family file's efficiency parameters (the chip's own overrides
    still apply); calibration uses it to try parameter values without writing YAML. ``software`` is
    the stack that runs it (None: the chip's default for this trace, see :mod:`archsim.stack`). A
    trace that does not fit under ``streaming`` is refused (:func:`archsim.memory_fit.check_needs`,
    which uses ``rebuild`` to name the largest batch that fits).
    """
    check_trace_ops(len(trace.ops), trace.name)
    if trace.has_comm:
        raise UsageError(trace.name, "TARGET", "communication ops need a multi-chip system as the target, not a chip")
    chip = target.chip
    memory_fit.check_needs(chip, streaming, trace, memory_fit.trace_needs, rebuild)
    stack = software if software is not None else default_software(library, chip, is_kernel(trace))
    efficiency = stack_efficiency(library, chip, stack, trace.precision, family_efficiency)
    model = cost_model_for(chip, efficiency, trace.precision, resident_bytes(trace), framework_overhead_s(efficiency))
    assert efficiency.host_overhead is not None
    timings = replay(trace, model, efficiency.host_overhead)
    assert efficiency.step_overhead is not None
    result = build_result(
        target=target.name,
        chip=chip,
        trace=trace,
        timings=timings,
        # the per-step cost is the training loop's (optimizer bookkeeping, loss scaling, data feed);
        # an inference loop only runs the forward ops
        step_overhead_s=efficiency.step_overhead if trace.mode is Mode.TRAIN else 0.0,
        num_chips=target.num_chips,
        software=stack.name,
        input_samples_per_s=stack.input_pipeline,
    )
    return finished(result, chip, library, trace)


def finished(result: RunResult, chip: ChipSpec, library: Library, trace: Trace) -> RunResult:
    """A replayed run's result with what every run reports on top of its times.

    Its energy, power and area (:func:`~archsim.results.power.priced`), then its error bars
    (:func:`~archsim.uncertainty.with_error_bars`); chips and systems alike.
    """
    return with_error_bars(priced(result, chip, library), library, chip, is_kernel(trace))
