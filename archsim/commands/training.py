"""The training options of ``archsim run`` and ``archsim report run``.

``--input-decode``, ``--time-to-train``, ``--optimizer`` and ``--epochs``:
:func:`add_arguments` registers them, :func:`extend_args` applies them to the simulated step
(:func:`archsim.time_to_train.extend`) and :func:`summary_lines` prints what they add to the summary.
"""

from __future__ import annotations

import argparse

from archsim.errors import UsageError
from archsim.results.records import RunResult
from archsim.spec.library import Library
from archsim.units import format_time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the training options on ``archsim run``."""
    group = parser.add_argument_group("time to train and input pipeline (see README: Time to train)")
    group.add_argument(
        "--input-decode",
        choices=["host", "device"],
        default=None,
        help="feed the step from the system's input pipeline, decoding on the host CPUs or on the chips "
        "(default: input not modelled, as with synthetic data)",
    )
    group.add_argument(
        "--time-to-train",
        action="store_true",
        help="add the time to reach the workload's MLPerf quality target (training; convergence/ data)",
    )
    group.add_argument(
        "--optimizer", default=None, help="optimizer of the convergence data (default: the data's, lars or lamb)"
    )
    group.add_argument(
        "--epochs",
        type=float,
        default=None,
        help="the run's own schedule in epochs, trained in full (default: the convergence data's epochs)",
    )


def check_args(args: argparse.Namespace) -> None:
    """Refuse option combinations that cannot work, before anything is simulated."""
    if args.time_to_train and args.mode != "train":
        raise UsageError(args.target, "--time-to-train", "needs --mode train")
    if args.optimizer is not None and not args.time_to_train:
        raise UsageError(args.target, "--optimizer", "only applies with --time-to-train")
    if args.epochs is not None and not args.time_to_train:
        raise UsageError(args.target, "--epochs", "only applies with --time-to-train")


def extend_args(result: RunResult, args: argparse.Namespace) -> RunResult:
    """``result`` with what the training options ask for (unchanged when none is given).

    ``args`` are ``archsim run``'s or ``archsim report run``'s (which has no collective options: the
    defaults apply).
    """
    check_args(args)
    if args.input_decode is None and not args.time_to_train:
        return result
    from archsim.time_to_train import extend  # convergence data and input pipelines: only for these options

    collective = getattr(args, "collective", "auto")
    options = {
        "batch": args.batch,
        "precision": args.precision,
        "seq_len": args.seq_len,
        "nodes": args.nodes,
        "pipeline_stages": args.pipeline_stages,
        "microbatches": args.microbatches,
        "schedule": getattr(args, "schedule", "1f1b"),
        "collective": None if collective == "auto" else collective,
        "bucket_bytes": getattr(args, "bucket_size", None),
        "overlap": not getattr(args, "no_overlap", False),
        "fusion": args.fusion,
        "recompute": args.recompute,
        "padding": args.padding,
        "streaming_memory": args.streaming_memory,
        "tensor_parallel": getattr(args, "tensor_parallel", 1),
        "sequence_parallel": getattr(args, "sequence_parallel", False),
        "interleave": getattr(args, "interleave", 1),
        "expert_parallel": getattr(args, "expert_parallel", 1),
        "bn_group": getattr(args, "bn_group", 1),
    }
    library = Library(args.lib)
    return extend(
        result,
        args.target,
        args.workload,
        library,
        options,
        args.time_to_train,
        args.optimizer,
        args.input_decode,
        args.epochs,
    )


def summary_lines(result: RunResult) -> list[str]:
    """The input-pipeline and time-to-train lines of the human summary (none when not modelled)."""
    lines = []
    pipe = result.input_pipeline
    if pipe is not None:
        stages = ", ".join(f"{stage} {rate:.0f}/s" for stage, rate in pipe.stage_samples_per_s.items())
        lines.append(
            f"input         {pipe.decode} decoding, {pipe.samples_per_s:.1f} samples/s (limit {pipe.limit}; {stages}); "
            f"step bound: {pipe.step_bound}"
            + (f", waits {format_time(pipe.wait_s)} per step" if pipe.wait_s > 0 else "")
        )
    ttt = result.time_to_train
    if ttt is not None:
        amount = f"{ttt.epochs:.1f} epochs" if ttt.epochs is not None else f"{ttt.samples:,.0f} samples"
        lines.append(
            f"time to train {ttt.time_to_train_s / 60:.2f} min ({ttt.time_to_train_s:.1f} s): {amount} "
            f"({ttt.convergence_basis}, {ttt.optimizer}, global batch {ttt.global_batch}) to {ttt.quality_target}"
        )
        lines.append(
            f"  training    {ttt.steps} steps x {format_time(ttt.step_time_s)} = {ttt.train_s:.1f} s; "
            f"evaluation {ttt.evaluations} x {format_time(ttt.eval_each_s)} = {ttt.eval_s:.1f} s "
            f"({ttt.eval_samples} samples each); initialization on the clock {ttt.initialization_s:.1f} s"
        )
    return lines
