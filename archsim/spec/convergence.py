"""Convergence descriptions (``convergence/NAME.yaml``, ``kind: convergence``).

How much training a workload needs to reach its MLPerf quality target, and the data set it trains on.

A description names its workload (``workload``, a ``workloads/`` model), the quality target, the data
set (``dataset``: training and evaluation samples, and for an image data set the bytes of one encoded
and one decoded sample, which the input pipeline moves), how MLPerf evaluates it (``evaluation``) and,
per optimizer, the published reference convergence points: for each global batch the number of
epochs (``unit: epochs``) or training samples (``unit: samples``) each reference run needed. These are
facts, not fitted parameters: archsim takes their mean and interpolates between them
(:meth:`ConvergenceSpec.to_target`).

Evaluation cadence (MLPerf Training rules): ``every_epochs`` evaluates after every that many epochs
(ResNet-50: 4); ``every_samples`` after every ``every_samples.per_batch x global_batch + base``
training samples rounded down to a multiple of ``multiple`` and then up to whole steps (BERT:
``0.05 x (230.23 x batch + 3,000,000)`` rounded down to a multiple of 25,000).
"""

from __future__ import annotations

import enum
import itertools
import math
from statistics import fmean
from typing import Literal

from pydantic import Field, StrictFloat, StrictInt, model_validator

from archsim.errors import UsageError
from archsim.spec.common import Bytes, Count, Name, Spec


class Unit(enum.StrEnum):
    """What a convergence point counts: epochs of the data set, or training samples."""

    EPOCHS = "epochs"
    SAMPLES = "samples"


class DataFormat(enum.StrEnum):
    """How the data set is stored: JPEG images (decoded by the input pipeline) or ready tokens."""

    JPEG = "jpeg"
    TOKENS = "tokens"


class Dataset(Spec):
    """The data set: sample counts and, for images, bytes per sample."""

    name: str
    train_samples: Count | None = None
    """Samples in one epoch (needed where convergence or evaluation counts epochs)."""
    eval_samples: Count
    format: DataFormat
    encoded_sample_bytes: Bytes | None = None
    """Mean bytes of one stored (encoded) sample: what storage and a device-side decoder read."""
    decoded_sample_bytes: Bytes | None = None
    """Bytes of one decoded, augmented sample as the chip receives it from a host-side decoder."""
    mean_tokens: Count | None = None
    """Token data sets: mean real (not padding) tokens of one sequence at the convergence data's
    ``seq_len``; what a stack that leaves padding out computes per sequence (:mod:`archsim.workloads.padding`)."""

    @model_validator(mode="after")
    def _image_bytes(self) -> Dataset:
        if self.format is DataFormat.JPEG and (self.encoded_sample_bytes is None or self.decoded_sample_bytes is None):
            raise ValueError("a jpeg data set needs encoded_sample_bytes and decoded_sample_bytes")
        if self.mean_tokens is not None and self.format is not DataFormat.TOKENS:
            raise ValueError("mean_tokens describes a token data set (format: tokens)")
        return self


class SampleCadence(Spec):
    """Evaluate every ``per_batch x global_batch + base`` samples, rounded down to ``multiple``."""

    per_batch: StrictFloat | StrictInt = Field(ge=0)
    base: StrictFloat | StrictInt = Field(ge=0)
    multiple: Count


class Evaluation(Spec):
    """How often MLPerf evaluates (exactly one of the two cadences)."""

    every_epochs: Count | None = None
    every_samples: SampleCadence | None = None

    @model_validator(mode="after")
    def _one(self) -> Evaluation:
        if (self.every_epochs is None) == (self.every_samples is None):
            raise ValueError("give exactly one of every_epochs and every_samples")
        return self


class Point(Spec):
    """One reference convergence point: a global batch and what each reference run needed."""

    global_batch: Count
    runs: tuple[StrictFloat | StrictInt, ...] = Field(min_length=1)

    @property
    def mean(self) -> float:
        """Mean over the reference runs (epochs or samples)."""
        return fmean(float(r) for r in self.runs)


