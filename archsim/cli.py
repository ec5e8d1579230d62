"""The ``archsim`` command line.

Every failure caused by input (a bad file, an unknown name, an invalid option) prints one line to
standard error and exits with status 2; nothing is written to standard output in that case.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from archsim.api import simulate
from archsim.errors import ArchsimError, UsageError
from archsim.results.records import to_json
from archsim.results.table import layer_table, summary_lines
from archsim.spec.library import Library


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError("archsim", "", message)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand."""
    common = _Parser(add_help=False)
    common.add_argument(
        "--lib",
        action="append",
        default=[],
        metavar="DIR",
        help="add a folder of YAML descriptions to the search path (before ARCHSIM_PATH and the built-ins)",
    )
    parser = _Parser(prog="archsim", description="Cycle-approximate accelerator architecture simulator.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    listing = sub.add_parser("list", parents=[common], help="chips, systems and workloads known")
    listing.add_argument("kind", nargs="?", choices=["chips", "workloads", "memory", "links"], help="only this kind")

    run = sub.add_parser("run", parents=[common], help="simulate a workload on a target")
    run.add_argument("target", help="chip name, alias or YAML path")
    run.add_argument("workload", help="model name, trace file or gemm:MxNxK")
    run.add_argument("--mode", choices=["train", "infer"], default="infer")
    run.add_argument("--batch", type=_positive_int, default=None, help="per-chip batch (default: the model's)")
    run.add_argument(
        "--precision",
        choices=["fp32", "tf32", "fp16", "bf16", "int8"],
        default=None,
        help="operand precision (default: the chip's, fp16 or bf16 on TPUs)",
    )
    run.add_argument("--seq-len", type=_positive_int, default=None, help="sequence length (BERT)")
    run.add_argument("--json", action="store_true", help="print exactly one JSON object")
    return parser


_LIST_KINDS = {
    "chips": ("chip", "chips"),
    "workloads": ("model", "workloads"),
    "memory": ("memory", "memory"),
    "links": ("link", "links"),
}


def _list(args: argparse.Namespace) -> int:
    library = Library(args.lib)
    kinds = [args.kind] if args.kind else list(_LIST_KINDS)
    for kind in kinds:
        spec_kind, title = _LIST_KINDS[kind]
        entries = library.entries(spec_kind)
        print(f"{title}:")
        for entry in entries:
            aliases = f" (alias {', '.join(entry.aliases)})" if entry.aliases else ""
            print(f"  {entry.name:<16} {entry.description}{aliases}")
    return 0


def _run(args: argparse.Namespace) -> int:
    result = simulate(
        args.target,
        args.workload,
        mode=args.mode,
        batch=args.batch,
        precision=args.precision,
        seq_len=args.seq_len,
        search_path=args.lib,
    )
    if args.json:
        print(to_json(result))
    else:
        print("\n".join(summary_lines(result)))
        print()
        print("\n".join(layer_table(result)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``archsim`` console script."""
    try:
        args = build_parser().parse_args(argv)
        return {"list": _list, "run": _run}[args.command](args)
    except ArchsimError as err:
        print(f"archsim: error: {err.line()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader (e.g. `| head`) went away: stop quietly, as other Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
