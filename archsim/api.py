"""The Python API: simulate a workload on a target and get the same records the CLI prints.

>>> from archsim import simulate
>>> result = simulate("v100", "resnet50", mode="train", batch=256)
>>> round(result.throughput)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence

from archsim.results.records import RunResult
from archsim.run.replay import replay_on_target as run_trace
from archsim.run.request import RunRequest
from archsim.run.runner import run
from archsim.run.target import Target, preferred_capacity_bytes, resolve_target
from archsim.spec.common import Fusion, Precision, StreamingMemory
from archsim.spec.library import Library
from archsim.workloads.trace import Mode

__all__ = ["Target", "preferred_capacity_bytes", "resolve_target", "run_trace", "simulate"]
"""``simulate`` and, for code that replays traces it built itself, the runner's one-chip names:
:class:`Target`, :func:`resolve_target`, :func:`run_trace` (the runner's one replay seam,
:func:`archsim.run.replay.replay_on_target`)."""


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
    recompute: bool | str | None = None,
    padding: str | None = None,
    streaming_memory: str | StreamingMemory = StreamingMemory.NONE,
    prompt_len: int | None = None,
    gen_len: int | None = None,
    software: str | None = None,
    tensor_parallel: int = 1,
    sequence_parallel: bool = False,
    interleave: int = 1,
    zero: int = 0,
    expert_parallel: int = 1,
    bn_group: int = 1,
) -> RunResult:
    """Replay ``workload`` on ``target`` and return the run's records.

    ``target`` is a chip name, alias or YAML path; ``workload`` a model name, a trace file or
    ``gemm:MxNxK``. ``batch`` is per chip (None: the model's default for the mode, halved until the
    step fits the chip's memory -- the in-processor memory on IPUs); ``precision``
    None means the chip's default (fp16, or bf16 on TPUs). Bad arguments raise
    :class:`~archsim.errors.ArchsimError` subclasses naming the argument. ``software`` names the
    stack that runs the graph (``software/``; None: the chip's default, see :mod:`archsim.stack`);
    ``fusion`` (``none`` or ``norm-act``), ``recompute`` (``none``, ``selective`` or ``full``; True
    is ``full``, False ``none``) and ``padding`` (``kept`` or ``removed``: whether a BERT training
    step computes its sequences' padding) override what that stack does (None: as it does;
    :class:`~archsim.workloads.options.Recompute`, :class:`~archsim.workloads.options.Padding`).
    ``streaming_memory`` (``none``, ``optimizer-state`` or ``all``) says what an IPU may keep in
    streaming memory instead of In-Processor Memory (:mod:`archsim.memory_fit`; other chips ignore
    it); a step that does not fit
    is refused with :class:`~archsim.errors.CapacityError` naming the largest batch that fits.
    ``mode`` ``prefill`` and ``decode`` (decoder language models) take ``prompt_len`` instead of
    ``seq_len`` and, for decode, ``gen_len`` (:mod:`archsim.workloads.decoder`; None: 128 each);
    ``generate`` runs a prefill then ``gen_len`` decode steps (:mod:`archsim.run.generation`).

    ``target`` may also be a multi-chip system (``interconnect/systems/``); the keyword arguments
    then spread the workload over it (see :class:`archsim.run.request.Layout`, where they are
    documented): ``batch`` is per data-parallel replica and ``nodes`` scales the system out; ``zero``
    (0..3) shards a data-parallel training step's state (:mod:`archsim.workloads.zero`);
    ``expert_parallel`` shards a mixture of experts' experts over that many data-parallel chips
    (:mod:`archsim.workloads.expert_parallel`); ``bn_group`` shares a training step's batch-norm
    statistics over that many consecutive chips (:mod:`archsim.workloads.sync_batchnorm`).
    """
    request = RunRequest.of(
        target,
        workload,
        mode,
        batch,
        precision,
        seq_len,
        prompt_len=prompt_len,
        gen_len=gen_len,
        nodes=nodes,
        pipeline_stages=pipeline_stages,
        microbatches=microbatches,
        schedule=schedule,
        collective=collective,
        bucket_bytes=bucket_bytes,
        overlap=overlap,
        software=software,
        fusion=fusion,
        recompute=recompute,
        padding=padding,
        streaming_memory=streaming_memory,
        tensor_parallel=tensor_parallel,
        sequence_parallel=sequence_parallel,
        interleave=interleave,
        zero=zero,
        expert_parallel=expert_parallel,
        bn_group=bn_group,
    )
    return run(request, library or Library(search_path))
