"""The ``archsim`` command line.

Every failure caused by input (a bad file, an unknown name, an invalid option) prints one line to
standard error and exits with status 2; nothing is written to standard output in that case.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import io
import os
import sys
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import IO, Any, NoReturn

from archsim import __version__
from archsim.errors import ArchsimError, UsageError
from archsim.limits import MAX_ARGUMENT

COMMANDS: dict[str, tuple[str, str]] = {
    "list": (
        "archsim.commands.listing",
        "the descriptions known: chips, systems, workloads, memory, links, sweeps, ...",
    ),
    "run": ("archsim.commands.run", "simulate a workload on a target"),
    "validate": ("archsim.commands.validate", "compare predictions with published results"),
    "scalesim": ("archsim.commands.scalesim", "run a SCALE-Sim config and topology (per-layer cycles, traffic)"),
    "export": ("archsim.commands.export", "write a workload in another tool's format"),
    "baseline": ("archsim.commands.baseline", "record results of runs, then rerun and diff them"),
    "trace": ("archsim.commands.trace", "import ONNX models and Chakra ETs; export Chakra ETs"),
    "sweep": ("archsim.commands.sweep", "run a sweep of chip/system variants (resumable); see README"),
    "optimize": (
        "archsim.commands.optimize",
        "search a sweep's axes for the best designs (Optuna; resumable)",
    ),
    "plot": ("archsim.commands.plot", "plot a run or a sweep's results as self-contained HTML"),
    "report": ("archsim.commands.report", "an HTML report of a run or a sweep's results (summary and figures)"),
    "collective": (
        "archsim.commands.collective",
        "time one collective on a system, per size, as nccl-tests reports it (time, algbw, busbw)",
    ),
    "plan": (
        "archsim.commands.plan",
        "training layouts of a language model that fit a system (tensor, pipeline, data parallel, ZeRO, "
        "recomputation), fastest first",
    ),
    "mlperf": ("archsim.commands.mlperf", "compare predicted with published MLPerf Training times to train"),
    "compare": (
        "archsim.commands.compare",
        "speedup of target B over target A on a workload, attributed to chip count, peak, memory, node, "
        "architecture and software",
    ),
}
"""Each subcommand: the module that adds it (``add_parser(subparsers, common)`` sets ``handler`` and
passes ``help=HELP[name]``) and its one-line help.

Only the module of the subcommand being run is imported (``archsim list`` never imports the engine
or plotly); the others appear in ``archsim --help`` through their help line alone.
"""

HELP = {name: text for name, (_, text) in COMMANDS.items()}
"""One-line help of each subcommand, for its module's ``add_parser``."""


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
    """Register ``--software``, ``--fusion``, ``--recompute`` and ``--padding``: what runs the graph and how."""
    from archsim.spec.common import Fusion

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
        nargs="?",
        const="full",
        choices=["none", "selective", "full"],
        default=None,
        help="training: what the backward pass recomputes instead of keeping: none, selective (a decoder's "
        "attention core) or full (checkpoints only; a bare --recompute) (default: what the software does)",
    )
    parser.add_argument(
        "--no-recompute",
        dest="recompute",
        action="store_const",
        const="none",
        help="the same as --recompute none",
    )
    parser.add_argument(
        "--padding",
        choices=["kept", "removed", "packed"],
        default=None,
        help="training on padded sequences: kept computes every sequence at --seq-len, removed each at its "
        "data set's mean real tokens (BERT at 512: 256), packed whole sequences into packs of --seq-len "
        "tokens (default: what the software does)",
    )


