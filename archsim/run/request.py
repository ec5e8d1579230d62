"""A run request: every argument of one run, checked once, frozen.

The CLI (``archsim run``), the API (:func:`archsim.simulate`), sweeps, baselines and validation rows
all build a :class:`RunRequest` with :meth:`RunRequest.of` and hand it to
:func:`archsim.run.runner.run`. Building it checks what can be checked without the description
library -- counts are positive integers within :data:`~archsim.limits.MAX_ARGUMENT`, names are one of
their choices, each mode takes its own length flag -- and raises the one-line
:class:`~archsim.errors.UsageError` or :class:`~archsim.errors.LimitError` naming the flag. What needs
the library (the target, the chip's precisions, the software stack) is checked when the runner
resolves the target, once.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TypeVar

from archsim.engine.options import Schedule
from archsim.errors import LimitError, UsageError
from archsim.limits import MAX_ARGUMENT, check_nodes
from archsim.spec.common import Fusion, Precision, StreamingMemory
from archsim.spec.software import Rewrite, SoftwareSpec
from archsim.stack import PADDING_REWRITES, check_name, stack_options
from archsim.workloads.options import Padding, Recompute, TraceOptions
from archsim.workloads.trace import Mode
from archsim.workloads.transforms import DEFAULT_BUCKET_BYTES
from archsim.workloads.zero import ZERO_STAGES

E = TypeVar("E", bound=enum.Enum)


def choice(cls: type[E], value: object, flag: str) -> E:
    """``value`` as a member of ``cls`` (a member or its value); anything else is refused naming ``flag``."""
    if isinstance(value, cls):
        return value
    try:
        return cls(value)
    except ValueError:
        choices = ", ".join(m.value for m in cls)
        raise UsageError("", flag, f"{value!r} is not one of {choices}") from None


def check_count(value: object, flag: str) -> None:
    """Refuse a count argument that is not None or an integer in ``1 .. MAX_ARGUMENT``."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError("", flag, f"must be a positive integer, got {value!r}")
    if value > MAX_ARGUMENT:
        raise LimitError("", flag, f"must be at most {MAX_ARGUMENT}")


def recompute_choice(value: object) -> Recompute | None:
    """``--recompute`` checked: None (not asked), a :class:`Recompute` or its name, or a bool (True: ``full``)."""
    if value is None:
        return None
    try:
        return Recompute.of(value)
    except ValueError:
        choices = ", ".join(r.value for r in Recompute)
        raise UsageError("", "--recompute", f"must be one of {choices}, true or false, got {value!r}") from None


def padding_choice(value: str | Padding | None) -> Padding | None:
    """``--padding`` as a :class:`Padding` (None: what the software stack does)."""
    return None if value is None else choice(Padding, value, "--padding")


def trace_options(
    fusion: str | Fusion | None,
    recompute: Recompute | str | bool | None,
    gen_len: int | None = None,
    padding: str | Padding | None = None,
) -> TraceOptions:
    """The trace options asked explicitly, checked (None: not asked).

    ``--fusion``, ``--recompute``, ``--gen-len`` and ``--padding``.
    """
    level = recompute_choice(recompute)
    check_count(gen_len, "--gen-len")
    fused = Fusion.NONE if fusion is None else choice(Fusion, fusion, "--fusion")
    chosen = padding_choice(padding)
    rewrites = frozenset[Rewrite]() if chosen is None else PADDING_REWRITES[chosen]
    return TraceOptions(fused, level or Recompute.NONE, rewrites, gen_len=gen_len)


def stack_trace_options(
    stack: SoftwareSpec,
    mode: Mode,
    precision: Precision,
    fusion: str | Fusion | None,
    recompute: Recompute | str | bool | None,
    gen_len: int | None = None,
    padding: str | Padding | None = None,
) -> TraceOptions:
    """The trace options of a run on ``stack``: its rewrites, with ``fusion``/``recompute``/``padding`` over them."""
    trace_options(fusion, recompute, gen_len, padding)
    chosen = None if fusion is None else choice(Fusion, fusion, "--fusion")
    return stack_options(stack, mode, precision, chosen, recompute_choice(recompute), gen_len, padding_choice(padding))


