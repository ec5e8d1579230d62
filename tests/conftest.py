"""Shared fixtures: a cache folder of the session's own, the built-in library (environment ignored), and a
run and a sweep to report on.

pandas and archsim's run path are imported by the fixtures that use them, not here: under pytest-xdist
the controller loads this file too, before it starts the workers, and those imports (some 1.3 s) only
delayed them. The workers import both while they collect the test modules.
"""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from archsim.spec.cache import CACHE_ENV
from tests.notebooks import SESSION_FOLDER_ENV

if TYPE_CHECKING:
    import pandas as pd

    from archsim.results.records import RunResult
    from archsim.spec.library import Library

_CACHE_KEY = pytest.StashKey[tuple[str, str | None]]()

REPORT_SWEEP = {
    "schema_version": 1,
    "kind": "sweep",
    "name": "report-sweep",
    "target": ["dgx1", "ipu-pod64"],
    "workloads": ["resnet50", {"name": "bert-base", "seq_len": 128}],
    # BERT's optimizer state in streaming memory, as Graphcore's BERT runs keep it: else no IPU holds it
    "settings": {"mode": "train", "streaming_memory": "optimizer-state"},
    "grid": {"run.nodes": [1, 2]},
    # the second batch fits no chip: every configuration also has refused rows
    "points": [{"run.batch": 8}, {"run.batch": 100000}],
}
"""A sweep with two targets, two workloads, a varying chip count and refused rows (16 rows, about 2 s)."""


def pytest_configure(config: pytest.Config) -> None:
    """Give this process (each xdist worker, too) a cache folder of its own, never the user's; tell a
    worker the session's temporary folder that all workers share (:func:`tests.notebooks.shared_folder`);
    collect the youngest generation every :data:`YOUNG_COLLECTION_THRESHOLD` allocations from here on,
    collection included (:func:`pytest_collection_finish`).

    Set here rather than in a fixture: some test modules build a library while they are collected.
    """
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *gc.get_threshold()[1:])
    folder = tempfile.mkdtemp(prefix="archsim-cache-")
    config.stash[_CACHE_KEY] = (folder, os.environ.get(CACHE_ENV))
    os.environ[CACHE_ENV] = folder
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: its basetemp is SESSION/popen-gwN
        os.environ[SESSION_FOLDER_ENV] = str(Path(config.option.basetemp).parent)


TORCH_FILES = (
    "tests/unit/test_workloads_onnx_llm.py",
    "tests/unit/test_workloads_llm_import.py",
    "tests/unit/test_workloads_torch.py",
)
"""The files that import PyTorch (when their tests run, never when they are collected): one work unit."""

SCHEDULED_FIRST = (
    *TORCH_FILES,
    "tests/unit/test_notebooks.py",
    "tests/unit/test_baseline_cli.py",
    "tests/unit/test_report_browser.py",
)
"""Files of a few long tests (torch exports, executed notebooks, a browser), handed out first.

pytest-xdist (``--dist loadfile --no-loadscope-reorder``, ``addopts``) gives each worker a whole file
at a time in the order below: long files first, then the rest by their number of tests, so that the
workers finish together instead of one running a long file alone at the end. The :data:`TORCH_FILES`
go together to one worker (:func:`pytest_xdist_make_scheduler`), the notebooks to the other, before
the browser test, which then reads the executed copies (:func:`tests.notebooks.execute`).
"""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """With ``--dist loadfile``, hand the :data:`TORCH_FILES` out as one unit, so that one worker runs them all.

    Importing PyTorch and ONNX Script took some 3.5 s of each worker's start (a third of collecting the
    suite): the test files now import them only when their tests run
    (:func:`tests.llm_configs.skip_without`), so the other worker never does.
    Any other ``--dist`` keeps pytest-xdist's own scheduler.
    """
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    if not hasattr(LoadFileScheduling, "_split_scope"):  # not a documented hook: keep xdist's own without it
        return None

    class TorchTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return TORCH_FILES[0] if scope in TORCH_FILES else scope

    return TorchTogether(config, log)  # type: ignore[arg-type]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the files as :data:`SCHEDULED_FIRST` says (the tests inside a file keep their order)."""

    def file_of(item: pytest.Item) -> str:
        return item.nodeid.partition("::")[0]

    counts = Counter(file_of(item) for item in items)

    def rank(item: pytest.Item) -> tuple[int, int, str]:
        path = file_of(item)
        first = SCHEDULED_FIRST.index(path) if path in SCHEDULED_FIRST else len(SCHEDULED_FIRST)
        return first, -counts[path], path

    items.sort(key=rank)


