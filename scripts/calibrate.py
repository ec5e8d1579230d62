"""Fit the efficiency parameters of each family to validation/published.yaml and write them back.

Usage: python scripts/calibrate.py [--family tensorcore ...] [--parameter NAME ...] [--folds 5] [--dry-run]
       python scripts/calibrate.py --software NAME --parameter NAME [...] [--folds 5] [--dry-run]
       python scripts/calibrate.py --uncertainty [--family NAME ...] [--folds 5]

With --uncertainty, cross-validates every family's fitted parameters together (:data:`PLAN`: the
family's and its stacks' parameters, refitted without each fold, leave-one-out for small families) and
writes validation/uncertainty.yaml: the in-sample and held-out errors per family, software and level,
and what the rows of each family cover. Every result's ``uncertainty`` and ``extrapolation`` are read
from that file; --family refreshes only those families' entries.

With --software, fits that software stack's parameters (per_op, framework, host, per_step, or
compute.PRECISION) to the rows that run with the stack, and writes them into software/NAME.yaml.

For each family that has rows in the table, prints the parameters before and after, the MAPE per
group before and after, and the k-fold cross-validated MAPE (each row predicted by parameters
fitted without it), then writes the fitted values into chips/families/FAMILY.yaml (unless
--dry-run). Only the rows of the table are used: calibration.csv, nothing else.
"""

from __future__ import annotations

import argparse
import sys

from archsim.spec.library import Library
from archsim.spec.registry import family_names
from archsim.spec.validation import Group
from archsim.validation.calibrate import Fit, fit_family, format_value, write_family
from archsim.validation.calibrate_software import SoftwareFit, fit_software, write_software
from archsim.validation.crossval import Plan, grouped, held_out_errors
from archsim.validation.run import calibration_table
from archsim.validation.uncertainty_table import coverage, write_table

PLAN = {
    "tensorcore": Plan("tensorcore", ("compute", "memory_bandwidth", "wave_overhead", "data_gradient"), {}),
    "ipu": Plan("ipu", ("compute",), {}),
    "cube": Plan("cube", ("compute",), {}),
    "systolic": Plan("systolic", ("compute",), {"tpu-xla": ("per_step",)}),
}
"""What the calibration fits per family, as the README states it. The tensor-core stacks' costs
(cublas, mxnet, pytorch, tensorflow: 8 parameters fitted to their own rows) are held at their fitted
values in its cross-validation, which only refits the family's four: refitting all twelve per fold
takes hours on two cores, so its held-out errors are somewhat optimistic for the stacks' rows."""


def percent(value: float | None) -> str:
    return "   n/a" if value is None else f"{100 * value:5.1f}%"


def show(fit: Fit) -> None:
    print(f"\n== {fit.family}: {fit.rows} rows, {fit.evaluations} evaluations")
    print(f"{'parameter':<18} {'before':>12} {'after':>12}")
    for name in fit.names:
        print(
            f"{name:<18} {format_value(name, getattr(fit.before, name)):>12} "
            f"{format_value(name, getattr(fit.after, name)):>12}"
        )
    print(f"\n{'MAPE':<18} {'before':>8} {'after':>8} {'cross-val':>10}")
    for group in [*Group, None]:
        label = group.value if group else "overall"
        before, after = fit.report_before.mape(group), fit.report_after.mape(group)
        if before is None:
            continue
        print(f"{label:<18} {percent(before):>8} {percent(after):>8} {percent(fit.cross_validated[label]):>10}")


def show_software(fit: SoftwareFit) -> None:
    print(f"\n== software {fit.software}: {fit.rows} rows, {fit.evaluations} evaluations")
    print(f"{'parameter':<18} {'before':>12} {'after':>12}")
    for name in fit.names:
        field = "op_overhead" if not name.startswith("compute.") else "compute"
        print(f"{name:<18} {format_value(field, fit.before[name]):>12} {format_value(field, fit.after[name]):>12}")
    print(f"\n{'MAPE':<18} {'before':>8} {'after':>8} {'cross-val':>10}")
    for group in [*Group, None]:
        label = group.value if group else "overall"
        before, after = fit.report_before.mape(group), fit.report_after.mape(group)
        if before is not None:
            print(f"{label:<18} {percent(before):>8} {percent(after):>8} {percent(fit.cross_validated[label]):>10}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", action="append", choices=list(family_names()))
    parser.add_argument(
        "--parameter",
        action="append",
        help="fit only this efficiency field (repeatable; default: all the family needs, which takes "
        "at least as many rows)",
    )
    parser.add_argument("--table", default="published")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--max-evaluations", type=int, default=400)
    parser.add_argument("--dry-run", action="store_true", help="print the fit, do not write YAML")
    parser.add_argument("--software", help="fit this software stack's --parameter values instead of a family's")
    parser.add_argument(
        "--uncertainty", action="store_true", help="cross-validate every family and write validation/uncertainty.yaml"
    )
    args = parser.parse_args()
    library = Library(use_env=False)
    try:
        table = calibration_table(library, args.table)
    except ValueError as error:
        print(f"calibrate: {error}", file=sys.stderr)
        return 2
    if args.uncertainty:
        return uncertainty(library, args)
    if args.software:
        try:
            sfit = fit_software(
                library,
                args.software,
                args.parameter or [],
                args.table,
                args.folds,
                args.max_evaluations,
                progress=lambda m: print(m, file=sys.stderr, flush=True),
            )
        except ValueError as error:
            print(f"calibrate: {args.software}: {error}", file=sys.stderr)
            return 2
        show_software(sfit)
        if not args.dry_run:
            path = library.find(["software"], args.software).path
            write_software(path, sfit, args.table)
            print(f"wrote {path}")
        return 0
    present = {library.chip(_chip_of(library, r.target)).family for r in table.rows}
    families = list(args.family) if args.family else sorted(present)
    for family in families:
        try:
            fit = fit_family(
                library,
                family,
                args.table,
                args.folds,
                args.max_evaluations,
                progress=lambda m: print(m, file=sys.stderr, flush=True),
                parameters=args.parameter,
            )
        except ValueError as error:
            print(f"calibrate: {family}: {error}", file=sys.stderr)
            return 2
        show(fit)
        if not args.dry_run:
            path = library.find(["family"], family).path
            write_family(path, fit, args.table)
            print(f"wrote {path}")
    return 0


def uncertainty(library: Library, args: argparse.Namespace) -> int:
    """Cross-validate the families asked for (all by default) and rewrite validation/uncertainty.yaml."""
    families = list(args.family) if args.family else list(PLAN)
    entries = []
    for family in families:
        results = held_out_errors(
            library,
            PLAN[family],
            args.table,
            args.folds,
            args.max_evaluations,
            progress=lambda m: print(m, file=sys.stderr, flush=True),
        )
        for entry in grouped(results):
            print(
                f"{entry['family']:<11} {entry['software']:<16} {entry['level']:<9} {entry['rows']:>3} rows  "
                f"in-sample {100 * float(entry['in_sample']):5.1f}%  cross-validated "  # type: ignore[arg-type]
                f"{100 * float(entry['cross_validated']):5.1f}%"  # type: ignore[arg-type]
            )
        entries.append((family, grouped(results)))
    path = write_table(library, args.table, args.folds, entries, coverage(library, args.table))
    print(f"wrote {path}")
    return 0


def _chip_of(library: Library, target: str) -> str:
    """The chip a row's target runs on (a system's chip for a multi-chip row)."""
    if library.find(["chip", "system"], target).kind == "system":
        return library.system(target).chip
    return target


if __name__ == "__main__":
    sys.exit(main())
