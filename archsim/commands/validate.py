"""``archsim validate``: predicted against published values for every validation row, with MAPE."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from archsim.cli import HELP
from archsim.spec.library import Library
from archsim.spec.uncertainty import ANY
from archsim.spec.validation import Group, Level, Metric
from archsim.uncertainty import error_table
from archsim.validation import ValidationReport, validate


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``archsim validate``."""
    parser = sub.add_parser("validate", parents=[common], help=HELP["validate"])
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


def group_errors(report: ValidationReport, library: Library) -> list[dict[str, object]]:
    """MAPE per family, software and level: in-sample from this run, cross-validated from the error table.

    The cross-validated figure is the one ``scripts/calibrate.py --uncertainty`` measured (None where
    it measured none: the collective rows, and any table but the one it was run on). A held-out table's
    errors are ``held_out`` (nothing was fitted to its rows), its ``in_sample`` None.
    """
    table = error_table(library)
    stored: dict[tuple[str, str, str], float] = {}
    if table is not None and table.table == report.name:
        stored = {(e.family, e.software, e.level): float(e.cross_validated) for e in table.errors}
    groups: dict[tuple[str, str, str], list[float]] = {}
    for r in report.rows:
        level = r.row.group.level.value
        keys = [(r.family, r.software, level)]
        if r.row.metric is not Metric.BUSBW:  # a collective call depends on no family parameter
            keys += [(r.family, ANY, level), (r.family, ANY, ANY)]
        for key in keys:
            groups.setdefault(key, []).append(abs(r.error))
    return [
        {
            "family": family,
            "software": software,
            "level": level,
            "rows": len(errors),
            "in_sample": None if report.held_out else sum(errors) / len(errors),
            "held_out": sum(errors) / len(errors) if report.held_out else None,
            "cross_validated": stored.get((family, software, level)),
        }
        for (family, software, level), errors in sorted(groups.items())
    ]


def group_lines(groups: list[dict[str, object]], held_out: bool = False) -> list[str]:
    """The per family, software and level table of :func:`group_errors` (a held-out table's: one error column)."""
    head = f"{'family':<11} {'software':<16} {'level':<9} {'rows':>4}  "
    header = head + (f"{'held-out error':>14}" if held_out else f"{'in-sample':>9}  {'cross-validated':>15}")
    lines = [header, "-" * len(header)]
    for g in groups:
        row = f"{g['family']:<11} {g['software']:<16} {g['level']:<9} {g['rows']:>4}  "
        if held_out:
            lines.append(row + f"{100 * float(g['held_out']):>13.1f}%")  # type: ignore[arg-type]
            continue
        held = g["cross_validated"]
        held_text = "n/a" if held is None else f"{100 * float(held):.1f}%"  # type: ignore[arg-type]
        lines.append(row + f"{100 * float(g['in_sample']):>8.1f}%  {held_text:>15}")  # type: ignore[arg-type]
    return lines


def run(args: argparse.Namespace) -> int:
    """Run every row; exit status is non-zero only when a row cannot be run, never for error size."""
    library = Library(args.lib)
    show = None if args.json else (lambda i, n, name: print(f"[{i + 1}/{n}] {name}", file=sys.stderr, flush=True))
    report = validate(library, args.table, progress=show if sys.stderr.isatty() else None)
    if args.plot:
        from archsim.results.figures import validation_scatter, write_html

        write_html(validation_scatter(report), args.plot, "--plot")
    groups = group_errors(report, library)
    if args.json:
        print(json.dumps(report.to_dict() | {"groups": groups}, indent=1, allow_nan=False))
    else:
        print("\n".join([*table_lines(report), "", *group_lines(groups, report.held_out)]))
    return 0