@dataclass(frozen=True)
class Layout:
    """How a run spreads over a system (the CLI's multi-chip options); the default is one chip's run.

    * ``nodes``: copies of the system joined by its scale-out fabric (None: 1).
    * ``pipeline_stages``: chips per pipeline (must divide the system's first tier); the global
      batch is the request's ``batch`` times the data-parallel width ``chips / pipeline_stages``,
      and a pipelined request with no batch takes the model's default, unchanged.
    * ``microbatches``: per step and replica, each of ``batch / microbatches`` samples whatever the
      source (None: 4 per stage, fewer if the batch does not split; a source of fixed batch, a trace
      file or an inline product, is one microbatch: see :func:`archsim.workloads.microbatch_trace`).
    * ``schedule``: ``1f1b`` or ``gpipe``; ``collective``: ``ring``, ``tree``, ``hierarchical`` or
      ``torus`` (None or ``auto``: the system's); ``bucket_bytes``: gradient bucket size (25 MiB);
      ``overlap``: all-reduce buckets during the backward pass.
    * ``tensor_parallel``: chips that split each layer of a decoder model (consecutive chips of the
      system's first tier; pipeline stages come next, data-parallel replicas last);
      ``sequence_parallel``: with it, norms and residual adds on ``1/T`` of the tokens.
    * ``interleave``: model chunks per pipeline stage (interleaved 1F1B; 1: plain).
    * ``zero``: the ZeRO stage of a data-parallel training run (0: none; :mod:`archsim.workloads.zero`).
    * ``expert_parallel``: chips of the data-parallel group that share a mixture of experts' experts
      (must divide the data-parallel width; :mod:`archsim.workloads.expert_parallel`).
    * ``bn_group``: consecutive chips that share their batch-norm statistics in training (must divide
      the data-parallel width; :mod:`archsim.workloads.sync_batchnorm`).
    """

    nodes: int | None = None
    """Copies of the system joined by its scale-out fabric (None: 1)."""
    pipeline_stages: int = 1
    """Chips per pipeline (must divide the system's first tier)."""
    microbatches: int | None = None
    """Microbatches per step and replica (None: 4 per stage when pipelined, else 1)."""
    schedule: Schedule = Schedule.ONE_F_ONE_B
    collective: str | None = None
    """All-reduce algorithm (None: the system's default)."""
    bucket_bytes: int = DEFAULT_BUCKET_BYTES
    """Gradient bucket size (PyTorch DDP's 25 MiB by default)."""
    overlap: bool = True
    """All-reduce buckets while the backward pass runs (False: after it)."""
    tensor_parallel: int = 1
    """Chips that split each layer of a decoder model (Megatron-LM tensor parallelism)."""
    sequence_parallel: bool = False
    """Sequence parallelism within the tensor-parallel group (Korthikanti et al. 2022)."""
    interleave: int = 1
    """Model chunks per pipeline stage (interleaved 1F1B, Narayanan et al. 2021)."""
    zero: int = 0
    """ZeRO stage 0..3: what the data-parallel group shards (0: nothing, plain data parallelism)."""
    expert_parallel: int = 1
    """Chips of the data-parallel group that share the experts (DeepSpeed-MoE expert parallelism)."""
    bn_group: int = 1
    """Consecutive chips that share their batch-norm statistics (synchronized batch norm)."""

    @property
    def spreads(self) -> bool:
        """True when the layout asks for more than one chip's run (it needs a system as the target)."""
        return (
            self.nodes is not None
            or self.pipeline_stages != 1
            or self.microbatches is not None
            or self.tensor_parallel != 1
            or self.expert_parallel != 1
            or self.bn_group != 1
        )

    def spreading_flag(self) -> str:
        """The first multi-chip flag the layout sets (for messages)."""
        if self.nodes is not None:
            return "--nodes"
        if self.tensor_parallel != 1:
            return "--tensor-parallel"
        if self.expert_parallel != 1:
            return "--expert-parallel"
        if self.bn_group != 1:
            return "--bn-group"
        return "--pipeline-stages" if self.pipeline_stages != 1 else "--microbatches"

    @classmethod
    def of(
        cls,
        nodes: int | None = None,
        pipeline_stages: int = 1,
        microbatches: int | None = None,
        schedule: str | Schedule = Schedule.ONE_F_ONE_B,
        collective: str | None = None,
        bucket_bytes: int | None = None,
        overlap: bool = True,
        tensor_parallel: int = 1,
        sequence_parallel: bool = False,
        interleave: int = 1,
        zero: int = 0,
        expert_parallel: int = 1,
        bn_group: int = 1,
    ) -> Layout:
        """A checked layout; ``collective`` ``auto`` is the system's default, as None is."""
        check_nodes(nodes)
        counts = (
            ("--pipeline-stages", pipeline_stages),
            ("--microbatches", microbatches),
            ("--tensor-parallel", tensor_parallel),
        )
        for flag, value in counts:
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise UsageError("", flag, f"must be a positive integer, got {value!r}")
        if bucket_bytes is not None and (
            isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) or bucket_bytes < 1
        ):
            raise UsageError("", "--bucket-size", f"must be a positive number of bytes, got {bucket_bytes!r}")
        check_count(tensor_parallel, "--tensor-parallel")
        check_count(expert_parallel, "--expert-parallel")
        check_count(bn_group, "--bn-group")
        if not isinstance(sequence_parallel, bool):
            raise UsageError("", "--sequence-parallel", f"must be true or false, got {sequence_parallel!r}")
        if sequence_parallel and tensor_parallel == 1:
            raise UsageError(
                "", "--sequence-parallel", "splits a tensor-parallel group's tokens: give --tensor-parallel T"
            )
        check_count(interleave, "--interleave")
        if interleave > 1 and (pipeline_stages == 1 or choice(Schedule, schedule, "--schedule") is Schedule.GPIPE):
            raise UsageError("", "--interleave", "interleaves the stages of a 1f1b pipeline: give --pipeline-stages P")
        if isinstance(zero, bool) or not isinstance(zero, int) or zero not in ZERO_STAGES:
            raise UsageError("", "--zero", f"must be a ZeRO stage, 0, 1, 2 or 3, got {zero!r}")
        return cls(
            nodes=nodes,
            pipeline_stages=pipeline_stages,
            microbatches=microbatches,
            schedule=choice(Schedule, schedule, "--schedule"),
            collective=None if collective == "auto" else collective,
            bucket_bytes=bucket_bytes or DEFAULT_BUCKET_BYTES,
            overlap=bool(overlap),
            tensor_parallel=tensor_parallel,
            sequence_parallel=sequence_parallel,
            interleave=interleave,
            zero=zero,
            expert_parallel=expert_parallel,
            bn_group=bn_group,
        )


