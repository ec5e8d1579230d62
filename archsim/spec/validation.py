"""Validation tables (``validation/NAME.yaml``, ``kind: validation``).

Published measurements, each mapped to the archsim run that predicts it.

A row names a target, a workload and its settings (those of the published run: batch, precision,
sequence length -- the prompt's, for a ``prefill``, ``decode`` or ``generate`` run, with ``gen_len`` --, gradient
accumulation as ``microbatches`` on a system, ``nodes``, ``pipeline_stages``, ``interleave``, ``tensor_parallel``,
``sequence_parallel`` and an IPU's ``streaming_memory`` as the CLI options of the same names, the
``software`` stack and, where the run departed from what that stack does, its ``fusion`` and
``recompute``), which metric was measured (``throughput`` of the whole target in samples/s; ``op_time``:
the time of the op of ``phase`` in the run, in ms; ``op_rate``: that op's FLOPs over its time, in
TFLOP/s; ``ttft``: a prefill run's time to first token, in ms; ``step_time``: the step's time, in s (a
training iteration); ``output_throughput``: a ``generate`` run's output tokens per second, per chip
(``tok/s/GPU``) or per model replica (``tok/s``); ``achieved_tflops``: a training step's executed FLOPs
per chip per second, recomputation included (Megatron-LM's "achieved TFLOP/s"); ``mfu``: its model FLOPs
utilization, recomputation excluded, in %; ``busbw``: the bus bandwidth of one collective call of
``bytes`` bytes, in GB/s as nccl-tests prints it, with ``workload`` the collective, ``software`` its
collective library and no ``mode``: what ``archsim collective`` answers), the published value with its
unit and source, and the group it belongs to (``operator``, ``single_chip``, ``multi_chip``).
The table states the error tolerance of each group.
"""

from __future__ import annotations

import enum
from typing import Literal

from pydantic import StrictFloat, StrictInt, model_validator

from archsim.spec.common import Count, Fraction, Fusion, Name, Precision, Spec, StreamingMemory


class Level(enum.StrEnum):
    """Operator level (one kernel) or system level (a whole step, on one chip or many)."""

    OPERATOR = "operator"
    SYSTEM = "system"


class Group(enum.StrEnum):
    """What a row measures: one kernel, one chip's step, or a multi-chip system's step."""

    OPERATOR = "operator"
    SINGLE_CHIP = "single_chip"
    MULTI_CHIP = "multi_chip"

    @property
    def level(self) -> Level:
        """Single- and multi-chip steps are both system level."""
        return Level.OPERATOR if self is Group.OPERATOR else Level.SYSTEM


class Metric(enum.StrEnum):
    """The measured quantity."""

    THROUGHPUT = "throughput"
    OP_TIME = "op_time"
    OP_RATE = "op_rate"
    TTFT = "ttft"
    STEP_TIME = "step_time"
    OUTPUT_THROUGHPUT = "output_throughput"
    ACHIEVED_TFLOPS = "achieved_tflops"
    MFU = "mfu"
    BUSBW = "busbw"
    POWER = "power"
    """A chip's average power over the step (``power_w``), as a board's power sensor averages it."""

    @property
    def per_op(self) -> bool:
        """True for the metrics read off the op of one ``phase``."""
        return self in (Metric.OP_TIME, Metric.OP_RATE)


UNITS = {
    Metric.THROUGHPUT: ("img/s", "seq/s"),
    Metric.OP_TIME: ("ms",),
    Metric.OP_RATE: ("TFLOP/s",),
    Metric.TTFT: ("ms",),
    Metric.STEP_TIME: ("s",),
    Metric.OUTPUT_THROUGHPUT: ("tok/s/GPU", "tok/s"),
    Metric.ACHIEVED_TFLOPS: ("TFLOP/s/GPU",),
    Metric.MFU: ("%",),
    Metric.BUSBW: ("GB/s",),
    Metric.POWER: ("W",),
}