class ConvergenceSpec(Spec):
    """Training needed to reach a workload's quality target, per optimizer and global batch."""

    schema_version: Literal[1]
    kind: Literal["convergence"]
    name: Name
    aliases: tuple[Name, ...] = ()
    description: str
    workload: Name
    """The model, by name (``workloads/``)."""
    quality_target: str
    seq_len: Count | None = None
    """The sequence length the benchmark trains at (None: not a sequence model); the data hold only there."""
    dataset: Dataset
    evaluation: Evaluation
    unit: Unit
    optimizers: dict[Name, tuple[Point, ...]] = Field(min_length=1)
    """Reference points per optimizer, by global batch (ascending, no batch twice)."""
    default_optimizer: Name
    sources: dict[str, str]

    @model_validator(mode="after")
    def _consistent(self) -> ConvergenceSpec:
        epochs = self.unit is Unit.EPOCHS or self.evaluation.every_epochs is not None
        if epochs and self.dataset.train_samples is None:
            raise ValueError("dataset.train_samples is needed when convergence or evaluation counts epochs")
        if self.default_optimizer not in self.optimizers:
            raise ValueError(f"default_optimizer {self.default_optimizer!r} is not one of the optimizers")
        mean = self.dataset.mean_tokens
        if mean is not None and (self.seq_len is None or mean > self.seq_len):
            raise ValueError(f"dataset.mean_tokens must be at most seq_len ({self.seq_len}), got {mean}")
        for name, points in self.optimizers.items():
            batches = [p.global_batch for p in points]
            if not points or batches != sorted(set(batches)):
                raise ValueError(f"optimizers.{name}: global batches must be ascending, each once")
        cited = ("dataset.mean_tokens",) if self.dataset.mean_tokens is not None else ()
        needed = ("quality_target", "dataset", "evaluation", *cited, *(f"optimizers.{n}" for n in self.optimizers))
        missing = [k for k in needed if not self._cited(k)]
        if missing:
            raise ValueError(f"sources: no source for {', '.join(missing)}")
        return self

    def _cited(self, path: str) -> bool:
        return any(key == path or key.startswith(path + ".") for key in self.sources)

    def to_target(self, optimizer: str, global_batch: int) -> tuple[float, str]:
        """Epochs or samples to the quality target at ``global_batch``, and how it was obtained.

        Between two published points the mean of each is interpolated linearly in the global batch
        (as MLCommons' reference-convergence checker does); at a published point its mean is taken.
        Below the smallest published batch the smallest batch's mean is taken (epochs to converge grow
        with the batch in every table here, so this never promises faster convergence than measured);
        above the largest the run is refused, naming the largest batch that has data.
        """
        if optimizer not in self.optimizers:
            known = ", ".join(self.optimizers)
            raise UsageError(self.name, "--optimizer", f"no convergence data for {optimizer!r} (known: {known})")
        points = self.optimizers[optimizer]
        if global_batch > points[-1].global_batch:
            raise UsageError(
                self.name,
                "global batch",
                f"{global_batch} is above the largest published {optimizer} point ({points[-1].global_batch}); "
                f"a global batch of at most {points[-1].global_batch} has convergence data",
            )
        if global_batch <= points[0].global_batch:
            note = "published point" if global_batch == points[0].global_batch else "smallest published batch"
            return points[0].mean, f"{note} {points[0].global_batch}"
        for low, high in itertools.pairwise(points):
            if low.global_batch <= global_batch <= high.global_batch:
                if global_batch == high.global_batch:
                    return high.mean, f"published point {high.global_batch}"
                share = (global_batch - low.global_batch) / (high.global_batch - low.global_batch)
                value = low.mean + share * (high.mean - low.mean)
                return value, f"interpolated between {low.global_batch} and {high.global_batch}"
        raise AssertionError("unreachable: points cover the batch")  # pragma: no cover

    def evaluation_interval_samples(self, global_batch: int) -> float:
        """Training samples between two evaluations at ``global_batch`` (whole steps)."""
        if self.evaluation.every_epochs is not None:
            assert self.dataset.train_samples is not None  # checked on load
            return float(self.evaluation.every_epochs * self.dataset.train_samples)
        cadence = self.evaluation.every_samples
        assert cadence is not None
        raw = cadence.per_batch * global_batch + cadence.base
        rounded = max(cadence.multiple, math.floor(raw / cadence.multiple) * cadence.multiple)
        return float(math.ceil(rounded / global_batch) * global_batch)
