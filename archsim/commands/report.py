"""``archsim report``: one self-contained HTML page of a run or of a sweep's results.

* ``archsim report run TARGET WORKLOAD [run options] --out FILE.html``: the run's summary, per-layer
  breakdown, roofline and timeline;
* ``archsim report compare A B WORKLOAD [compare options] --out FILE.html``: the factors of B's speedup
  over A (:mod:`archsim.compare`) as a summary and a waterfall;
* ``archsim report sweep RESULTS --out FILE.html [--x COLUMN] [--y COLUMN] [--workload W]``, where
  ``RESULTS`` is a sweep's results folder or its ``results.parquet``: the sweep's summary, best row
  per workload, refused runs, scatter, Pareto fronts and (when the chip count varies) scaling curves.

Every input is checked before the page is built, and the page is written atomically, so a bad
argument leaves no file behind.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from archsim.cli import HELP
from archsim.commands import training
from archsim.commands.compare import add_compare_arguments, compare_args
from archsim.commands.figure_inputs import (
    add_run_arguments,
    read_results,
    select_workload,
    simulate_run,
    write_output,
)


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``archsim report run`` and ``archsim report sweep``."""
    parser = sub.add_parser("report", help=HELP["report"])
    kinds = parser.add_subparsers(dest="kind", required=True, parser_class=type(parser))
    run = kinds.add_parser("run", parents=[common], help="summary, breakdown, roofline and timeline of one run")
    add_run_arguments(run)
    training.add_arguments(run)
    run.add_argument("--out", required=True, metavar="FILE.html")
    run.set_defaults(handler=report_run)
    sweep = kinds.add_parser("sweep", parents=[common], help="summary, best rows and figures of a sweep's results")
    sweep.add_argument("results", metavar="RESULTS", help="a sweep's results folder or results.parquet")
    sweep.add_argument("--x", default="peak_flops", metavar="COLUMN", help="x of the figures (default peak_flops)")
    sweep.add_argument("--y", default="throughput", metavar="COLUMN", help="y of the figures (default throughput)")
    sweep.add_argument("--maximize-x", action="store_true", help="a larger x is better (default: smaller)")
    sweep.add_argument("--minimize-y", action="store_true", help="a smaller y is better (default: larger)")
    sweep.add_argument("--workload", default=None, help="keep only this workload's rows")
    sweep.add_argument("--out", required=True, metavar="FILE.html")
    sweep.set_defaults(handler=report_sweep)
    compare = kinds.add_parser(
        "compare", parents=[common], help="the factors of B's speedup over A as a summary and a waterfall"
    )
    add_compare_arguments(compare)
    compare.add_argument("--out", required=True, metavar="FILE.html")
    compare.set_defaults(handler=report_compare)


def report_run(args: argparse.Namespace) -> int:
    """Simulate one run and write its report."""
    from archsim import plots

    training.check_args(args)
    result, library, timeline = simulate_run(args)
    result = training.extend_args(result, args)
    write_output(plots.write_report, plots.run_report(result, library, links=timeline.links), args.out)
    return 0


def report_compare(args: argparse.Namespace) -> int:
    """Compare two targets and write the comparison's report."""
    from archsim.results.compare_report import comparison_report
    from archsim.results.report import write_report

    write_output(write_report, comparison_report(compare_args(args)), args.out)
    return 0


def report_sweep(args: argparse.Namespace) -> int:
    """Write the report of a sweep's table."""
    from archsim import plots
    from archsim.results.sweep_report import plotted_rows

    table = select_workload(read_results(args.results), args.workload, args.results)
    plotted_rows(table, args.x, args.y, ("--x", "--y"), args.results)
    folder = Path(args.results).resolve()
    name = folder.name if folder.is_dir() else folder.parent.name
    title = f"archsim sweep: {name}" + (f" ({args.workload})" if args.workload is not None else "")
    page = plots.sweep_report(
        table, args.x, args.y, title=title, maximize_x=args.maximize_x, maximize_y=not args.minimize_y
    )
    write_output(plots.write_report, page, args.out)
    return 0
