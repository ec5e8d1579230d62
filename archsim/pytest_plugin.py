"""pytest plugin: the ``archsim_baseline`` fixture and the ``--archsim-update`` flag.

Installed with archsim (entry point ``pytest11``), so any test can pin the results of runs::

    def test_my_chip(archsim_baseline):
        archsim_baseline.check(["my-chip:resnet50:batch=2"], search_path=["my_chips"])

The first run fails, saying where the baseline would go; ``pytest --archsim-update`` records it
(``baselines/<test module>.<test name>.tsv`` next to the test file, the format of ``archsim baseline``,
to be committed and reviewed). From then on the test reruns the runs and fails with the per-run and
per-layer diff when anything moved beyond ``rtol``; ``--archsim-update`` accepts the new values.
Loading the plugin imports nothing but pytest; archsim itself is imported by the first check.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from archsim.baseline.runs import RunSpec
    from archsim.spec.library import Library

UPDATE_FLAG = "--archsim-update"
DEFAULT_RTOL = 1e-9
"""Relative tolerance of a check (the same as ``archsim baseline check``'s default)."""
DEFAULT_MAX_LAYERS = 10
"""Changed layers listed per run in a failure message (0 lists all)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--archsim-update``."""
    group = parser.getgroup("archsim")
    group.addoption(
        UPDATE_FLAG,
        action="store_true",
        default=False,
        help="record new results: rewrite every baseline that archsim_baseline checks",
    )


class ArchsimBaseline:
    """What the ``archsim_baseline`` fixture gives a test: :meth:`check` against a baseline file."""

    def __init__(self, path: Path, update: bool) -> None:
        self.path = path
        """The baseline file of this test (without a ``name``; see :meth:`path_for`)."""
        self.update = update
        """True under ``--archsim-update``: checks record instead of comparing."""

    def path_for(self, name: str | None) -> Path:
        """The file of the baseline called ``name`` in this test (None: the test's own)."""
        if name is None:
            return self.path
        return self.path.with_name(f"{self.path.stem}.{_UNSAFE.sub('_', name)}{self.path.suffix}")

    def check(
        self,
        runs: Iterable[str | RunSpec],
        *,
        search_path: Sequence[str | os.PathLike[str]] = (),
        library: Library | None = None,
        rtol: float = DEFAULT_RTOL,
        name: str | None = None,
        max_layers: int = DEFAULT_MAX_LAYERS,
    ) -> None:
        """Run ``runs`` (``TARGET:WORKLOAD[:OPTIONS]`` texts or RunSpecs) and compare with the baseline.

        Fails the test with the diff when a run moved beyond ``rtol``, when the set of runs changed,
        or when there is no baseline yet; under ``--archsim-update`` writes the baseline instead.
        ``library`` (or ``search_path``, relative folders from the test file's folder, wherever
        pytest runs) is where targets and workloads are found. A run that fails
        raises its :class:`~archsim.errors.ArchsimError`.
        """
        # imported here so that loading the plugin (into every pytest run) costs nothing
        from archsim.baseline import compare, read_baseline, record, report_lines
        from archsim.baseline.fileio import write_baseline
        from archsim.baseline.runs import parse_runs
        from archsim.spec.library import Library

        texts = [run if isinstance(run, str) else run.id for run in runs]
        specs = parse_runs(texts)
        path = self.path_for(name)
        beside = self.path.parent.parent  # the test file's folder (baselines/ is in it)
        folders = [p if Path(p).is_absolute() else beside / p for p in search_path]
        new = record(specs, library or Library(folders), keep_errors=False)
        if self.update:
            write_baseline(new, path)
            return
        if not path.exists():
            pytest.fail(f"no archsim baseline at {path}; run pytest with {UPDATE_FLAG} to record one", pytrace=False)
        old = read_baseline(path)
        diffs = compare(old, new, rtol)
        if diffs:
            runs_compared = len({r.run for r in old.runs} | {r.run for r in new.runs})
            lines = report_lines(diffs, runs_compared, rtol, str(path), max_layers)
            lines.append(f"(if the change is intended, rerun pytest with {UPDATE_FLAG} and commit {path})")
            pytest.fail("\n".join(lines), pytrace=False)


@pytest.fixture
def archsim_baseline(request: pytest.FixtureRequest) -> ArchsimBaseline:
    """A baseline of this test: ``baselines/<module>.<test>.tsv`` beside the test file."""
    test_file = Path(request.path)
    stem = f"{test_file.stem}.{_UNSAFE.sub('_', request.node.name)}"
    update = bool(request.config.getoption(UPDATE_FLAG))
    return ArchsimBaseline(test_file.parent / "baselines" / f"{stem}.tsv", update)


__all__ = ["ArchsimBaseline", "archsim_baseline", "pytest_addoption"]
