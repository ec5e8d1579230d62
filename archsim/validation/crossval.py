"""Cross-validated errors per family, software and level: the data behind every result's ``uncertainty``.

For each family, the parameters its calibration fitted (the family's efficiencies and its stacks'
dispatch costs, named in a :class:`Plan`) are refitted jointly without each fold of the family's rows
(leave-one-out when the family has no more rows than ``folds``), warm-started from the fitted values
in the files, and each held-out row is predicted with parameters that never saw it: a stack none of
whose rows is left in a fold cannot be refitted there, so its held-out rows are predicted with its
parameters at their priors -- a kernel compute fraction (``compute.P``) at the family's refitted
``compute``, a dispatch cost at 0 s, its lower bound -- not with the values fitted to those very
rows. The in-sample error of a row is its error with the values in the files. Rows that time a collective call
(``busbw``) depend on no family or stack parameter and are left out (their library's two parameters
are fitted to them exactly by ``scripts/fit_collectives.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from archsim.spec.efficiency import Efficiency
from archsim.spec.library import Library
from archsim.spec.software import SoftwareSpec
from archsim.spec.uncertainty import ANY
from archsim.spec.validation import ValidationSpec
from archsim.validation.calibrate import _decode, _encode, objective
from archsim.validation.calibrate_software import _apply, _field, _values
from archsim.validation.run import Prepared, calibration_table, prepare, report_for, software_name


@dataclass(frozen=True)
class Plan:
    """What the calibration fits for one family: its efficiency fields and, per stack, its parameters."""

    family: str
    parameters: tuple[str, ...]
    stacks: Mapping[str, tuple[str, ...]]

    @property
    def count(self) -> int:
        """Parameters fitted in all, family and stacks together."""
        return len(self.parameters) + sum(len(p) for p in self.stacks.values())


@dataclass(frozen=True)
class RowErrors:
    """One row's absolute relative errors: in-sample and held out."""

    prepared: Prepared
    software: str
    in_sample: float
    held_out: float


def _joint(
    library: Library, plan: Plan
) -> tuple[list[float], Callable[[Sequence[float]], tuple[Efficiency, dict[str, SoftwareSpec]]]]:
    """The start vector and the decoder of the family's and its stacks' parameters, searched together."""
    base = library.family(plan.family).efficiency
    start = _encode(base, plan.parameters)
    stacks = [(library.software(name), params) for name, params in plan.stacks.items()]
    for spec, params in stacks:
        start += _encode(_values(spec, params, library), [_field(p) for p in params])

    def decode(x: Sequence[float]) -> tuple[Efficiency, dict[str, SoftwareSpec]]:
        at = len(plan.parameters)
        family = _decode(x[:at], base, plan.parameters)
        applied = {}
        for spec, params in stacks:
            fields = [_field(p) for p in params]
            values = _decode(x[at : at + len(params)], _values(spec, params, library), fields)
            applied[spec.name] = _apply(spec, values, params)
            at += len(params)
        return family, applied

    return start, decode


def held_out_errors(
    library: Library,
    plan: Plan,
    table: str = "published",
    folds: int = 5,
    max_evaluations: int = 60,
    progress: Callable[[str], None] | None = None,
) -> list[RowErrors]:
    """Every row of the family but ``busbw`` rows and those marked ``fit: false``, with its errors."""
    from scipy.optimize import minimize  # imported here: only calibration needs scipy

    spec: ValidationSpec = calibration_table(library, table)
    rows = [
        p for p in (prepare(r, library) for r in spec.rows if r.fit) if p.family == plan.family and p.built is not None
    ]
    if plan.count > len(rows):
        raise ValueError(f"{len(rows)} {plan.family} rows cannot determine {plan.count} parameters")
    start, decode = _joint(library, plan)

    def errors(
        subset: Sequence[Prepared], x: Sequence[float], unseen: frozenset[str] = frozenset()
    ) -> dict[str, float]:
        family, stacks = decode(x)
        for name in unseen:
            stacks[name] = _prior(library.software(name), plan.stacks[name], family)
        report = report_for(spec, subset, library, {plan.family: family}, stacks=stacks)
        return {r.row.id: abs(r.error) for r in report.rows}

    def loss(subset: Sequence[Prepared]) -> Callable[[Sequence[float]], float]:
        def value(x: Sequence[float]) -> float:
            family, stacks = decode(x)
            return objective(report_for(spec, subset, library, {plan.family: family}, stacks=stacks))

        return value

    in_sample = errors(rows, start)
    held: dict[str, float] = {}
    k = min(folds, len(rows))
    for fold in range(k):
        train = [p for i, p in enumerate(rows) if i % k != fold]
        test = [p for i, p in enumerate(rows) if i % k == fold]
        if progress:
            progress(f"{plan.family}: fold {fold + 1}/{k} ({len(train)} rows to fit, {len(test)} held out)")
        options = {"maxfev": max_evaluations, "xatol": 1e-3, "fatol": 1e-5, "adaptive": True}
        fitted = minimize(loss(train), start, method="Nelder-Mead", options=options).x if train else start
        seen = {software_name(p, library) for p in train}
        unseen = frozenset(name for name in plan.stacks if name not in seen)
        held.update(errors(test, [float(v) for v in fitted], unseen))
    return [RowErrors(p, software_name(p, library), in_sample[p.row.id], held[p.row.id]) for p in rows]


def _prior(spec: SoftwareSpec, names: Sequence[str], family: Efficiency) -> SoftwareSpec:
    """``spec`` with the parameters ``names`` at their priors: compute fractions at ``family``'s, costs 0 s."""
    values: dict[str, float | None] = {_field(name): 0.0 for name in names if _field(name) != "compute"}
    if any(_field(name) == "compute" for name in names):
        values["compute"] = family.compute
    return _apply(spec, Efficiency().model_copy(update=values), names)


def grouped(results: Sequence[RowErrors]) -> list[dict[str, object]]:
    """Mean errors per (family, software, level), per (family, ``*``, level) and per (family, ``*``, ``*``)."""
    groups: dict[tuple[str, str, str], list[RowErrors]] = {}
    for r in results:
        family, level = r.prepared.family, r.prepared.row.group.level.value
        for key in ((family, r.software, level), (family, ANY, level), (family, ANY, ANY)):
            groups.setdefault(key, []).append(r)
    out = []
    for (family, software, level), members in sorted(groups.items()):
        out.append(
            {
                "family": family,
                "software": software,
                "level": level,
                "rows": len(members),
                "in_sample": _mean([m.in_sample for m in members]),
                "cross_validated": _mean([m.held_out for m in members]),
            }
        )
    return out


def _mean(values: Sequence[float]) -> float:
    value = sum(values) / len(values)
    return float(f"{value:.3g}") if math.isfinite(value) else value
