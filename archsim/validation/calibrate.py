"""Fit a family's efficiency parameters to the rows of a validation table.

The parameters (documented on :class:`archsim.spec.efficiency.Efficiency`) are shared by every chip of the
family and every workload: one set of values per family, nothing per row. The objective is the
mean, over the levels present (operator; system: single- and multi-chip steps together), of each
level's mean absolute percentage error, so that fifty kernel timings do not drown out eight system
throughputs, nor one multi-chip row weigh as much as all the kernels. Fractions
are searched in logit space and times in log space with Nelder-Mead (scipy), from the values in the
family file.

Over-fitting is guarded by k-fold cross-validation: rows are dealt into ``folds`` folds by their
position in the table, the parameters are refitted without each fold (warm-started from the full
fit), and each held-out row is predicted with parameters that never saw it. The cross-validated
MAPE is reported next to the in-sample one.
"""

from __future__ import annotations

import math
import re
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from archsim.outfile import write_file
from archsim.spec.common import Duration
from archsim.spec.efficiency import Efficiency
from archsim.spec.family import required
from archsim.spec.library import Library
from archsim.spec.validation import Group, Level, ValidationSpec
from archsim.validation.run import Prepared, ValidationReport, calibration_table, prepare, report_for

TIME_FIELDS = frozenset(
    name for name, field in Efficiency.model_fields.items() if Duration in typing.get_args(field.annotation)
)
"""Efficiency fields that are times (searched in log space); the others are fractions."""
TIME_FLOOR_S = 1e-9
"""Fitted times below this (a nanosecond, far below any per-op or per-step cost) are written as zero."""
FRACTION_FLOOR = 0.02
"""Smallest fraction the search may reach (keeps the logit finite)."""


@dataclass(frozen=True)
class Fit:
    """The outcome of fitting one family."""

    family: str
    names: tuple[str, ...]
    before: Efficiency
    after: Efficiency
    rows: int
    report_before: ValidationReport
    report_after: ValidationReport
    cross_validated: dict[str, float | None]
    """MAPE per group (and ``overall``) of held-out predictions."""
    evaluations: int


def _encode(efficiency: Efficiency, names: Sequence[str]) -> list[float]:
    values = []
    for name in names:
        value = getattr(efficiency, name)
        if name in TIME_FIELDS:
            values.append(math.log(max(value, 1e-9)))
        else:
            p = min(max(value, FRACTION_FLOOR), 1.0 - 1e-6)
            values.append(math.log(p / (1.0 - p)))
    return values


def _decode(x: Sequence[float], base: Efficiency, names: Sequence[str]) -> Efficiency:
    update: dict[str, float] = {}
    for name, value in zip(names, x, strict=True):
        if name in TIME_FIELDS:
            update[name] = math.exp(min(max(value, -30.0), 5.0))
        else:
            update[name] = max(FRACTION_FLOOR, min(1.0, 1.0 / (1.0 + math.exp(-value))))
    return base.model_copy(update=update)


def _round(efficiency: Efficiency, names: Sequence[str]) -> Efficiency:
    """Three significant digits: what the YAML file can state without false precision."""
    return efficiency.model_copy(update={n: float(f"{getattr(efficiency, n):.3g}") for n in names})


def objective(report: ValidationReport) -> float:
    """Mean over the levels present (operator, system) of each level's MAPE."""
    values = [m for level in Level if (m := report.mape(level)) is not None]
    return sum(values) / len(values)


def _minimize(
    evaluate: Callable[[Efficiency], float], start: Efficiency, names: Sequence[str], max_evaluations: int
) -> tuple[Efficiency, int]:
    from scipy.optimize import minimize  # imported here: only calibration needs scipy

    result = minimize(
        lambda x: evaluate(_decode(x, start, names)),
        _encode(start, names),
        method="Nelder-Mead",
        options={"maxfev": max_evaluations, "xatol": 1e-3, "fatol": 1e-5, "adaptive": True},
    )
    return _round(_decode(result.x, start, names), names), int(result.nfev)


