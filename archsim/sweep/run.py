"""Running a sweep: plan, skip stored rows, run the rest in chunks, store each chunk, build the table.

The final table depends only on the sweep and the library: rows are ordered by the sweep's
expansion, not by completion, and a row stored by an earlier (interrupted) run is read back exactly,
so an interrupted and resumed sweep gives the same table as an uninterrupted one.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archsim.errors import UsageError
from archsim.spec.library import ENV_VAR, Library
from archsim.spec.sweep import SweepSpec
from archsim.sweep.batch import batch_reason, run_batch_chunk
from archsim.sweep.executors import EXECUTORS, default_jobs, max_jobs, run_dask, run_local
from archsim.sweep.expand import (
    Configuration,
    Task,
    TaskKeys,
    iter_configurations,
    library_fingerprint,
    tasks,
    variant,
)
from archsim.sweep.store import ROWS_FILE, TABLE_FILE, RowStore, write_table_atomically
from archsim.sweep.worker import DESIGN_COLUMNS, RESULT_COLUMNS, SweepContext, run_chunk, worker_library

if TYPE_CHECKING:
    import pandas as pd

MAX_CHUNK = 32
"""Most rows per task: small enough that an interrupted sweep loses little, large enough that the
per-task cost of the executor (pickling, scheduling) stays small against ~10-100 ms per run."""
MAX_BATCH_CHUNK = 2000
"""Most rows per task on the batch path, where a row costs well under a millisecond and a task's
rows are priced together (longer arrays amortize the per-op work)."""
PATHS = ("auto", "batch", "event")
"""How a sweep's rows are priced: the batch path where it applies (``auto``), or one path always."""


@dataclass(frozen=True)
class Plan:
    """A sweep ready to run: its context (spec, file, search path) and every row, in order."""

    context: SweepContext
    tasks: list[Task]

    @property
    def configurations(self) -> int:
        """Distinct configurations (rows are configurations times workloads)."""
        return len({_identity(t) for t in self.tasks})

    @property
    def columns(self) -> list[str]:
        """Columns of the results table, in order."""
        spec = self.context.spec
        return ["target", "workload", *spec.axis_paths, *DESIGN_COLUMNS, *RESULT_COLUMNS, "error", "key"]


def _identity(task: Task) -> str:
    """A hashable identity of a task's configuration (axis values may be lists or mappings)."""
    configuration = task.configuration
    return json.dumps([configuration.target, configuration.values], sort_keys=True, default=str)


def _search_path(search_path: Sequence[str | os.PathLike[str]]) -> tuple[str, ...]:
    """The user folders, absolute (workers may run elsewhere), ``ARCHSIM_PATH`` joined in."""
    folders = [*search_path, *(p for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p)]
    return tuple(str(Path(p).resolve()) for p in folders)


def load_sweep(sweep: str | os.PathLike[str] | SweepSpec, search_path: Sequence[str] = ()) -> SweepSpec:
    """A validated sweep description from a name on the search path, a file path, or a spec."""
    return _load(sweep, _search_path(search_path))[0]


def _load(sweep: str | os.PathLike[str] | SweepSpec, folders: tuple[str, ...]) -> tuple[SweepSpec, str]:
    if isinstance(sweep, SweepSpec):
        return sweep, sweep.name
    library = worker_library(folders)
    name = os.fspath(sweep)
    entry = library.find(["sweep"], name)
    spec: SweepSpec = library.spec(entry)
    return spec, entry.source


def plan(
    sweep: str | os.PathLike[str] | SweepSpec, search_path: Sequence[str] = (), check_variants: bool = True
) -> Plan:
    """Expand a sweep into its rows.

    With ``check_variants`` each distinct axis value is validated first, in the first configuration
    that has it, so that a bad value fails at once, in one line, rather than in every row (a
    combination that only fails together is refused in its rows).
    """
    folders = _search_path(search_path)
    spec, source = _load(sweep, folders)
    context = SweepContext(spec, source, folders)
    library = worker_library(folders)
    planned = tasks(spec, source, library_fingerprint(library))
    if check_variants:
        seen: set[Any] = set()
        for task in planned:
            _check_new_values(library, spec, source, task.configuration, seen)
    return Plan(context, planned)


def _check_new_values(
    library: Library, spec: SweepSpec, source: str, configuration: Configuration, seen: set[Any]
) -> None:
    """Validate ``configuration``'s variant if it holds an axis value (or a target) not in ``seen``."""
    values = [_seen_key(configuration.target, path, value) for path, value in configuration.values]
    fresh = [v for v in values or [configuration.target] if v not in seen]
    if fresh:
        seen.update(fresh)
        variant(library, spec, source, configuration)


def _seen_key(target: str, path: str, value: Any) -> Any:
    """What identifies an axis value of a target: the value itself, or its repr when it is not hashable."""
    try:
        hash(value)
    except TypeError:
        return repr((target, path, value))
    return (target, path, type(value), value)


def count(
    sweep: str | os.PathLike[str] | SweepSpec,
    search_path: Sequence[str] = (),
    out: str | os.PathLike[str] | None = None,
) -> tuple[int, int, int]:
    """(configurations, rows, rows already stored in ``out``) of a sweep, without running it.

    The configurations are streamed, never materialized, so memory stays flat however large the
    sweep. Each distinct axis value is validated in the first configuration that has it (a bad value
    fails here in one line); a combination that only fails together is refused when its row runs.
    """
    folders = _search_path(search_path)
    spec, source = _load(sweep, folders)
    library = worker_library(folders)
    have = RowStore(out).load() if out is not None and Path(out, ROWS_FILE).exists() else {}
    entries = spec.workload_entries
    keys = TaskKeys(spec, library_fingerprint(library))
    seen: set[Any] = set()
    configurations = stored = 0
    for configuration in iter_configurations(spec, source):
        configurations += 1
        _check_new_values(library, spec, source, configuration, seen)
        if have:
            stored += sum(1 for w in entries if keys.key(configuration, w) in have)
    return configurations, configurations * len(entries), stored