class Row(Spec):
    """One published number and the run that predicts it."""

    id: Name
    group: Group
    target: str
    workload: str
    mode: Literal["train", "infer", "prefill", "decode", "generate"] | None = None
    """The run's mode; required except in ``busbw`` rows, which time one collective call."""
    batch: Count | Literal["max"] | None = None
    """The batch (per model replica); ``max`` in ``generate`` rows: the largest whose prefill and decode
    steps fit with their KV cache, as a runtime that sizes its batch by free memory picks it."""
    seq_len: Count | None = None
    """The sequence length; the prompt's in ``prefill``, ``decode`` and ``generate`` rows."""
    gen_len: Count | None = None
    """Tokens generated per sequence, for ``decode`` and ``generate`` rows."""
    precision: Precision
    microbatches: Count | None = None
    """On a system: microbatches per step and replica (gradient accumulation), as ``--microbatches``."""
    nodes: Count | None = None
    """On a system: copies of it joined by its scale-out fabric, as ``--nodes``."""
    pipeline_stages: Count | None = None
    """On a system: chips per pipeline, as ``--pipeline-stages``."""
    interleave: Count | None = None
    """With ``pipeline_stages``: model chunks per stage (interleaved 1F1B), as ``--interleave``."""
    tensor_parallel: Count | None = None
    """On a system: chips that split each layer of a decoder model, as ``--tensor-parallel``."""
    sequence_parallel: bool | None = None
    """With ``tensor_parallel``: sequence parallelism, as ``--sequence-parallel``."""
    streaming_memory: StreamingMemory | None = None
    """On an IPU system: what may live in streaming memory, as ``--streaming-memory``."""
    bytes: Count | None = None
    """For ``busbw``: the message size of the collective call, in bytes."""
    software: Name | None = None
    """The software stack of the published run, as ``--software`` (None: the chip's default)."""
    fusion: Fusion | None = None
    """Ops the published run's framework fused, as ``--fusion`` (None: what its software does)."""
    recompute: bool | Literal["none", "selective", "full"] | None = None
    """What the published run recomputed, as ``--recompute`` (True: full; None: as its software does)."""
    padding: Literal["kept", "removed", "packed"] | None = None
    """How the published run computed its sequences' padding, as ``--padding`` (None: as its software does)."""
    bn_group: Count = 1
    """Consecutive chips that shared their batch-norm statistics in the published run, as ``--bn-group``."""
    metric: Metric
    phase: Literal["fwd", "bwd_data", "bwd_weight", "update"] | None = None
    """For ``op_time``: the phase of the op whose time was measured (a run has one op per phase)."""
    published: StrictFloat | StrictInt
    unit: str
    source: str
    notes: str = ""
    known_outside: str | None = None
    """Why the row is known to fall outside its tolerance today (its test is then an expected
    failure, and turns into a failure the day the row comes inside, so the note gets removed)."""
    fit: bool = True
    """False: calibration leaves the row out (it is still predicted, reported and tested), for a
    measurement the run only bounds, such as a Server-scenario throughput held under latency limits,
    predicted as the offline throughput it cannot exceed. ``notes`` says why."""

    @model_validator(mode="after")
    def _consistent(self) -> Row:
        if self.unit not in UNITS[self.metric]:
            allowed = ", ".join(UNITS[self.metric])
            raise ValueError(f"unit {self.unit!r} does not fit metric {self.metric.value} ({allowed})")
        if self.metric.per_op != (self.phase is not None):
            raise ValueError("phase is required with metrics op_time and op_rate and only there")
        if (self.metric is Metric.TTFT) != (self.mode == "prefill"):
            raise ValueError("metric ttft is the metric of prefill rows")
        if self.gen_len is not None and self.mode not in ("decode", "generate"):
            raise ValueError("gen_len applies to decode and generate rows only")
        if self.batch == "max" and self.mode != "generate":
            raise ValueError("batch max applies to generate rows only")
        if (self.metric is Metric.OUTPUT_THROUGHPUT) != (self.mode == "generate"):
            raise ValueError("metric output_throughput is the metric of generate rows")
        if self.metric in (Metric.ACHIEVED_TFLOPS, Metric.MFU) and self.mode != "train":
            raise ValueError(f"metric {self.metric.value} applies to training rows only")
        if (self.metric is Metric.BUSBW) != (self.mode is None):
            raise ValueError("mode is required, except in busbw rows, which have none")
        if (self.metric is Metric.BUSBW) != (self.bytes is not None):
            raise ValueError("bytes (the message size) is required with metric busbw and only there")
        if self.published <= 0:
            raise ValueError(f"published must be positive, got {self.published}")
        if self.recompute not in (None, False, "none") and self.mode != "train":
            raise ValueError("recompute applies to training rows only")
        if not self.fit and not self.notes:
            raise ValueError("fit: false needs notes saying why calibration leaves the row out")
        return self

    @property
    def published_si(self) -> float:
        """The published value in SI units: samples/s, tokens/s, seconds, FLOP/s or a fraction."""
        scale = {"ms": 1e-3, "TFLOP/s": 1e12, "TFLOP/s/GPU": 1e12, "GB/s": 1e9, "%": 1e-2}.get(self.unit, 1.0)
        return self.published * scale


class ValidationSpec(Spec):
    """A validation table."""

    schema_version: Literal[1]
    kind: Literal["validation"]
    name: Name
    description: str
    tolerance: dict[Group, Fraction]
    rows: tuple[Row, ...]
    held_out: bool = False
    """True for published results outside the calibration files: nothing is fitted to them
    (:func:`archsim.validation.run.calibration_table` refuses the table) and ``archsim validate``
    reports their errors as held out, not in-sample."""

    @model_validator(mode="after")
    def _unique(self) -> ValidationSpec:
        ids = [row.id for row in self.rows]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"rows: duplicate id {duplicates[0]!r}")
        missing = sorted({row.group.value for row in self.rows} - {g.value for g in self.tolerance})
        if missing:
            raise ValueError(f"tolerance: no tolerance for group {missing[0]!r}")
        return self
