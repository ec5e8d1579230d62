"""``archsim plot``: figures of one run or of a sweep's results, written as self-contained HTML.

* ``archsim plot breakdown|roofline|timeline TARGET WORKLOAD [run options] --out FILE.html``
* ``archsim plot scatter|pareto|scaling RESULTS --x COLUMN --y COLUMN [...] --out FILE.html``, where
  ``RESULTS`` is a sweep's results folder or its ``results.parquet``.
"""

from __future__ import annotations

import argparse
from typing import Any

from archsim.cli import HELP
from archsim.commands.figure_inputs import (
    add_run_arguments,
    read_results,
    select_workload,
    simulate_run,
    write_output,
)

RUN_KINDS = ("breakdown", "roofline", "timeline")
SWEEP_KINDS = ("scatter", "pareto", "scaling")


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``archsim plot`` and its kinds."""
    parser = sub.add_parser("plot", help=HELP["plot"])
    kinds = parser.add_subparsers(dest="kind", required=True, parser_class=type(parser))
    helps = {
        "breakdown": "time per layer, stacked by bound",
        "roofline": "every op on the chip's roofline",
        "timeline": "Gantt chart of one step",
        "scatter": "one column against another, one marker per row",
        "pareto": "the Pareto front of two columns",
        "scaling": "a column against the number of chips, one line per target",
    }
    for kind in RUN_KINDS:
        run = kinds.add_parser(kind, parents=[common], help=helps[kind])
        add_run_arguments(run)
        run.add_argument("--out", required=True, metavar="FILE.html")
        run.set_defaults(handler=plot_run)
    for kind in SWEEP_KINDS:
        table = kinds.add_parser(kind, parents=[common], help=helps[kind])
        table.add_argument("results", metavar="RESULTS", help="a sweep's results folder or results.parquet")
        table.add_argument("--x", default="num_chips" if kind == "scaling" else None, required=kind != "scaling")
        table.add_argument("--y", default="throughput")
        if kind == "scatter":
            table.add_argument("--color", default=None, metavar="COLUMN")
        if kind == "pareto":
            table.add_argument("--maximize-x", action="store_true", help="a larger x is better (default: smaller)")
            table.add_argument("--minimize-y", action="store_true", help="a smaller y is better (default: larger)")
        if kind == "scaling":
            table.add_argument("--group", default="target", metavar="COLUMN")
        table.add_argument("--workload", default=None, help="keep only this workload's rows")
        table.add_argument("--out", required=True, metavar="FILE.html")
        table.set_defaults(handler=plot_table)


def plot_run(args: argparse.Namespace) -> int:
    """Simulate one run and plot it."""
    from archsim import plots

    result, library, recorded = simulate_run(args)
    if args.kind == "breakdown":
        figure = plots.layer_breakdown(result)
    elif args.kind == "roofline":
        figure = plots.roofline(result, library)
    else:
        figure = plots.timeline(result, recorded.links)
    write_output(plots.write_html, figure, args.out)
    return 0


def plot_table(args: argparse.Namespace) -> int:
    """Plot columns of a sweep's table."""
    from archsim import plots

    table = select_workload(read_results(args.results), args.workload, args.results)
    if args.kind == "scatter":
        figure = plots.sweep_scatter(table, args.x, args.y, color=args.color)
    elif args.kind == "pareto":
        figure = plots.pareto_front(table, args.x, args.y, maximize_x=args.maximize_x, maximize_y=not args.minimize_y)
    else:
        figure = plots.scaling_curves(table, args.x, args.y, group=args.group)
    write_output(plots.write_html, figure, args.out)
    return 0