YOUNG_COLLECTION_THRESHOLD = 10_000
"""Allocations between two collections of the youngest generation in a test process (CPython's default: 700)."""


def pytest_collection_finish(session: pytest.Session) -> None:
    """Keep the cyclic garbage collector off what lives as long as the test process, and run it less often.

    Collection imports the test modules and what they use (archsim, pandas, hypothesis, PyTorch and
    ONNX where installed): some 230,000 objects that last until the process ends. As ``archsim``
    itself does with its imports (:func:`archsim.cli.main`), they are frozen (:func:`gc.freeze`), so
    that no collection traverses them again. And the youngest generation is collected every
    :data:`YOUNG_COLLECTION_THRESHOLD` allocations rather than 700 (since :func:`pytest_configure`):
    the simulations a test runs allocate millions of short-lived objects (SimPy events, ops, records),
    and at 700 the collector ran some 3,400 times in ``tests/unit/test_todays_chips.py`` with
    ``test_api.py`` and took 2.45 s of their 20 s, against 0.35 s now; collecting the suite, with its
    rewritten test modules and imports, took 4.6 s with 700, 3.4 s with 10,000. Reference counting
    frees acyclic garbage at once either way; only cycles wait a little longer.
    """
    gc.collect()
    gc.freeze()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After a file's last test, once its module fixtures are gone, freeze what is left (after a collection).

    What a file leaves alive outlives it: the modules its tests imported (PyTorch, ONNX, nbclient,
    Playwright), module-level caches, session fixtures. Left to the collector, every full collection
    traversed them again for the rest of the process: in the worker that ran the PyTorch tests 9
    collections of some 0.4 s. Collected first, so that only live objects are frozen, as
    :func:`pytest_collection_finish` does with what collection imported.
    """
    yield
    if nextitem is None or nextitem.path != item.path:
        gc.collect()
        gc.freeze()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the process's cache folder and restore the variables; freeze what is left for the exit.

    Run last, after pytest's own last collection (which reports what a finalizer raised): the
    collections after it (pytest's cleanup, the interpreter's exit) would traverse again every object
    the tests left, in the worker that ran the PyTorch tests a second or more (PyTorch was imported
    after :func:`pytest_collection_finish` froze the rest), and the controller waits for that before it
    reports. Frozen (:func:`gc.freeze`), they are not traversed; the process ends as before.
    """
    folder, before = config.stash[_CACHE_KEY]
    shutil.rmtree(folder, ignore_errors=True)
    os.environ.pop(SESSION_FOLDER_ENV, None)
    if before is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = before
    gc.freeze()


@pytest.fixture(scope="session")
def library() -> Library:
    """The built-in library only, whatever ARCHSIM_PATH says."""
    from archsim.spec.library import Library

    return Library(use_env=False)


@pytest.fixture(scope="session")
def multichip_run(library: Library) -> RunResult:
    """ResNet-50 training on two DGX-1 nodes (16 V100s): a run with communication to report on."""
    from archsim import simulate

    return simulate("dgx1", "resnet50", mode="train", batch=16, nodes=2, library=library)


@pytest.fixture(scope="session")
def report_sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of :data:`REPORT_SWEEP`'s results (``results.parquet``), run once per session.

    Under pytest-xdist the files that read it (test_report.py, test_report_browser.py) usually run
    on different workers: the first to need it runs the sweep (2 s alone, 4 to 5 s in the suite)
    and moves its folder into the session's temporary folder that the workers share
    (:data:`tests.notebooks.SESSION_FOLDER_ENV`), where the others find it whole (a rename is
    atomic) and only read it.
    """
    from archsim.sweep import run_sweep

    session = os.environ.get(SESSION_FOLDER_ENV)
    shared = Path(session) / "report-sweep" if session is not None else None
    if shared is not None and shared.is_dir():
        return shared / "results"
    folder = tmp_path_factory.mktemp("report-sweep")
    spec = folder / "report-sweep.yaml"
    spec.write_text(yaml.safe_dump(REPORT_SWEEP, sort_keys=False))
    run_sweep(str(spec), folder / "results", jobs=1, progress=False)
    if shared is not None:
        try:
            folder.rename(shared)
        except OSError:  # another worker moved its folder there first: read this one
            return folder / "results"
        return shared / "results"
    return folder / "results"


@pytest.fixture(scope="session")
def report_sweep_table(report_sweep_dir: Path) -> pd.DataFrame:
    """The table of :data:`REPORT_SWEEP`."""
    import pandas as pd

    return pd.read_parquet(report_sweep_dir / "results.parquet")
