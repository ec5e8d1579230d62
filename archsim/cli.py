"""The ``archsim`` command line.

Every failure caused by input (a bad file, an unknown name, an invalid option) prints one line to
standard error and exits with status 2; nothing is written to standard output in that case.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from archsim.errors import ArchsimError, UsageError
from archsim.limits import MAX_ARGUMENT
from archsim.spec.common import Fusion

SUBCOMMANDS = (
    "archsim.commands.listing",
    "archsim.commands.run",
    "archsim.commands.validate",
    "archsim.commands.scalesim",
    "archsim.commands.export",
    "archsim.commands.baseline",
    "archsim.commands.trace",
    "archsim.commands.sweep",
    "archsim.commands.plot",
    "archsim.commands.report",
)
"""Modules that each add one subcommand: ``add_parser(subparsers, common)`` sets ``handler``."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError("archsim", "", message)


def positive_int(text: str) -> int:
    """Argument type of counts (``--batch``, ``--seq-len``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    if value > MAX_ARGUMENT:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_ARGUMENT}, got {text[:40]!r}")
    return value


def add_trace_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``--software``, ``--fusion`` and ``--recompute``: what runs the graph and how (``TraceOptions``)."""
    parser.add_argument(
        "--software",
        default=None,
        metavar="NAME",
        help="software stack that runs the graph (software/, or found through --lib; default: the chip's)",
    )
    parser.add_argument(
        "--fusion",
        choices=[f.value for f in Fusion],
        default=None,
        help="ops the framework fuses: norm-act runs element-wise ops after a norm in its kernel "
        "(default: what the software does)",
    )
    parser.add_argument(
        "--recompute",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="training: keep checkpoints only and recompute the other activations in the backward pass "
        "(default: what the software does)",
    )


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
    for module in SUBCOMMANDS:
        importlib.import_module(module).add_parser(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``archsim`` console script."""
    try:
        args = build_parser().parse_args(argv)
        handler: Callable[[argparse.Namespace], int] = args.handler
        return handler(args)
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