def _chunks(todo: list[Task], jobs: int, chunk_size: int | None, batch: bool = False) -> list[list[Task]]:
    if batch:
        size = chunk_size or max(1, min(MAX_BATCH_CHUNK, math.ceil(len(todo) / (4 * jobs))))
    else:
        size = chunk_size or max(1, min(MAX_CHUNK, math.ceil(len(todo) / (8 * jobs))))
    return [todo[i : i + size] for i in range(0, len(todo), size)]


def _progress(total: int, done: int, name: str, enabled: bool) -> Any:
    from tqdm.auto import tqdm  # a widget in a notebook (ipywidgets), text on standard error elsewhere

    return tqdm(
        total=total, initial=done, unit="run", desc=name, disable=not enabled, file=sys.stderr, dynamic_ncols=True
    )


def run_sweep(
    sweep: str | os.PathLike[str] | SweepSpec,
    out: str | os.PathLike[str] | None = None,
    *,
    jobs: int | None = None,
    executor: str = "local",
    scheduler: str | None = None,
    chunk_size: int | None = None,
    progress: bool = True,
    search_path: Sequence[str] = (),
    path: str = "auto",
) -> pd.DataFrame:
    """Run a sweep and return its table (one row per configuration and workload).

    ``out`` is the results folder: rows are stored there as they complete and a rerun skips them, so
    an interrupted sweep continues where it stopped; the table is also written there as
    ``results.parquet``. None keeps the rows in a temporary folder. ``jobs``: worker processes
    (default: every core; at most :func:`~archsim.sweep.executors.max_jobs`); ``executor``:
    ``local`` or ``dask`` (``scheduler``: a Dask scheduler address, None for a local cluster);
    ``chunk_size``: rows per task (default: up to 32, at least eight tasks per worker);
    ``progress``: a progress bar on standard error; ``path``: ``auto`` prices the rows on the batch
    path when the sweep allows it (:func:`archsim.sweep.batch.batch_reason`), else one at a time on
    the event path; ``batch`` or ``event`` ask for one (``batch`` on a sweep it does not apply to is
    refused with the reason). Both give the same table.
    """
    if executor not in EXECUTORS:
        raise UsageError("", "--executor", f"{executor!r} is not one of {', '.join(EXECUTORS)}")
    if path not in PATHS:
        raise UsageError("", "--path", f"{path!r} is not one of {', '.join(PATHS)}")
    if scheduler is not None and executor != "dask":
        raise UsageError("", "--scheduler", "applies to --executor dask only")
    for flag, value in (("--jobs", jobs), ("--chunk-size", chunk_size)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise UsageError("", flag, f"must be a positive integer, got {value!r}")
    if jobs is not None and jobs > max_jobs():
        raise UsageError(
            "", "--jobs", f"{jobs} is more than {max_jobs()}, four worker processes per core ({default_jobs()} cores)"
        )
    planned = plan(sweep, search_path)
    batch = False
    if path != "event":
        reason = batch_reason(planned.context.spec, worker_library(planned.context.search_path))
        if reason is not None and path == "batch":
            raise UsageError(planned.context.source, "--path", f"the batch path does not apply: {reason}")
        batch = reason is None
    if out is None:
        with tempfile.TemporaryDirectory(prefix="archsim-sweep-") as folder:
            return _run(planned, RowStore(folder), jobs, executor, scheduler, chunk_size, progress, False, batch)
    return _run(planned, RowStore(out), jobs, executor, scheduler, chunk_size, progress, True, batch)


def _run(
    planned: Plan,
    store: RowStore,
    jobs: int | None,
    executor: str,
    scheduler: str | None,
    chunk_size: int | None,
    progress: bool,
    write: bool,
    batch: bool = False,
) -> pd.DataFrame:
    stored = store.load()
    todo = [t for t in planned.tasks if t.key not in stored]
    workers = jobs or default_jobs()
    chunks = _chunks(todo, workers, chunk_size, batch)
    runner = run_batch_chunk if batch else run_chunk
    results: Iterator[list[dict[str, Any]]] = (
        run_local(planned.context, chunks, workers, runner)
        if executor == "local"
        else run_dask(planned.context, chunks, workers, scheduler, runner)
    )
    bar = _progress(len(planned.tasks), len(planned.tasks) - len(todo), planned.context.spec.name, progress)
    try:
        for rows in results:
            for row, line in zip(rows, store.append(rows), strict=True):
                # what a later run reads back from the file, exactly (a row of JSON scalars reads back as itself)
                stored.setdefault(row["key"], row if _json_scalars(row) else json.loads(line))
            bar.update(len(rows))
    finally:
        bar.close()
    table = build_table(planned, stored)
    if write:
        write_table_atomically(table, store.folder / TABLE_FILE)
    return table


_JSON_SCALARS = (str, int, float, bool, type(None))


def _json_scalars(row: dict[str, Any]) -> bool:
    """True when every value is a str, int, float, bool or None (exactly those types).

    ``json.loads`` of its ``json.dumps`` is then an equal dict of the same types (floats are written as
    their shortest repr), so the row need not be read back.
    """
    return all(type(value) in _JSON_SCALARS for value in row.values())


def build_table(planned: Plan, stored: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """The results table of a plan from its stored rows, in the sweep's order."""
    import pandas as pd

    columns = planned.columns
    rows = [stored[t.key] for t in planned.tasks if t.key in stored]
    records = [[row.get(c) for c in columns] for row in rows]
    return pd.DataFrame.from_records(records, columns=columns)
