"""``archsim baseline save|check``: record the results of a set of runs, then rerun and diff them.

``save NAME [RUNS...]`` writes ``baselines/NAME.tsv`` (or the path NAME); with no RUNS it records the
default set, every chip and system on every model in inference and training at batch 2.
``check NAME`` reruns the runs stored there and prints, per run and per layer, what moved beyond
``--rtol``; its exit status is 0 when nothing did, 1 when something did, 2 on bad input.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from archsim.baseline import DEFAULT_RTOL, check, report_lines, save
from archsim.baseline.compare import DEFAULT_MAX_LAYERS
from archsim.cli import HELP
from archsim.spec.library import Library


def _rtol(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a relative tolerance such as 1e-6, got {text[:40]!r}") from None
    if not math.isfinite(value) or not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a tolerance in [0, 1), got {text[:40]!r}")
    return value


def _count(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 9:
        raise argparse.ArgumentTypeError(f"expected a count (0 lists all), got {text[:40]!r}")
    return int(text)


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``archsim baseline save`` and ``archsim baseline check``."""
    parser = sub.add_parser("baseline", help=HELP["baseline"])
    actions = parser.add_subparsers(dest="action", required=True, parser_class=type(parser))
    name_help = "baselines/NAME.tsv in the current directory, or a path (with a '/' or ending in .tsv)"
    saver = actions.add_parser("save", parents=[common], help="record runs (default: every chip and system)")
    saver.add_argument("name", metavar="NAME", help=name_help)
    saver.add_argument(
        "runs",
        nargs="*",
        metavar="RUNS",
        help="TARGET:WORKLOAD[:mode=infer|train,batch=N,precision=P,seq_len=L] (default: the default set)",
    )
    saver.set_defaults(handler=run_save)
    checker = actions.add_parser("check", parents=[common], help="rerun a baseline and diff (exit 1 on change)")
    checker.add_argument("name", metavar="NAME", help=name_help)
    checker.add_argument(
        "--rtol", type=_rtol, default=DEFAULT_RTOL, help=f"relative tolerance (default {DEFAULT_RTOL:g})"
    )
    checker.add_argument(
        "--max-layers",
        type=_count,
        default=DEFAULT_MAX_LAYERS,
        metavar="N",
        help=f"changed layers listed per run (default {DEFAULT_MAX_LAYERS}; 0 lists all)",
    )
    checker.set_defaults(handler=run_check)


def run_save(args: argparse.Namespace) -> int:
    """Record and write; prints where and how much."""
    path, baseline = save(args.name, args.runs, Library(args.lib))
    layers = sum(len(r.layers) for r in baseline.runs)
    failed = sum(r.error is not None for r in baseline.runs)
    note = f", {failed} recorded as failing" if failed else ""
    print(f"saved {len(baseline.runs)} runs ({layers} layers{note}) to {path}")
    return 0


def run_check(args: argparse.Namespace) -> int:
    """Rerun, print the diff, and return 1 when anything moved."""
    path, diffs, runs = check(args.name, Library(args.lib), args.rtol)
    print("\n".join(report_lines(diffs, runs, args.rtol, str(path), args.max_layers)))
    return 1 if diffs else 0
