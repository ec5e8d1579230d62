"""``archsim plan TARGET MODEL --global-batch B``: training layouts that fit, fastest first (:mod:`archsim.plan`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from archsim.cli import HELP, positive_int
from archsim.plan import DEFAULT_MAX_BLOCKS, DEFAULT_MAX_RUNS, PlanReport, plan
from archsim.spec.library import Library
from archsim.units import format_bytes, format_time


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``archsim plan``."""
    parser = sub.add_parser("plan", parents=[common], help=HELP["plan"])
    parser.add_argument("target", help="multi-chip system name, alias or YAML path")
    parser.add_argument("workload", help="decoder language model (workloads/, architecture: decoder)")
    parser.add_argument("--mode", choices=["train"], default="train", help="what to lay out (training)")
    parser.add_argument("--global-batch", type=positive_int, required=True, help="sequences per step, all chips")
    parser.add_argument("--nodes", type=positive_int, default=None, help="copies of the system (scale-out)")
    parser.add_argument("--precision", default=None, help="operand precision (default: the chip's)")
    parser.add_argument("--seq-len", type=positive_int, default=None, help="sequence length (default: the model's)")
    parser.add_argument("--top", type=positive_int, default=5, help="how many layouts to list (5)")
    parser.add_argument(
        "--max-runs",
        type=positive_int,
        default=DEFAULT_MAX_RUNS,
        metavar="N",
        help=f"simulations to run at most, fastest time bound first ({DEFAULT_MAX_RUNS})",
    )
    parser.add_argument(
        "--max-blocks",
        type=positive_int,
        default=DEFAULT_MAX_BLOCKS,
        metavar="N",
        help=f"skip layouts whose pipeline runs more blocks (stages x microbatches x 2; {DEFAULT_MAX_BLOCKS})",
    )
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object")
    parser.set_defaults(handler=run)


def table_lines(report: PlanReport) -> list[str]:
    """The layouts found, fastest first, then what the search covered."""
    lines = [
        f"{report.workload} training on {report.target} x{report.chips}, global batch {report.global_batch}",
        "",
    ]
    if report.best:
        width = max(len(planned.layout.label()) for planned in report.best)
        header = f"{'#':>2}  {'layout':<{width}} {'step':>9} {'tokens/s':>11} {'MFU':>6} {'memory':>10}"
        lines += [header, "-" * len(header)]
        for rank, planned in enumerate(report.best, 1):
            r = planned.result
            tokens = f"{r.tokens_per_s:,.0f}" if r.tokens_per_s is not None else "n/a"
            mfu = getattr(r, "mfu", None)
            mfu_text = f"{100 * mfu:.1f}%" if mfu is not None else "n/a"
            lines.append(
                f"{rank:>2}  {planned.layout.label():<{width}} {format_time(r.step_time_s):>9} {tokens:>11} "
                f"{mfu_text:>6} {format_bytes(r.memory_bytes):>10}"
            )
    else:
        lines.append("no layout fits")
        lines += [f"  {line}" for line in report.refusals]
    lines.append("")
    exact = "exact: no layout left unsimulated can be faster"
    covered = exact if report.exact else "--max-runs or --max-blocks reached: not exhaustive"
    lines.append(
        f"{report.enumerated} layouts tile the system; {report.over_memory_bound} hold more model state than "
        f"the chip's memory; {report.simulated} simulated, {report.refused} refused, {report.too_long} skipped "
        f"as too long to simulate ({covered})"
    )
    return lines


def run(args: argparse.Namespace) -> int:
    """Plan, print the table (or JSON); exit status 0 even when nothing fits (the table says so)."""
    library = Library(args.lib)

    def show(index: int, total: int, layout: Any) -> None:
        print(f"[{index + 1}/{total}] {layout.label()}", file=sys.stderr, flush=True)

    report = plan(
        args.target,
        args.workload,
        args.global_batch,
        library,
        nodes=args.nodes,
        precision=args.precision,
        seq_len=args.seq_len,
        top=args.top,
        max_runs=args.max_runs,
        max_blocks=args.max_blocks,
        progress=show if sys.stderr.isatty() and not args.json else None,
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=1, allow_nan=False))
    else:
        print("\n".join(table_lines(report)))
    return 0
