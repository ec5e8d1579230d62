"""MLPerf result tables (``validation/NAME.yaml``, ``kind: mlperf``): published times to train.

Each row is one published MLPerf Training result with the settings it was run with -- target system,
workload, per-replica batch (``batch``) and the global batch it gives, micro-batches (gradient
accumulation), recomputation, precision, sequence length, optimizer, its schedule's epochs where it
trains a fixed number of them, the software it ran -- and the
published time to train in minutes with its source. ``archsim mlperf`` runs each row as
``archsim run ... --mode train --time-to-train`` and prints predicted against published minutes. These
rows are never fitted to: efficiency parameters come only from the calibration rows (``kind:
validation``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictFloat, StrictInt, model_validator

from archsim.spec.common import Count, Fraction, Fusion, Name, Precision, Spec, StreamingMemory


class MlperfRow(Spec):
    """One published MLPerf Training result and the archsim run that predicts it."""

    id: Name
    round: str
    """MLPerf Training round, e.g. ``v1.1``."""
    submitter: str
    submission: str
    """The submission's system name as published."""
    software: str
    """The software the submission ran, as published."""
    stack: Name | None = None
    """The archsim software stack (``software/``) that runs the row (None: the chip's default)."""
    target: str
    workload: str
    batch: Count
    """Per data-parallel replica, micro-batches together (as ``--batch``)."""
    global_batch: Count
    """The global batch the result log records; the row's settings must give it."""
    microbatches: Count | None = None
    nodes: Count | None = None
    pipeline_stages: Count = 1
    recompute: bool = False
    fusion: Fusion | None = None
    """Ops the run's framework fused, as ``--fusion`` (None: what its software stack does)."""
    padding: Literal["kept", "removed", "packed"] | None = None
    """How the run computed its sequences' padding, as ``--padding`` (None: what its software stack does)."""
    bn_group: Count = 1
    """Consecutive chips that shared their batch-norm statistics, as ``--bn-group`` (the logs' span
    over the batch per chip)."""
    streaming_memory: StreamingMemory = StreamingMemory.NONE
    precision: Precision
    seq_len: Count | None = None
    optimizer: Name
    epochs: StrictFloat | StrictInt | None = Field(default=None, gt=0)
    """The submission's own schedule in epochs, trained in full (as ``--epochs``; None: the convergence data's)."""
    published_minutes: StrictFloat | StrictInt = Field(gt=0)
    source: str
    notes: str = ""
    known_outside: str | None = None
    """Why the prediction is known to miss the tolerance today (its test is then a strict expected failure)."""


class MlperfSpec(Spec):
    """A table of published MLPerf Training results with the tolerance the project aims at."""

    schema_version: Literal[1]
    kind: Literal["mlperf"]
    name: Name
    aliases: tuple[Name, ...] = ()
    description: str
    tolerance: Fraction
    """The |error| the issue's acceptance asks for (reported, never fitted to)."""
    rows: tuple[MlperfRow, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> MlperfSpec:
        ids = [row.id for row in self.rows]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"rows: id {', '.join(duplicates)} appears more than once")
        return self
