"""The multi-chip options of ``archsim run`` (systems, data and pipeline parallelism, timelines).

Kept apart from :mod:`archsim.commands.run` so that ``run`` only wires them in: :func:`add_arguments`
registers the options, :func:`simulate_args` runs what they ask for (writing ``--timeline`` before
anything is printed, so a failed write leaves standard output empty; :func:`record_args` does it for
``plot`` and ``report``, which always record the timeline) and :func:`summary_lines` prints
the multi-chip part of the human summary.
"""

from __future__ import annotations

import argparse
from typing import Any

from archsim.cli import positive_int
from archsim.errors import UnitError
from archsim.results.records import RunResult
from archsim.results.timeline import Timeline, write_timeline
from archsim.run.request import RunRequest
from archsim.run.runner import run
from archsim.spec.library import Library
from archsim.units import format_bytes, format_time, parse_bytes


def byte_size(text: str) -> int:
    """Argument type of sizes with a unit (``--bucket-size 25MiB``)."""
    try:
        return parse_bytes(text)
    except UnitError as err:
        raise argparse.ArgumentTypeError(err.problem) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the multi-chip options on ``archsim run``."""
    group = parser.add_argument_group("multi-chip systems (TARGET is a system, e.g. dgx1, ipu-pod16, tpu-v3-pod)")
    group.add_argument(
        "--nodes", type=positive_int, default=None, help="copies of the system joined by its scale-out fabric"
    )
    group.add_argument(
        "--pipeline-stages", type=positive_int, default=1, metavar="P", help="chips per pipeline (default 1)"
    )
    group.add_argument(
        "--microbatches", type=positive_int, default=None, metavar="M", help="microbatches per step (default 4 x P)"
    )
    group.add_argument("--schedule", choices=["1f1b", "gpipe"], default="1f1b", help="pipeline schedule")
    group.add_argument(
        "--collective",
        choices=["auto", "ring", "tree", "hierarchical", "torus"],
        default="auto",
        help="all-reduce algorithm (default: the system's)",
    )
    group.add_argument(
        "--bucket-size", type=byte_size, default=None, metavar="SIZE", help="gradient bucket (default 25MiB)"
    )
    group.add_argument(
        "--no-overlap", action="store_true", help="all-reduce gradients after the backward pass, not during it"
    )
    group.add_argument(
        "--zero",
        type=int,
        choices=[0, 1, 2, 3],
        default=0,
        metavar="STAGE",
        help="ZeRO stage of a data-parallel training run: 1 shards the optimizer state (Megatron's distributed "
        "optimizer), 2 also gradients, 3 also weights (default 0: none)",
    )
    group.add_argument(
        "--timeline", default=None, metavar="FILE", help="write a Chrome/Perfetto trace-event JSON of the step"
    )
    group.add_argument(
        "--tensor-parallel",
        type=positive_int,
        default=1,
        metavar="T",
        help="chips that split each layer of a decoder model (Megatron-LM; default 1)",
    )
    group.add_argument(
        "--sequence-parallel",
        action="store_true",
        help="with --tensor-parallel: norms and residual adds on 1/T of the tokens, reduce-scatter + all-gather",
    )
    group.add_argument(
        "--expert-parallel",
        type=positive_int,
        default=1,
        metavar="E",
        help="chips of the data-parallel group that share a mixture of experts' experts, with all-to-alls "
        "(DeepSpeed-MoE; default 1)",
    )
    group.add_argument(
        "--bn-group",
        type=positive_int,
        default=1,
        metavar="G",
        help="consecutive chips that share their batch-norm statistics in training, with an all-reduce per "
        "batch-norm forward and backward (synchronized batch norm; default 1)",
    )
    group.add_argument(
        "--interleave",
        type=positive_int,
        default=1,
        metavar="V",
        help="model chunks per pipeline stage: interleaved 1F1B (default 1)",
    )


def request_options(args: argparse.Namespace) -> dict[str, Any]:
    """The run options ``archsim run`` and ``archsim export chakra`` parsed, as :meth:`RunRequest.of` takes them."""
    return {
        "mode": args.mode,
        "batch": args.batch,
        "precision": args.precision,
        "seq_len": args.seq_len,
        "prompt_len": args.prompt_len,
        "gen_len": args.gen_len,
        "nodes": args.nodes,
        "pipeline_stages": args.pipeline_stages,
        "microbatches": args.microbatches,
        "schedule": args.schedule,
        "collective": args.collective,
        "bucket_bytes": args.bucket_size,
        "overlap": not args.no_overlap,
        "software": args.software,
        "fusion": args.fusion,
        "recompute": args.recompute,
        "padding": args.padding,
        "streaming_memory": args.streaming_memory,
        "tensor_parallel": args.tensor_parallel,
        "sequence_parallel": args.sequence_parallel,
        "interleave": args.interleave,
        "zero": args.zero,
        "expert_parallel": args.expert_parallel,
        "bn_group": args.bn_group,
    }


def simulate_args(args: argparse.Namespace) -> RunResult:
    """Run ``archsim run ARGS`` and write its timeline if asked; returns the result to print."""
    if args.timeline is None:
        return run(RunRequest.of(args.target, args.workload, **request_options(args)), Library(args.lib))
    return record_args(args, Library(args.lib))[0]


def record_args(args: argparse.Namespace, library: Library) -> tuple[RunResult, Timeline]:
    """Run what the options ask for with its timeline recorded (at the run's clock); write it to ``--timeline``."""
    from archsim.run.observers import TimelineRecorder  # only a run that records a timeline needs one

    recorder = TimelineRecorder()
    result = run(RunRequest.of(args.target, args.workload, **request_options(args)), library, observers=[recorder])
    timeline = recorder.timeline.at_clock(result.clock_scale)
    if args.timeline is not None:
        write_timeline(timeline, args.timeline)
    return result, timeline


def scaling_line(result: RunResult) -> str:
    """How the system's throughput compares with its chips' running alone (or why it cannot be said)."""
    if result.scaling_efficiency is None or result.single_chip_throughput is None:
        return f"scaling       n/a: {result.scaling_note}"
    return (
        f"scaling       {100 * result.scaling_efficiency:.1f}% of {result.num_chips} x one chip "
        f"({result.single_chip_throughput:.1f} {result.throughput_unit} alone)"
    )


def gradient_collectives(result: RunResult) -> str:
    """What the step's gradients go through: an all-reduce, or ZeRO's reduce-scatter and all-gathers."""
    if result.zero == 0:
        return "all-reduce"
    return f"reduce-scatter and all-gather, ZeRO stage {result.zero}"


def summary_lines(result: RunResult) -> list[str]:
    """The multi-chip lines of the human summary (none for a single chip)."""
    if result.system is None:
        return []
    lines = [
        f"system        {result.system}: {result.num_chips} chips, {result.nodes} node(s), data parallel "
        f"{result.data_parallel} x pipeline {result.pipeline_stages}, global batch {result.global_batch}",
        scaling_line(result),
        f"communication {format_time(result.comm_s)} in flight, {format_time(result.exposed_comm_s)} exposed"
        + (f" ({result.collective} {gradient_collectives(result)})" if result.collective else ""),
    ]
    if result.tensor_parallel > 1:
        lines.append(
            f"tensor par.   {result.tensor_parallel} chips per layer"
            + (", sequence parallel" if result.sequence_parallel else "")
        )
    if result.expert_parallel > 1:
        lines.append(f"expert par.   {result.expert_parallel} chips share the experts (all-to-all)")
    if result.bn_group > 1:
        lines.append(f"batch norm    {result.bn_group} chips share its statistics (an all-reduce per batch-norm)")
    if result.pipeline_stages > 1:
        lines.append(
            f"pipeline      {result.schedule}"
            + (f" interleaved x{result.interleave}" if result.interleave > 1 else "")
            + f", {result.microbatches} microbatches, bubble "
            f"{format_time(result.bubble_s)} per stage ({100 * result.bubble_fraction:.1f}% of the pipeline)"
        )
    elif result.microbatches > 1:
        lines.append(f"accumulation  {result.microbatches} microbatches of {result.batch // result.microbatches}")
    for link in result.links:
        lines.append(
            f"  link {link.tier:<10} {link.link:<10} {link.direction:<3} {format_bytes(link.bytes):>10} per link, "
            f"utilization {100 * link.utilization:.2f}% (max {100 * link.max_utilization:.2f}%)"
        )
    return lines
