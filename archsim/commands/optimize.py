"""``archsim optimize``: search a sweep's axes for the best designs with Optuna (resumable)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from archsim.cli import HELP, positive_int

TOP = 10
"""Best designs printed and written to ``best.json``."""


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``archsim optimize``."""
    parser = sub.add_parser("optimize", parents=[common], help=HELP["optimize"])
    parser.add_argument("spec", metavar="SPEC", help="sweep description whose axes span the space")
    parser.add_argument(
        "--objective",
        action="append",
        required=True,
        metavar="COLUMN[:max|:min]",
        help="result column to optimize (throughput_per_mm2, throughput_per_watt, ...); repeat for a Pareto front",
    )
    direction = parser.add_mutually_exclusive_group()
    direction.add_argument("--maximize", dest="maximize", action="store_true", default=True, help="(default)")
    direction.add_argument("--minimize", dest="maximize", action="store_false", help="objectives without :max/:min")
    parser.add_argument(
        "--constraint", action="append", default=[], metavar="EXPR", help='e.g. "area <= 600 mm^2" (repeatable)'
    )
    parser.add_argument("--trials", type=positive_int, default=200, metavar="N", help="trials in all (default 200)")
    parser.add_argument("--sampler", choices=["random", "tpe", "nsga2"], default="tpe", help="Optuna sampler")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="sampler seed (default 0)")
    parser.add_argument(
        "--batch", type=positive_int, default=50, metavar="N", help="trials asked and priced together (default 50)"
    )
    parser.add_argument(
        "--jobs", type=positive_int, default=None, metavar="N", help="worker processes (default: all cores)"
    )
    parser.add_argument("--out", metavar="DIR", required=True, help="search folder (study, rows, best.json)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on standard error")
    parser.set_defaults(handler=run)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def run(args: argparse.Namespace) -> int:
    """Run (or continue) the search; print the best designs and write ``best.json``."""
    from archsim.outfile import write_file
    from archsim.sweep.optimize import optimize

    found = optimize(
        args.spec,
        args.out,
        args.objective,
        maximize=args.maximize,
        constraints=args.constraint,
        trials=args.trials,
        sampler=args.sampler,
        seed=args.seed,
        batch=args.batch,
        jobs=args.jobs,
        search_path=args.lib,
        progress=not args.no_progress,
    )
    goals = [g.column for g in found.objectives]
    limits = [limit.column for limit in found.limits if limit.column not in goals]
    axes = [k for k in (found.feasible[0] if found.feasible else {}) if k.startswith(("chip.", "system.", "run."))]
    shown = ["target", *goals, *limits, *axes]
    best = found.feasible[:TOP]
    directions = ", ".join(f"{g.column} ({'max' if g.maximize else 'min'})" for g in found.objectives)
    print(f"{found.trials} trials, {len(found.feasible)} distinct feasible designs; best by {directions}:")
    table = [shown, *([_cell(row.get(c)) for c in shown] for row in best)]
    widths = [max(len(line[i]) for line in table) for i in range(len(shown))]
    for line in table:
        print("  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)))
    if len(goals) > 1:
        print(f"Pareto front: {len(found.pareto)} designs (in {args.out}/best.json)")
    folder = Path(args.out)
    report = {
        "objectives": [{"column": g.column, "maximize": g.maximize} for g in found.objectives],
        "constraints": [limit.text for limit in found.limits],
        "trials": found.trials,
        "feasible": len(found.feasible),
        "best": best,
        "pareto": found.pareto,
    }
    text = json.dumps(report, indent=1, allow_nan=False) + "\n"
    write_file(folder / "best.json", text)
    if len(goals) == 2 and found.feasible:
        import pandas as pd

        from archsim.results.sweep_figures import pareto_front

        figure = pareto_front(
            pd.DataFrame(found.feasible), goals[1], goals[0], found.objectives[1].maximize, found.objectives[0].maximize
        )
        write_file(folder / "pareto.html", lambda path: figure.write_html(path, include_plotlyjs="cdn"))
    return 0
