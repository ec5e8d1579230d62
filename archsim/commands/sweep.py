"""``archsim sweep``: run a design-space sweep into a results folder (resumable), or count it."""

from __future__ import annotations

import argparse
from typing import Any

from archsim.cli import HELP, positive_int


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``archsim sweep``."""
    parser = sub.add_parser("sweep", parents=[common], help=HELP["sweep"])
    parser.add_argument("spec", metavar="SPEC", help="sweep description: a YAML path, or a name on the search path")
    parser.add_argument("--out", metavar="DIR", default=None, help="results folder (rows.jsonl, results.parquet)")
    parser.add_argument(
        "--jobs", type=positive_int, default=None, metavar="N", help="worker processes (default: all cores)"
    )
    parser.add_argument("--executor", choices=["local", "dask"], default="local", help="where the runs execute")
    parser.add_argument(
        "--scheduler", default=None, metavar="ADDRESS", help="Dask scheduler address (default: a local cluster)"
    )
    parser.add_argument("--chunk-size", type=positive_int, default=None, metavar="N", help="rows per task")
    parser.add_argument(
        "--path",
        choices=["auto", "batch", "event"],
        default="auto",
        help="price rows together where the sweep allows it (auto), or always batch/event; same table",
    )
    parser.add_argument("--dry-run", action="store_true", help="print how many configurations would run, run none")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on standard error")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Count or run the sweep; prints one summary line."""
    from archsim.errors import UsageError
    from archsim.sweep import count, run_sweep

    if args.dry_run:
        configurations, rows, stored = count(args.spec, args.lib, args.out)
        line = f"{configurations} configurations, {rows} runs"
        if args.out is not None:
            line += f", {stored} already stored in {args.out}, {rows - stored} to run"
        print(line)
        return 0
    if args.out is None:
        raise UsageError("archsim sweep", "--out", "a results folder is required (or --dry-run)")
    table = run_sweep(
        args.spec,
        args.out,
        jobs=args.jobs,
        executor=args.executor,
        scheduler=args.scheduler,
        chunk_size=args.chunk_size,
        progress=not args.no_progress,
        search_path=args.lib,
        path=args.path,
    )
    failed = int(table["error"].notna().sum())
    print(
        f"{len(table)} runs in {args.out}/results.parquet"
        + (f", {failed} refused (see the error column)" if failed else "")
    )
    return 0