def add_memory_argument(parser: argparse.ArgumentParser) -> None:
    """Register ``--streaming-memory``: what an IPU may keep off chip (:mod:`archsim.memory_fit`)."""
    from archsim.spec.common import StreamingMemory

    parser.add_argument(
        "--streaming-memory",
        choices=[s.value for s in StreamingMemory],
        default=StreamingMemory.NONE.value,
        help="IPUs: what may live in streaming memory instead of In-Processor Memory: none (default, as "
        "Poplar: a step that does not fit is refused), optimizer-state (offloaded, streamed for the update) "
        "or all (every op streams what does not fit); other chips ignore it",
    )


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The parser of the subcommands in ``commands`` (their modules imported), or of all when None.

    The other subcommands are registered by name and help line only, so that ``archsim --help`` and a
    misspelt subcommand read exactly as with the full parser.
    """
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
    for name, (module, text) in COMMANDS.items():
        if commands is None or name in commands:
            importlib.import_module(module).add_parser(sub, common)
        else:
            sub.add_parser(name, help=text, add_help=False)
    return parser


def command_of(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` runs, or None when it names none.

    That is its first word that is not an option: ``archsim`` itself has no option taking a value.
    """
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``archsim`` console script (``argv`` None), or of one command in-process.

    As the program, it first takes the standard streams as :func:`_standard_streams` says, and exits 2
    naming ``<stdout>`` if what it printed did not all reach standard output (``--help`` included).
    """
    if argv is not None:
        return _main(list(argv), program=False)
    try:
        stdout = _standard_streams()
    except ArchsimError as err:
        print(f"archsim: error: {err.line()}", file=sys.stderr)
        return 2
    try:
        code = _main(sys.argv[1:], program=True)
    except SystemExit as stop:  # argparse's --help and --version
        code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    with contextlib.suppress(OSError):
        sys.stdout.flush()
    if stdout.error is not None and code == 0:  # a failed write that was swallowed (argparse does)
        return _failed(stdout.error)
    return code


def _main(words: list[str], program: bool) -> int:
    """Parse ``words``, run the subcommand; input errors and a failing environment become one line and 2."""
    try:
        command = command_of(words)
        with _long_lived_imports(program=program):
            parser = build_parser([] if command is None else [command])
        args = parser.parse_args(words)
        handler: Callable[[argparse.Namespace], int] = args.handler
        code = handler(args)
        sys.stdout.flush()  # a full device fails here, while the error can still be one line
        return code
    except ArchsimError as err:
        print(f"archsim: error: {err.line()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except OSError as err:
        return _failed(err)


def _failed(err: OSError) -> int:
    """Report a failing environment in one line, the exit status it gives.

    Standard output on a full device, a file that vanished: writes of files are atomic and raise
    ArchsimError, so what is left is reported in one line too. A reader that went away (``| head``)
    stops the command quietly, as other Unix tools do (141, as a shell shows SIGPIPE).
    """
    _discard_stdout()
    if isinstance(err, BrokenPipeError):
        return 141
    where = err.filename if err.filename is not None else "<stdout>"
    line = UsageError(os.fsdecode(where), "", f"{err.strerror or err}").line()
    print(f"archsim: error: {line}", file=sys.stderr)
    return 2


class _Output(io.FileIO):
    """Standard output's file: remembers the first write that failed, even where a caller swallows it."""

    error: OSError | None = None

    def write(self, data: Any) -> int:
        """Write ``data`` to the descriptor; a failure is remembered, then raised."""
        try:
            return super().write(data) or 0
        except OSError as err:
            self.error = self.error or err
            raise


class _Diagnostics(io.FileIO):
    """Standard error's file: what it cannot take (closed, full) is discarded, never an error."""

    def write(self, data: Any) -> int:
        """Write ``data`` to the descriptor, or drop it where that fails."""
        try:
            return super().write(data) or 0
        except OSError:
            return memoryview(data).nbytes


def _standard_streams() -> _Output:
    """Take the program's standard streams, by one rule; the file standard output now writes to.

    * A closed descriptor 0, 1 or 2 is first opened on the null device, so that no file archsim
      opens gets its number (a file opened as descriptor 1 would receive what is printed).
    * Standard output closed (``>&-``) is refused before anything runs: a result printed nowhere
      is lost. Characters its encoding cannot show (``PYTHONIOENCODING=ascii`` and a trace named
      in Cyrillic) are written as backslash escapes, as Python writes them to standard error, and a
      write that fails is remembered (:class:`_Output`), so the command exits 2 naming
      ``<stdout>`` rather than 0 having written nothing.
    * Standard error carries diagnostics only (progress, the one error line): closed or full, it
      discards them (:class:`_Diagnostics`) and the work goes on; the exit status still says how
      the command ended.
    """
    closed = set()
    for fd, flags in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            closed.add(fd)
            null = os.open(os.devnull, flags)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    sys.stderr = _text(_Diagnostics(2, "w", closefd=False), sys.stderr, errors="backslashreplace")
    if 1 in closed:
        raise UsageError("<stdout>", "", "standard output is closed: the result would be lost")
    output = _Output(1, "w", closefd=False)
    sys.stdout = _text(output, sys.stdout, errors="backslashreplace")
    return output


def _text(raw: io.FileIO, before: IO[str] | None, errors: str) -> io.TextIOWrapper:
    """A text stream over ``raw``, with the encoding and buffering of the stream it replaces."""
    encoding = getattr(before, "encoding", None) or "utf-8"
    line_buffering = bool(getattr(before, "line_buffering", False)) or raw.isatty()
    return io.TextIOWrapper(io.BufferedWriter(raw), encoding=encoding, errors=errors, line_buffering=line_buffering)


@contextlib.contextmanager
def _long_lived_imports(program: bool) -> Iterator[None]:
    """Import the subcommand's modules; in the ``archsim`` program itself, keep the cyclic collector off them.

    Importing pydantic and archsim creates some 44,000 functions, classes, dicts and tuples that
    live as long as the process. CPython's cyclic garbage collector would traverse them again and
    again, finding nothing: a cold ``archsim run v100 resnet50`` made 70 collections, one of them
    full, and a full one at exit, about 40 ms of CPU time on two busy cores. So, when ``main`` runs as
    the program (``program``: no ``argv`` given), the collector is paused during the imports and
    what they created is then frozen (:func:`gc.freeze`: moved to a generation no collection
    visits). Reference counting still frees what the imports discard, and the objects the run
    itself creates are collected as usual. Called with ``argv`` (a test, a notebook) ``main`` leaves
    the host process's collector as it is.
    """
    if not program:
        yield
        return
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def _discard_stdout() -> None:
    """Point standard output at the null device, so the exit's flush of what is buffered cannot fail."""
    # without a file descriptor (captured by a test) there is nothing to flush at exit
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
