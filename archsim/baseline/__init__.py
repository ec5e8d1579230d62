"""Regression baselines of cost models: record the results of a set of runs, rerun them, diff.

``archsim baseline save NAME [RUNS...]`` records (:func:`save`); ``archsim baseline check NAME``
reruns and compares (:func:`check`); the pytest fixture ``archsim_baseline``
(:mod:`archsim.pytest_plugin`) does both inside a test. Runs are written ``TARGET:WORKLOAD[:OPTIONS]``
(:mod:`archsim.baseline.runs`); files are tab-separated text (:mod:`archsim.baseline.fileio`); the
comparison and its report are :mod:`archsim.baseline.compare`.

``NAME`` is a bare name -- letters, digits, ``.``, ``_`` and ``-`` -- for ``baselines/NAME.tsv`` in the
current directory, or a path (anything with a ``/`` or ending in ``.tsv``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from archsim.baseline.compare import DEFAULT_RTOL, RunDiff, compare, report_lines
from archsim.baseline.fileio import Baseline, read_baseline, write_baseline
from archsim.baseline.runs import RunSpec, default_runs, parse_run, parse_runs, record_run
from archsim.errors import UsageError
from archsim.spec.library import Library

FOLDER = "baselines"
"""Folder, relative to the current directory, of baselines given by bare name."""
SUFFIX = ".tsv"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")

__all__ = [
    "DEFAULT_RTOL",
    "Baseline",
    "RunDiff",
    "RunSpec",
    "baseline_path",
    "check",
    "compare",
    "default_runs",
    "parse_run",
    "read_baseline",
    "record",
    "report_lines",
    "save",
    "write_baseline",
]


def baseline_path(name: str) -> Path:
    """``NAME`` -> ``baselines/NAME.tsv``; a name with a path separator or ending in ``.tsv`` is a path."""
    if "/" in name or os.sep in name or name.endswith(SUFFIX):
        return Path(name)
    if not _NAME.fullmatch(name):
        raise UsageError(
            name[:80],
            "NAME",
            "a baseline name is a letter or digit, then letters, digits, '.', '_' or '-', "
            "at most 100 characters (or give a path ending in .tsv)",
        )
    return Path(FOLDER) / f"{name}{SUFFIX}"


def record(runs: Sequence[RunSpec], library: Library, keep_errors: bool, default_set: bool = False) -> Baseline:
    """Simulate every run, in order; failures are kept as errors only if ``keep_errors``."""
    return Baseline(tuple(record_run(spec, library, keep_errors) for spec in runs), default_set)


def save(name: str, runs: Sequence[str], library: Library) -> tuple[Path, Baseline]:
    """Record ``runs`` (the default set when empty) and write them to the baseline ``name``.

    A run of the default set that fails (say, a user chip whose memory is too small) is recorded
    with its error; a run given by name must succeed (its error is raised).
    """
    path = baseline_path(name)
    specs = parse_runs(runs) if runs else default_runs(library)
    baseline = record(specs, library, keep_errors=not runs, default_set=not runs)
    write_baseline(baseline, path)
    return path, baseline


def check(name: str, library: Library, rtol: float = DEFAULT_RTOL) -> tuple[Path, list[RunDiff], int]:
    """Rerun the runs of baseline ``name``; returns its path, the runs that differ, and how many ran.

    Runs that fail now are reported, not raised. A baseline of the default set also reports runs that
    the default set has gained (a new chip, system or model) as added.
    """
    path = baseline_path(name)
    old = read_baseline(path)
    specs = [parse_run(r.run) for r in old.runs]
    if old.default_set:
        known = {spec.id for spec in specs}
        specs += [spec for spec in default_runs(library) if spec.id not in known]
    new = record(specs, library, keep_errors=True, default_set=old.default_set)
    runs = len({r.run for r in old.runs} | {r.run for r in new.runs})
    return path, compare(old, new, rtol), runs
