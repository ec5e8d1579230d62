"""Fit a software stack's parameters to the rows of a validation table that ran with that stack.

A stack's parameters are its dispatch costs (``per_op``, ``framework``, ``host``, ``per_step``; see
:class:`archsim.spec.software.Dispatch`) and its kernels' compute fraction at one precision
(``compute.int8``: :class:`archsim.spec.software.Kernels`). Only the rows whose run uses the stack
(the one they name, or their chip's default for their trace) are used, except those marked ``fit:
false``, and never more parameters than rows. The search and the cross-validation are those of
:mod:`archsim.validation.calibrate`: the same objective, Nelder-Mead from the values in the file,
k-fold held-out errors.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from archsim.spec.common import Precision
from archsim.spec.efficiency import Efficiency
from archsim.spec.library import Library
from archsim.spec.software import DISPATCH_FIELDS, SoftwareSpec
from archsim.spec.validation import ValidationSpec
from archsim.validation.calibrate import fit_and_cross_validate, format_value
from archsim.validation.run import Prepared, ValidationReport, calibration_table, prepare, report_for, software_name

COMPUTE_PREFIX = "compute."
"""A parameter ``compute.PRECISION`` is the stack's matrix-kernel compute fraction at that precision."""


@dataclass(frozen=True)
class SoftwareFit:
    """The outcome of fitting one stack."""

    software: str
    names: tuple[str, ...]
    """Parameters in the stack's own names (``per_op``, ``compute.int8``)."""
    before: dict[str, float]
    after: dict[str, float]
    rows: int
    report_before: ValidationReport
    report_after: ValidationReport
    cross_validated: dict[str, float | None]
    evaluations: int


def _field(name: str) -> str:
    """The efficiency field a stack parameter is searched as."""
    if name in DISPATCH_FIELDS:
        return DISPATCH_FIELDS[name]
    if name.startswith(COMPUTE_PREFIX):
        Precision(name.removeprefix(COMPUTE_PREFIX))
        return "compute"
    raise ValueError(f"a software stack has no parameter {name!r} (per_op, framework, host, per_step, compute.P)")


def _apply(spec: SoftwareSpec, efficiency: Efficiency, names: Sequence[str]) -> SoftwareSpec:
    stack = spec.with_efficiency(efficiency)
    for name in names:
        if name.startswith(COMPUTE_PREFIX):
            assert efficiency.compute is not None
            compute = {**stack.kernels.compute, Precision(name.removeprefix(COMPUTE_PREFIX)): efficiency.compute}
            stack = stack.model_copy(update={"kernels": stack.kernels.model_copy(update={"compute": compute})})
    return stack


def _values(spec: SoftwareSpec, names: Sequence[str], library: Library) -> Efficiency:
    """The stack's current values as an Efficiency (a missing compute fraction starts at the family's)."""
    values: dict[str, float] = {}
    for name in names:
        if name in DISPATCH_FIELDS:
            values[DISPATCH_FIELDS[name]] = getattr(spec.dispatch, name)
        else:
            precision = Precision(name.removeprefix(COMPUTE_PREFIX))
            family = library.family(spec.family).efficiency.compute
            found = spec.kernels.compute.get(precision, family)
            assert found is not None
            values["compute"] = found
    return Efficiency().model_copy(update=values)


def fit_software(
    library: Library,
    name: str,
    parameters: Sequence[str],
    table: str = "published",
    folds: int = 5,
    max_evaluations: int = 400,
    progress: Callable[[str], None] | None = None,
) -> SoftwareFit:
    """Fit ``parameters`` of stack ``name`` to the rows of ``table`` that run with it; cross-validate."""
    spec_table: ValidationSpec = calibration_table(library, table)
    stack = library.software(name)
    fields = [_field(p) for p in parameters]
    if len(set(fields)) != len(fields):
        raise ValueError("fit one compute fraction at a time")
    candidates = [row for row in spec_table.rows if row.fit]
    rows = [p for p in (prepare(row, library) for row in candidates) if software_name(p, library) == stack.name]
    if not rows:
        raise ValueError(f"{table} has no rows that run with software {stack.name}")
    if len(parameters) > len(rows):
        raise ValueError(f"{len(rows)} {stack.name} rows cannot determine {len(parameters)} parameters")
    start = _values(stack, parameters, library)

    def run(subset: Sequence[Prepared], efficiency: Efficiency) -> ValidationReport:
        return report_for(spec_table, subset, library, None, stacks={stack.name: _apply(stack, efficiency, parameters)})

    after, cross, count = fit_and_cross_validate(rows, run, start, fields, folds, max_evaluations, stack.name, progress)
    before = {p: getattr(start, f) for p, f in zip(parameters, fields, strict=True)}
    fitted = {p: getattr(after, f) for p, f in zip(parameters, fields, strict=True)}
    return SoftwareFit(
        stack.name,
        tuple(parameters),
        before,
        fitted,
        len(rows),
        run(rows, start),
        run(rows, after),
        cross,
        count,
    )


def write_software(path: Path, fit: SoftwareFit, table: str) -> None:
    """Rewrite the fitted values in a software file (each key must appear once), keeping the rest."""
    text = path.read_text(encoding="utf-8")
    for name in fit.names:
        key = name.removeprefix(COMPUTE_PREFIX)
        value = fit.after[name]
        written = format_value(DISPATCH_FIELDS.get(name, "compute"), value)
        pattern = re.compile(rf"^(\s+{re.escape(key)}: ).*$", re.MULTILINE)
        if len(pattern.findall(text)) != 1:
            raise ValueError(f"{path}: {name} must appear exactly once")
        text = pattern.sub(rf"\g<1>{written.replace(chr(92), chr(92) * 2)}", text)
    for name in fit.names:
        key = f"kernels.{name}" if name.startswith(COMPUTE_PREFIX) else f"dispatch.{name}"
        others = [n for n in fit.names if n != name]
        with_others = f" (with {', '.join(others)})" if others else ""
        rows = f"{fit.rows} rows of validation/{table}.yaml that run"
        if fit.rows == 1:
            rows = f"row of validation/{table}.yaml that runs"
        note = (
            f'  {key}: "fitted by scripts/calibrate.py --software {fit.software}{with_others} to the {rows} '
            f'with it (calibration files only)"'
        )
        text, replaced = re.subn(rf"^  {re.escape(key)}: .*$", note, text, flags=re.MULTILINE)
        if replaced == 0:
            text = text.replace("\nsources:\n", f"\nsources:\n{note}\n", 1)
    temporary = path.with_suffix(".yaml.tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)
