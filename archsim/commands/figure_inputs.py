"""The inputs that ``archsim plot`` and ``archsim report`` share: one run's options, a sweep's table.

Both commands draw either one run (``TARGET WORKLOAD`` and the run options below) or a sweep's
results (a folder or its ``results.parquet``); keeping the options and the reading here means the
two commands accept exactly the same arguments and refuse bad ones with the same one-line errors.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archsim.cli import add_memory_argument, add_trace_arguments
from archsim.commands import multichip
from archsim.commands.run import add_shape_arguments
from archsim.errors import UsageError
from archsim.spec.library import Library

if TYPE_CHECKING:
    from archsim.results.records import RunResult
    from archsim.results.timeline import Timeline


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``TARGET WORKLOAD`` and the run options on ``parser``: ``archsim run``'s, multi-chip ones included."""
    parser.add_argument("target", help="chip or system name, alias or YAML path")
    parser.add_argument("workload", help="model name, trace file or gemm:MxNxK")
    add_shape_arguments(parser)
    add_trace_arguments(parser)
    add_memory_argument(parser)
    multichip.add_arguments(parser)


def simulate_run(args: argparse.Namespace) -> tuple[RunResult, Library, Timeline]:
    """The run the options of :func:`add_run_arguments` ask for, its library and its recorded timeline.

    The timeline is recorded so that the timeline figure shows the links' lanes as the Perfetto export
    does; ``--timeline FILE`` also writes it there, as ``archsim run`` does.
    """
    library = Library(args.lib)
    result, timeline = multichip.record_args(args, library)
    return result, library, timeline


def write_output(write: Callable[[Any, str], None], content: Any, out: str) -> None:
    """Write ``content`` to ``--out`` with ``write`` and print the path; a failed write is one line."""
    try:
        write(content, out)
    except OSError as err:
        raise UsageError(out, "--out", f"cannot write: {err.strerror or err}") from None
    print(out)


def read_results(path: str) -> Any:
    """A sweep's table (a pandas DataFrame) from its folder or Parquet file."""
    import pandas as pd

    file = Path(path)
    if file.is_dir():
        file = file / "results.parquet"
    if not file.is_file():
        raise UsageError(path, "RESULTS", "no results.parquet here (run archsim sweep SPEC --out DIR first)")
    try:
        return pd.read_parquet(file)
    except (OSError, ValueError) as err:
        raise UsageError(str(file), "", f"not a results table: {str(err).splitlines()[0][:120]}") from None


def select_workload(table: Any, workload: str | None, source: str) -> Any:
    """The rows of ``workload`` (all rows when None); no such row is an error naming ``source``."""
    if workload is None:
        return table
    if "workload" not in table.columns:
        raise UsageError(source, "--workload", "the table has no workload column")
    chosen = table[table["workload"] == workload]
    if chosen.empty:
        raise UsageError(source, "--workload", f"no rows of workload {workload!r}")
    return chosen
