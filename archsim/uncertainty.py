"""Error bars on every result: ``uncertainty`` and ``extrapolation`` from the calibration's own errors.

A run's ``uncertainty`` is the cross-validated mean absolute relative error of the calibration rows
most like it (``validation/uncertainty.yaml``, written by ``python scripts/calibrate.py
--uncertainty``): those of its chip's family, run with its software stack, at its level (one kernel:
``operator``; a whole step: ``system``); where the family has no row with that stack at that level,
those of the family at that level, then every row of the family. It is a fraction (0.12: the
predictions of such rows were off by 12% on average when they were held out of the fit), not a
bound. ``extrapolation`` names what lies outside what the family's rows cover: ``chip`` (no row on
this chip), ``software`` (no row with this stack), ``workload shape`` (no row of this workload, or
its batch or sequence length outside the rows' range) and ``scale`` (more chips than any row).
"""

from __future__ import annotations

from dataclasses import replace

from archsim.errors import LookupFailed
from archsim.results.records import RunResult
from archsim.spec.chip import ChipSpec
from archsim.spec.library import Library
from archsim.spec.uncertainty import ANY, Coverage, UncertaintySpec

TABLE = "uncertainty"
"""The name of the error table in the library (``validation/uncertainty.yaml``)."""


def error_table(library: Library) -> UncertaintySpec | None:
    """The library's error table, or None when it has none (a library of a user's own making)."""
    try:
        return library.uncertainty(TABLE)
    except LookupFailed:
        return None


def workload_key(workload: str) -> str:
    """What coverage compares: a model's name; ``gemm:`` or ``conv:`` for any single kernel's shape."""
    for prefix in ("gemm:", "conv:"):
        if workload.startswith(prefix):
            return prefix
    return workload


def uncertainty(table: UncertaintySpec, family: str, software: str | None, level: str) -> float | None:
    """The cross-validated error of the closest group of rows (see the module docstring), or None."""
    wanted = [(software, level), (ANY, level), (ANY, ANY)]
    for want_software, want_level in wanted:
        for entry in table.errors:
            if entry.family == family and entry.software == want_software and entry.level == want_level:
                return float(entry.cross_validated)
    return None


def extrapolation(
    coverage: Coverage | None,
    chip: str,
    software: str | None,
    workload: str,
    batch: int,
    seq_len: int | None,
    num_chips: int,
) -> tuple[str, ...]:
    """Which of chip, software, workload shape and scale the family's rows do not cover."""
    if coverage is None:
        return ("chip", "software", "workload shape", "scale")
    out = []
    if chip not in coverage.chips:
        out.append("chip")
    if software not in coverage.software:
        out.append("software")
    key = workload_key(workload)
    covered = [w for w in coverage.workloads if w.workload == key]
    shape_ok = any(
        (w.min_batch is None or w.min_batch <= batch <= (w.max_batch or batch))
        and (seq_len is None or not w.seq_lens or seq_len in w.seq_lens)
        for w in covered
    )
    if not shape_ok:
        out.append("workload shape")
    if num_chips > coverage.max_chips:
        out.append("scale")
    return tuple(out)


def with_error_bars(result: RunResult, library: Library, chip: ChipSpec, kernel: bool) -> RunResult:
    """``result`` with its ``uncertainty`` and ``extrapolation`` (``kernel``: one gemm:/conv: op)."""
    bars = error_bars(
        library, chip, kernel, result.software, result.workload, result.batch, result.seq_len, result.num_chips
    )
    if error_table(library) is None:  # no table: the uncertainty stays unknown
        return replace(result, extrapolation=bars[1])
    return replace(result, uncertainty=bars[0], extrapolation=bars[1])


def error_bars(
    library: Library,
    chip: ChipSpec,
    kernel: bool,
    software: str | None,
    workload: str,
    batch: int,
    seq_len: int | None,
    num_chips: int,
) -> tuple[float | None, tuple[str, ...]]:
    """The ``uncertainty`` and ``extrapolation`` of a run of ``workload`` on ``chip`` (see :func:`with_error_bars`)."""
    table = error_table(library)
    if table is None:
        return None, ("chip", "software", "workload shape", "scale")
    family = chip.family
    level = "operator" if kernel else "system"
    return (
        uncertainty(table, family, software, level),
        extrapolation(table.coverage.get(family), chip.name, software, workload, batch, seq_len, num_chips),
    )