def fit_family(
    library: Library,
    family: str,
    table: str = "published",
    folds: int = 5,
    max_evaluations: int = 400,
    progress: Callable[[str], None] | None = None,
    parameters: Sequence[str] | None = None,
) -> Fit:
    """Fit ``family``'s efficiency parameters to its rows of ``table`` and cross-validate the fit.

    ``parameters`` names the fields to fit (None: all the family requires); the others keep the
    values in the family file. A family may not fit more parameters than it has rows: with fewer
    rows the fit would be free to match every row exactly and say nothing about other runs.
    """
    spec: ValidationSpec = calibration_table(library, table)
    every = [prepare(row, library) for row in spec.rows if row.fit]
    # busbw rows time a collective library's call, which no family parameter changes
    rows = [p for p in every if p.family == family and p.built is not None]
    if not rows:
        raise ValueError(f"{table} has no rows for family {family}")
    names = tuple(parameters) if parameters else required(family)
    unknown = [n for n in names if n not in required(family)]
    if unknown:
        raise ValueError(f"family {family} has no efficiency parameter {', '.join(unknown)}")
    if len(names) > len(rows):
        raise ValueError(
            f"{len(rows)} {family} rows cannot determine {len(names)} parameters; "
            f"name at most {len(rows)} with --parameter"
        )
    before = library.family(family).efficiency

    def run(subset: Sequence[Prepared], efficiency: Efficiency) -> ValidationReport:
        return report_for(spec, subset, library, {family: efficiency})

    after, cross, count = fit_and_cross_validate(rows, run, before, names, folds, max_evaluations, family, progress)
    return Fit(family, names, before, after, len(rows), run(rows, before), run(rows, after), cross, count)


def fit_and_cross_validate(
    rows: Sequence[Prepared],
    run: Callable[[Sequence[Prepared], Efficiency], ValidationReport],
    start: Efficiency,
    names: Sequence[str],
    folds: int,
    max_evaluations: int,
    label: str,
    progress: Callable[[str], None] | None = None,
) -> tuple[Efficiency, dict[str, float | None], int]:
    """Fit the Efficiency fields ``names`` from ``start`` to ``rows``, then cross-validate the fit.

    ``run(subset, efficiency)`` predicts a subset of the rows with candidate values. Each of
    ``min(folds, len(rows))`` folds refits on the other rows (warm-started from the full fit) and
    predicts its own. Returns the fitted values, the held-out MAPE per group and overall, and how
    many predictions of the whole subset the search made.
    """
    count = 0

    def evaluate_on(subset: Sequence[Prepared]) -> Callable[[Efficiency], float]:
        def evaluate(efficiency: Efficiency) -> float:
            nonlocal count
            count += 1
            return objective(run(subset, efficiency))

        return evaluate

    if progress:
        progress(f"{label}: fitting {len(names)} parameters to {len(rows)} rows")
    after, _ = _minimize(evaluate_on(rows), start, names, max_evaluations)
    held_out: dict[str, float] = {}
    k = min(folds, len(rows))
    for fold in range(k if k > 1 else 0):
        train = [p for i, p in enumerate(rows) if i % k != fold]
        test = [p for i, p in enumerate(rows) if i % k == fold]
        if progress:
            progress(f"{label}: cross-validation fold {fold + 1}/{k}")
        fold_fit, _ = _minimize(evaluate_on(train), after, names, max_evaluations // 2)
        for result in run(test, fold_fit).rows:
            held_out[result.row.id] = abs(result.error)
    return after, _group_mape(rows, held_out), count


def _group_mape(rows: Sequence[Prepared], errors: dict[str, float]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for group in Group:
        values = [errors[p.row.id] for p in rows if p.row.group is group and p.row.id in errors]
        out[group.value] = sum(values) / len(values) if values else None
    out["overall"] = sum(errors.values()) / len(errors) if errors else None
    return out


def format_value(name: str, value: float) -> str:
    """A fitted value as it is written in YAML: a unit string for times, a plain number otherwise.

    A time below :data:`TIME_FLOOR_S` is the search's stand-in for zero and is written as ``"0 s"``.
    """
    if name in TIME_FIELDS:
        if value < TIME_FLOOR_S:
            return '"0 s"'
        for unit, factor in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
            if value >= factor:
                return f'"{value / factor:.3g} {unit}"'
        return f'"{value / 1e-9:.3g} ns"'
    return f"{value:.3g}"


def write_family(path: Path, fit: Fit, table: str) -> None:
    """Rewrite the ``efficiency:`` values and their source line in a family file, keeping the rest."""
    text = path.read_text(encoding="utf-8")
    for name in fit.names:
        pattern = re.compile(rf"^(  {name}: ).*$", re.MULTILINE)
        if not pattern.search(text):
            raise ValueError(f"{path}: efficiency.{name} not found")
        value = format_value(name, getattr(fit.after, name)).replace("\\", r"\\")
        text = pattern.sub(rf"\g<1>{value}", text)
    which = (
        f"{len(fit.names)} parameters shared by every chip of the family"
        if set(fit.names) == set(required(fit.family))
        else f"only {', '.join(fit.names)} fitted, the others as set by hand"
    )
    source = (
        f'  efficiency: "fitted by scripts/calibrate.py to the {fit.rows} {fit.family} rows of '
        f'validation/{table}.yaml (calibration.csv only); {which}"'
    )
    text, replaced = re.subn(r"^  efficiency: .*$", source, text, flags=re.MULTILINE)
    if replaced != 1:
        raise ValueError(f"{path}: sources.efficiency not found")
    write_file(path, text, "")
