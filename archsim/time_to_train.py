"""Time to train as MLPerf Training measures it, from a simulated step and published convergence data.

MLPerf's clock starts at ``run_start``, after initialization (compiling the graph, initializing the
weights: untimed under the rules), and stops at the first evaluation that reaches the quality target.
It therefore covers the training steps and every evaluation on the way::

    time_to_train_s = initialization_s + steps x step_time_s + evaluations x eval_each_s

* ``steps = ceil(samples / global_batch)``, where ``samples`` is what the published reference runs
  needed at this global batch and optimizer (``convergence/``: epochs x the data set's size, or
  samples; interpolated between published batches, see
  :meth:`archsim.spec.convergence.ConvergenceSpec.to_target`), or the run's own schedule when it
  names one (``epochs``): a submission whose learning-rate schedule lasts ``epochs`` epochs trains
  all of them when it evaluates its checkpoints only after training (Graphcore's MLPerf v1.1
  ResNet-50) or reaches the target at the schedule's end. A schedule is a setting of the run, like
  its batch; archsim does not check that it reaches the target;
* ``step_time_s`` is the simulated training step, input waits included when the run models its input
  pipeline (:mod:`archsim.input_pipeline`);
* ``evaluations = ceil(samples / interval)``: MLPerf evaluates every ``interval`` samples (ResNet-50:
  every 4 epochs; BERT: a rule of the global batch) and stops at the first evaluation past the target;
* ``eval_each_s`` is the evaluation set run forward on the same chips (an inference run at the
  training micro-batch, fed by the same input pipeline);
* ``initialization_s`` is 0: nothing before ``run_start`` is on the clock.

Nothing here is fitted: the step comes from the cost models, the rest from published data.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from archsim.api import simulate
from archsim.errors import UsageError
from archsim.input_pipeline import Decode, stage_rates, with_input
from archsim.results.records import RunResult
from archsim.results.training import TimeToTrainRecord
from archsim.spec.convergence import ConvergenceSpec, Unit
from archsim.spec.library import Library

CLOCK = "MLPerf: from run_start (after untimed initialization) to the first evaluation at the quality target"


def training_time(
    result: RunResult,
    convergence: ConvergenceSpec,
    optimizer: str | None,
    eval_samples_per_s: float,
    epochs: float | None = None,
) -> TimeToTrainRecord:
    """The time to train of a training step ``result`` (see the module docstring).

    ``epochs`` (None: the convergence data's) is the run's own schedule, in epochs of the data set.
    """
    if result.mode != "train":
        raise UsageError(result.target, "--time-to-train", "needs --mode train")
    if convergence.seq_len is not None and result.seq_len != convergence.seq_len:
        raise UsageError(
            convergence.name,
            "--seq-len",
            f"the convergence data hold at sequence length {convergence.seq_len}, not {result.seq_len}: "
            f"run with --seq-len {convergence.seq_len}",
        )
    name = optimizer or convergence.default_optimizer
    global_batch = result.global_batch
    target, basis = convergence.to_target(name, global_batch)
    if epochs is not None:
        target, basis = _schedule(convergence, epochs, target)
    train_samples = convergence.dataset.train_samples
    if convergence.unit is Unit.EPOCHS:
        assert train_samples is not None  # checked on load
        samples = target * train_samples
    else:
        samples = target
    steps = math.ceil(samples / global_batch)
    interval = convergence.evaluation_interval_samples(global_batch)
    evaluations = math.ceil(samples / interval)
    eval_each = convergence.dataset.eval_samples / eval_samples_per_s
    train_s = steps * result.step_time_s
    initialization_s = 0.0
    return TimeToTrainRecord(
        time_to_train_s=initialization_s + train_s + evaluations * eval_each,
        convergence=convergence.name,
        quality_target=convergence.quality_target,
        optimizer=name,
        global_batch=global_batch,
        epochs=None if train_samples is None else samples / train_samples,
        samples=samples,
        convergence_basis=basis,
        steps=steps,
        step_time_s=result.step_time_s,
        train_s=train_s,
        evaluations=evaluations,
        eval_samples=convergence.dataset.eval_samples,
        eval_each_s=eval_each,
        eval_s=evaluations * eval_each,
        initialization_s=initialization_s,
        clock=CLOCK,
    )


def _schedule(convergence: ConvergenceSpec, epochs: float, reference: float) -> tuple[float, str]:
    """A run's own schedule of ``epochs`` and its basis, naming what the reference points give."""
    if convergence.unit is not Unit.EPOCHS:
        raise UsageError(
            convergence.name, "--epochs", "the convergence data count training samples, not epochs: leave --epochs out"
        )
    if not (math.isfinite(epochs) and epochs > 0):
        raise UsageError(convergence.name, "--epochs", f"must be a number of epochs above 0, got {epochs}")
    return epochs, f"the run's schedule; the reference points give {reference:.1f}"


def add_input(result: RunResult, workload: str, decode: Decode, library: Library) -> RunResult:
    """``result`` with its step fed by the input pipeline of its system (see :mod:`archsim.input_pipeline`)."""
    if result.system is None:
        raise UsageError(result.target, "--input-decode", "needs a system with an input_pipeline (e.g. dgx1)")
    system = library.system(result.system)
    rates = stage_rates(system, library, library.convergence(workload), decode, result.nodes)
    return with_input(result, rates, decode, library.chip(system.chip))


def simulate_training(
    target: str,
    workload: str,
    *,
    mode: str = "train",
    time_to_train: bool = True,
    optimizer: str | None = None,
    input_decode: str | Decode | None = None,
    epochs: float | None = None,
    library: Library | None = None,
    search_path: tuple[str, ...] | list[str] = (),
    **options: Any,
) -> RunResult:
    """Simulate a step as :func:`archsim.simulate` does, then model its input and its time to train.

    ``options`` are :func:`archsim.simulate`'s (``batch``, ``precision``, ``seq_len``,
    ``nodes``, ``microbatches``, ``fusion``, ``recompute``, ...). ``input_decode`` (``host`` or
    ``device``; None: input not modelled, as with synthetic data) feeds the step from the system's
    input pipeline. ``time_to_train`` (training only) adds ``result.time_to_train`` using the
    workload's convergence data and ``optimizer`` (None: the data's default, LARS or LAMB), or the
    run's own schedule of ``epochs`` epochs (None: the convergence data's epochs).
    """
    library = library or Library(search_path)
    if time_to_train and mode != "train":
        raise UsageError(target, "--time-to-train", "needs --mode train")
    if time_to_train:
        library.convergence(workload)  # an unknown workload is refused before the run
    result = simulate(target, workload, mode, library=library, **options)
    return extend(result, target, workload, library, options, time_to_train, optimizer, input_decode, epochs)


def extend(
    result: RunResult,
    target: str,
    workload: str,
    library: Library,
    options: dict[str, Any],
    time_to_train: bool,
    optimizer: str | None,
    input_decode: str | Decode | None,
    epochs: float | None = None,
) -> RunResult:
    """``result`` (a step simulated with ``options``) fed by its input pipeline and with its time to train.

    The evaluation runs as an inference step on the same target, at the training micro-batch;
    ``epochs`` is the run's own schedule (None: the convergence data's).
    """
    decode = None if input_decode is None else _decode(input_decode)
    if time_to_train and result.mode != "train":
        raise UsageError(result.target, "--time-to-train", "needs --mode train")
    if epochs is not None and not time_to_train:
        raise UsageError(result.target, "--epochs", "only applies with --time-to-train")
    convergence = library.convergence(workload) if time_to_train else None
    if decode is not None:
        result = add_input(result, workload, decode, library)
    if convergence is None:
        return result
    pipelined = result.pipeline_stages > 1
    eval_options = {
        **options,
        "batch": result.batch if pipelined else result.batch // result.microbatches,
        "microbatches": result.microbatches if pipelined else None,
        "recompute": False,
        "padding": None,  # a training setting: the evaluation computes what its stack does at inference
        "bn_group": 1,  # so is a batch-norm group: inference normalizes with running statistics
    }
    evaluation = simulate(target, workload, "infer", library=library, **eval_options)
    if decode is not None:
        evaluation = add_input(evaluation, workload, decode, library)
    record = training_time(result, convergence, optimizer, evaluation.throughput, epochs)
    return replace(result, time_to_train=record)


def _decode(value: str | Decode) -> Decode:
    try:
        return Decode(value)
    except ValueError:
        raise UsageError("", "--input-decode", f"{value!r} is not one of host, device") from None
