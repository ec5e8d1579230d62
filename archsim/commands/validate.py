"""``archsim validate``: predicted against published values for every validation row, with MAPE."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from archsim.spec.library import Library
from archsim.spec.validation import Group, Level
from archsim.validation import ValidationReport, validate


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``archsim validate``."""
    parser = sub.add_parser("validate", parents=[common], help="compare predictions with published results")
    parser.add_argument("--table", default="published", help="validation table name or path (default: published)")
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object")
    parser.add_argument("--plot", metavar="OUT.html", help="write a scatter of predicted vs published")
    parser.set_defaults(handler=run)


def table_lines(report: ValidationReport) -> list[str]:
    """The per-row table, then MAPE per group and overall (also without rows marked known outside)."""
    width = max(len(r.row.id) for r in report.rows)
    header = f"{'row':<{width}}  {'group':<11} {'published':>11} {'predicted':>11} {'unit':<5} {'error':>8}  tol"
    lines = [header, "-" * len(header)]
    for r in report.rows:
        mark = "" if r.within_tolerance else ("  OUTSIDE (known)" if r.row.known_outside else "  OUTSIDE")
        lines.append(
            f"{r.row.id:<{width}}  {r.row.group.value:<11} {r.row.published:>11.4g} {r.predicted:>11.4g} "
            f"{r.row.unit:<5} {100 * r.error:>+7.1f}%  {100 * r.tolerance:.0f}%{mark}"
        )
    lines.append("")
    for group in [*Group, Level.SYSTEM, None]:  # the operator level is the operator group
        mape = report.mape(group)
        if mape is not None:
            rows = [r for r in report.rows if group is None or group in (r.row.group, r.row.group.level)]
            label = "overall" if group is None else f"{group.value} level" if isinstance(group, Level) else group.value
            in_scope = report.mape(group, in_scope=True)
            scope = "n/a" if in_scope is None else f"{100 * in_scope:.1f}%"
            known = sum(1 for r in rows if r.row.known_outside)
            lines.append(
                f"MAPE {label:<14} {100 * mape:5.1f}%  ({len(rows)} rows; {scope} without the {known} known outside)"
            )
    return lines


def run(args: argparse.Namespace) -> int:
    """Run every row; exit status is non-zero only when a row cannot be run, never for error size."""
    library = Library(args.lib)
    show = None if args.json else (lambda i, n, name: print(f"[{i + 1}/{n}] {name}", file=sys.stderr, flush=True))
    report = validate(library, args.table, progress=show if sys.stderr.isatty() else None)
    if args.plot:
        from archsim.results.figures import validation_scatter, write_html

        write_html(validation_scatter(report), args.plot, "--plot")
    if args.json:
        print(json.dumps(report.to_dict(), indent=1, allow_nan=False))
    else:
        print("\n".join(table_lines(report)))
    return 0
