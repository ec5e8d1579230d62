"""Records of what a training run adds to a step: its input pipeline and its time to train.

They hang off :class:`~archsim.results.records.RunResult` (``input_pipeline``, ``time_to_train``), are
None on a run that did not ask for them, and serialise with it. Times are seconds.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InputRecord:
    """What the input pipeline of a step did (:mod:`archsim.input_pipeline`)."""

    decode: str
    """``host`` or ``device``."""
    samples_per_s: float
    """Samples per second the pipeline delivers, all nodes together."""
    limit: str
    """The slowest stage: ``host-decode``, ``device-decode``, ``host-link`` or ``storage``."""
    stage_samples_per_s: dict[str, float]
    """Each stage's rate, all nodes together."""
    input_s: float
    """Seconds to prepare one step's samples."""
    ops_step_s: float
    """The step without waiting for input (the chips' step)."""
    wait_s: float
    """Seconds the step waits for its input (0 when the chips are slower)."""
    step_bound: str
    """``input`` when the step waits for its input, else ``ops``."""


@dataclass(frozen=True)
class TimeToTrainRecord:
    """Time to train as MLPerf measures it (:mod:`archsim.time_to_train`).

    ``time_to_train_s = initialization_s + train_s + evaluations x eval_each_s``, where ``train_s`` is
    ``steps`` steps of the run's step time (input waits included) and ``initialization_s`` the part of
    initialization MLPerf's clock covers (none: the clock starts at ``run_start``, after it).
    """

    time_to_train_s: float
    convergence: str
    """The convergence description used (``convergence/``)."""
    quality_target: str
    optimizer: str
    global_batch: int
    epochs: float | None
    """Epochs of the data set trained (None where the data set has no epoch size, e.g. BERT)."""
    samples: float
    """Training samples to the quality target (mean of the published runs, interpolated)."""
    convergence_basis: str
    """How the samples were obtained: a published point, or interpolated between two."""
    steps: int
    step_time_s: float
    train_s: float
    evaluations: int
    eval_samples: int
    eval_each_s: float
    eval_s: float
    initialization_s: float
    clock: str
    """What the clock covers, in words."""