@dataclass(frozen=True)
class RunRequest:
    """One run, as asked: build it with :meth:`of`, which checks every argument once."""

    target: str
    """A chip or system name, alias or YAML path."""
    workload: str
    """A model name, a trace file, ``gemm:MxNxK`` or ``conv:...``."""
    mode: Mode = Mode.INFER
    batch: int | None = None
    """Per chip, or per data-parallel replica on a system (None: the model's default, halved until it fits)."""
    precision: Precision | None = None
    """None: the chip's default."""
    seq_len: int | None = None
    """The sequence length of ``infer`` and ``train`` runs (None: the model's)."""
    prompt_len: int | None = None
    """``prefill``, ``decode`` and ``generate``: the prompt's tokens per sequence (None: 128)."""
    gen_len: int | None = None
    """``decode`` and ``generate``: tokens generated per sequence (None: 128)."""
    layout: Layout = field(default_factory=Layout)
    software: str | None = None
    """A ``software/`` stack's name (None: the chip's default)."""
    fusion: Fusion | None = None
    """None: what the software stack does."""
    recompute: Recompute | None = None
    """What the backward pass recomputes (None: what the software stack does)."""
    padding: Padding | None = None
    """Whether a training step computes its sequences' padding (None: what the software stack does)."""
    streaming: StreamingMemory = StreamingMemory.NONE
    """What an IPU may keep in streaming memory (:mod:`archsim.memory_fit`)."""

    @property
    def trace_seq_len(self) -> int | None:
        """The sequence length the trace is built with: the prompt's when generating, else ``seq_len``."""
        return self.prompt_len if self.mode.is_generation else self.seq_len

    @classmethod
    def of(
        cls,
        target: str,
        workload: str,
        mode: str | Mode = Mode.INFER,
        batch: int | None = None,
        precision: str | Precision | None = None,
        seq_len: int | None = None,
        *,
        prompt_len: int | None = None,
        gen_len: int | None = None,
        nodes: int | None = None,
        pipeline_stages: int = 1,
        microbatches: int | None = None,
        schedule: str | Schedule = Schedule.ONE_F_ONE_B,
        collective: str | None = None,
        bucket_bytes: int | None = None,
        overlap: bool = True,
        software: str | None = None,
        fusion: str | Fusion | None = None,
        recompute: Recompute | str | bool | None = None,
        padding: str | Padding | None = None,
        streaming_memory: str | StreamingMemory | None = StreamingMemory.NONE,
        tensor_parallel: int = 1,
        sequence_parallel: bool = False,
        interleave: int = 1,
        zero: int = 0,
        expert_parallel: int = 1,
        bn_group: int = 1,
    ) -> RunRequest:
        """A checked request; strings become their enums (``mode="train"``).

        The arguments are :func:`archsim.simulate`'s (the layout's as :meth:`Layout.of` takes them). A bad
        argument is refused in one line naming its flag (``--batch: must be a positive integer, got 0``).
        """
        for flag, value in (("--batch", batch), ("--seq-len", seq_len)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise UsageError("", flag, f"must be a positive integer, got {value!r}")
        for flag, value in (("--batch", batch), ("--seq-len", seq_len)):
            if value is not None and value > MAX_ARGUMENT:
                raise LimitError("", flag, f"must be at most {MAX_ARGUMENT}")
        check_count(prompt_len, "--prompt-len")
        run_mode = choice(Mode, mode, "--mode")
        if run_mode.is_generation and seq_len is not None:
            raise UsageError("", "--seq-len", "prefill and decode take the prompt's length: use --prompt-len")
        if not run_mode.is_generation and prompt_len is not None:
            raise UsageError("", "--prompt-len", "is for --mode prefill and decode; other modes take --seq-len")
        explicit = check_name(software)
        trace_options(fusion, recompute, gen_len, padding)
        streaming = choice(StreamingMemory, streaming_memory or StreamingMemory.NONE, "--streaming-memory")
        layout = Layout.of(
            nodes,
            pipeline_stages,
            microbatches,
            schedule,
            collective,
            bucket_bytes,
            overlap,
            tensor_parallel,
            sequence_parallel,
            interleave,
            zero,
            expert_parallel,
            bn_group,
        )
        return cls(
            target=target,
            workload=workload,
            mode=run_mode,
            batch=batch,
            precision=None if precision is None else choice(Precision, precision, "--precision"),
            seq_len=seq_len,
            prompt_len=prompt_len,
            gen_len=gen_len,
            layout=layout,
            software=explicit,
            fusion=None if fusion is None else choice(Fusion, fusion, "--fusion"),
            recompute=recompute_choice(recompute),
            padding=padding_choice(padding),
            streaming=streaming,
        )
