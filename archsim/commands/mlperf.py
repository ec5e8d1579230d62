"""``archsim mlperf``: published MLPerf Training times to train against archsim's predictions."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from archsim.cli import HELP
from archsim.spec.library import Library
from archsim.validation.mlperf import MlperfReport, run_mlperf


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``archsim mlperf``."""
    parser = sub.add_parser("mlperf", parents=[common], help=HELP["mlperf"])
    parser.add_argument("--table", default="mlperf", help="MLPerf table name or path (default: mlperf)")
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object")
    parser.set_defaults(handler=run)


def table_lines(report: MlperfReport) -> list[str]:
    """One line per result, then the mean absolute error."""
    width = max(len(r.id) for r in report.rows)
    header = (
        f"{'result':<{width}}  {'published':>9} {'predicted':>9} {'error':>7}  {'samples/s':>10} "
        f"{'training':>12} {'eval':>7}"
    )
    lines = [header, "-" * len(header)]
    for r in report.rows:
        amount = f"{r.epochs:.1f} ep" if r.epochs is not None else f"{r.samples / 1e6:.2f} M"
        mark = "" if r.within_tolerance else "  OUTSIDE"
        lines.append(
            f"{r.id:<{width}}  {r.published_minutes:>7.2f} m {r.predicted_minutes:>7.2f} m {100 * r.error:>+6.1f}%  "
            f"{r.throughput:>10.0f} {amount:>7} {r.train_s:>4.0f} s {r.eval_s:>5.1f} s{mark}"
        )
    lines.append("")
    inside = sum(r.within_tolerance for r in report.rows)
    lines.append(
        f"mean |error| {100 * report.mape:.1f}% over {len(report.rows)} results; "
        f"{inside} within {100 * report.tolerance:.0f}%"
    )
    return lines


def run(args: argparse.Namespace) -> int:
    """Run every row; the exit status is non-zero only when a row cannot be run, never for error size."""
    library = Library(args.lib)
    show = None if args.json else (lambda i, n, name: print(f"[{i + 1}/{n}] {name}", file=sys.stderr, flush=True))
    report = run_mlperf(library, args.table, progress=show if sys.stderr.isatty() else None)
    if args.json:
        print(json.dumps(report.to_dict(), indent=1, allow_nan=False))
    else:
        print("\n".join(table_lines(report)))
    return 0
