"""Executors: run chunks of a sweep and hand each chunk's rows back as it completes.

* ``local``: worker processes on this machine (``jobs`` of them, default all cores); ``jobs=1`` runs
  in this process. Workers are forked where the platform allows it, so they start with archsim
  imported and the library read.
* ``dask``: tasks on a Dask cluster (``scheduler`` address), or on a local cluster of ``jobs``
  single-threaded worker processes listening on the loopback interface when no address is given.
  Needs ``pip install 'archsim[dask]'`` (and archsim installed on the workers).

Either way, rows are yielded in completion order; the caller stores them and orders the final table.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from archsim.errors import UsageError
from archsim.sweep.expand import Task
from archsim.sweep.worker import SweepContext, run_chunk, worker_library

EXECUTORS = ("local", "dask")
Rows = list[dict[str, Any]]
ChunkRunner = Callable[[SweepContext, list[Task]], Rows]
"""What prices a chunk: :func:`~archsim.sweep.worker.run_chunk` (the event path) or the batch path's."""
PARENT_CHECK_S = 0.5
"""How often a local worker checks that the sweep's process is still there."""


def default_jobs() -> int:
    """Worker processes by default: the cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def max_jobs() -> int:
    """Most worker processes a sweep may ask for: four per core (more only adds memory and switching)."""
    return 4 * default_jobs()


def _exit_with_parent(parent: int) -> None:
    """Local worker initializer: end the worker once the sweep's process is gone.

    A forked worker holds both ends of the pool's task pipe, so a parent killed outright (SIGKILL, a
    crash) never closes it and the worker would wait for tasks forever; instead it notices that it
    was re-parented and exits. A resumed sweep starts workers of its own.
    """

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_S)
        os._exit(1)

    threading.Thread(target=watch, name="archsim-parent-watch", daemon=True).start()


def run_local(
    context: SweepContext, chunks: list[list[Task]], jobs: int, runner: ChunkRunner = run_chunk
) -> Iterator[Rows]:
    """Run chunks in ``jobs`` local processes (in this process for one job), yielding rows as they complete."""
    if jobs == 1 or len(chunks) <= 1:
        for chunk in chunks:
            yield runner(context, chunk)
        return
    worker_library(context.search_path)._index  # noqa: B018 - read the library once, before forking
    jobs = min(jobs, len(chunks))  # a worker without a chunk would only cost a process
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=multiprocessing.get_context(method),
        initializer=_exit_with_parent,
        initargs=(os.getpid(),),
    ) as pool:
        # a bounded window of chunks in flight keeps memory flat however long the sweep
        pending: set[Future[Rows]] = set()
        queue = iter(chunks)
        for chunk in queue:
            pending.add(pool.submit(runner, context, chunk))
            if len(pending) >= 4 * jobs:
                break
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield future.result()
                    following = next(queue, None)
                    if following is not None:
                        pending.add(pool.submit(runner, context, following))
        finally:
            for future in pending:
                future.cancel()


def run_dask(
    context: SweepContext,
    chunks: list[list[Task]],
    jobs: int,
    scheduler: str | None,
    runner: ChunkRunner = run_chunk,
) -> Iterator[Rows]:
    """Run chunks on a Dask cluster, yielding rows as each task completes."""
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise UsageError("", "--executor", "dask needs the distributed package: pip install 'archsim[dask]'") from None
    cluster = None
    if scheduler is None:
        cluster = LocalCluster(
            n_workers=jobs,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        )
        client = Client(cluster)
    else:
        try:
            client = Client(scheduler, timeout="20s")
        except (OSError, TimeoutError, ValueError) as err:
            raise UsageError(scheduler, "--scheduler", f"cannot connect: {err}") from None
    try:
        shared = client.scatter(context, broadcast=True)
        futures = [client.submit(runner, shared, chunk, pure=False) for chunk in chunks]
        try:
            for future in as_completed(futures):
                yield future.result()
        finally:
            client.cancel(futures)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
