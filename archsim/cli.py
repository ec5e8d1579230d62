"""The ``archsim`` command line.

Every failure caused by input (a bad file, an unknown name, an invalid option) prints one line to
standard error and exits with status 2; nothing is written to standard output in that case.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from archsim import __version__
from archsim.errors import ArchsimError, UsageError
from archsim.limits import MAX_ARGUMENT
from archsim.spec.common import Fusion, StreamingMemory

SUBCOMMANDS = (
    "archsim.commands.listing",
    "archsim.commands.run",
    "archsim.commands.validate",
    "archsim.commands.scalesim",
    "archsim.commands.export",
    "archsim.commands.baseline",
    "archsim.commands.trace",
    "archsim.commands.sweep",
    "archsim.commands.optimize",
    "archsim.commands.plot",
    "archsim.commands.report",
    "archsim.commands.collective",
    "archsim.commands.mlperf",
    "archsim.commands.compare",
)
"""Modules that each add one subcommand: ``add_parser(subparsers, common)`` sets ``handler``."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError("", "", message)  # main prints "archsim: error: " before it, once


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


def add_memory_argument(parser: argparse.ArgumentParser) -> None:
    """Register ``--streaming-memory``: what an IPU may keep off chip (:mod:`archsim.memory_fit`)."""
    parser.add_argument(
        "--streaming-memory",
        choices=[s.value for s in StreamingMemory],
        default=StreamingMemory.NONE.value,
        help="IPUs: what may live in streaming memory instead of In-Processor Memory: none (default, as "
        "Poplar: a step that does not fit is refused), optimizer-state (offloaded, streamed for the update) "
        "or all (every op streams what does not fit); other chips ignore it",
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
    parser.add_argument("--version", action="version", version=f"archsim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module in SUBCOMMANDS:
        importlib.import_module(module).add_parser(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``archsim`` console script."""
    try:
        args = build_parser().parse_args(argv)
        handler: Callable[[argparse.Namespace], int] = args.handler
        code = handler(args)
        sys.stdout.flush()  # a full device fails here, while the error can still be one line
        return code
    except ArchsimError as err:
        print(f"archsim: error: {err.line()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader (e.g. `| head`) went away: stop quietly, as other Unix tools do
        _discard_stdout()
        return 141
    except OSError as err:
        # the environment failed (standard output on a full device, a file that vanished): writes of
        # files are atomic and raise ArchsimError, so what is left is reported in one line too
        _discard_stdout()
        where = err.filename if err.filename is not None else "<stdout>"
        line = UsageError(os.fsdecode(where), "", f"{err.strerror or err}").line()
        print(f"archsim: error: {line}", file=sys.stderr)
        return 2


def _discard_stdout() -> None:
    """Point standard output at the null device, so the exit's flush of what is buffered cannot fail."""
    # without a file descriptor (captured by a test) there is nothing to flush at exit
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
