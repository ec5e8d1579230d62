"""Comparing two baselines, and the readable per-run and per-layer diff of what moved.

Two values agree when they are equal, or, for numbers, when ``|a - b| <= rtol * max(|a|, |b|)``.
Names, kinds, phases, units and bounds must be equal. A run is *changed* when any of its columns
or any of its layers disagrees, *added* when only the new results have it, *removed* when only the
old ones do, and *failing* when it fails now but did not (or fails differently).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from archsim.baseline.fileio import Baseline
from archsim.baseline.runs import LAYER_COLUMNS, RUN_COLUMNS, RunRecord, Value

DEFAULT_RTOL = 1e-9
"""Relative tolerance of a check: only rounding-level differences pass."""
DEFAULT_MAX_LAYERS = 10
"""Changed layers listed per run before the rest are counted (0 lists them all)."""
_LAYER_NAMES = tuple(name for name, _ in LAYER_COLUMNS)
_RUN_NAMES = tuple(name for name, _ in RUN_COLUMNS)


class Status(enum.StrEnum):
    """How a run differs between the old and the new results."""

    CHANGED = "changed"
    ADDED = "added"
    REMOVED = "removed"
    FAILING = "failing"


@dataclass(frozen=True)
class Change:
    """One value that moved beyond tolerance."""

    column: str
    old: Value
    new: Value

    def text(self) -> str:
        """``column old -> new (+x.x%)``."""
        move = ""
        if _is_number(self.old) and _is_number(self.new) and self.old:
            assert isinstance(self.old, int | float)
            assert isinstance(self.new, int | float)
            move = f" ({100 * (self.new - self.old) / abs(self.old):+.2f}%)"
        return f"{self.column} {_show(self.old)} -> {_show(self.new)}{move}"


@dataclass(frozen=True)
class LayerDiff:
    """A layer of a run with the values that moved."""

    index: int
    name: str
    kind: str
    phase: str
    changes: tuple[Change, ...]


@dataclass(frozen=True)
class RunDiff:
    """A run that differs, with its changed columns and layers."""

    run: str
    status: Status
    changes: tuple[Change, ...] = ()
    layers: tuple[LayerDiff, ...] = ()
    total_layers: int = 0
    message: str = ""
    """The new error of a failing run."""


def _is_number(value: Value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _show(value: Value) -> str:
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, int):
        return str(value)
    return repr(value)


def agree(old: Value, new: Value, rtol: float) -> bool:
    """True when ``old`` and ``new`` are equal, or are numbers within ``rtol`` of each other."""
    if _is_number(old) and _is_number(new):
        assert isinstance(old, int | float)
        assert isinstance(new, int | float)
        return old == new or abs(old - new) <= rtol * max(abs(old), abs(new))
    return old == new


def _changes(names: Sequence[str], old: Sequence[Value], new: Sequence[Value], rtol: float) -> tuple[Change, ...]:
    return tuple(Change(n, a, b) for n, a, b in zip(names, old, new, strict=True) if not agree(a, b, rtol))


def compare_run(old: RunRecord, new: RunRecord, rtol: float) -> RunDiff | None:
    """The difference between two records of one run, or None when they agree."""
    if old.error is not None or new.error is not None:
        if old.error == new.error:
            return None
        if new.error is not None:
            return RunDiff(new.run, Status.FAILING, message=new.error)
        return RunDiff(new.run, Status.CHANGED, message=f"used to fail: {old.error}")
    changes = _changes(_RUN_NAMES, old.values, new.values, rtol)
    layers = []
    for old_layer, new_layer in zip(old.layers, new.layers, strict=False):
        moved = _changes(_LAYER_NAMES, old_layer, new_layer, rtol)
        if moved:
            index, name, kind, phase = new_layer[:4]
            layers.append(LayerDiff(int(index or 0), str(name), str(kind), str(phase), moved))
    if not changes and not layers:
        return None
    return RunDiff(new.run, Status.CHANGED, changes, tuple(layers), len(new.layers))


def compare(old: Baseline, new: Baseline, rtol: float = DEFAULT_RTOL) -> list[RunDiff]:
    """Every run that differs: in the new order, then the runs only the old results have."""
    before = {record.run: record for record in old.runs}
    after = {record.run for record in new.runs}
    diffs: list[RunDiff] = []
    for record in new.runs:
        if record.run not in before:
            diffs.append(RunDiff(record.run, Status.ADDED, message=record.error or ""))
            continue
        diff = compare_run(before[record.run], record, rtol)
        if diff is not None:
            diffs.append(diff)
    diffs += [RunDiff(r.run, Status.REMOVED) for r in old.runs if r.run not in after]
    return diffs


def report_lines(
    diffs: Sequence[RunDiff], runs: int, rtol: float, where: str, max_layers: int = DEFAULT_MAX_LAYERS
) -> list[str]:
    """The readable report of a comparison: one block per differing run, then a summary line."""
    lines: list[str] = []
    for diff in diffs:
        if diff.status is Status.ADDED:
            lines.append(
                f"added    {diff.run} (not in the baseline{'; fails: ' + diff.message if diff.message else ''})"
            )
            continue
        if diff.status is Status.REMOVED:
            lines.append(f"removed  {diff.run} (in the baseline, not run)")
            continue
        if diff.status is Status.FAILING:
            lines.append(f"failing  {diff.run}: {diff.message}")
            continue
        lines.append(f"changed  {diff.run}{': ' + diff.message if diff.message else ''}")
        width = max((len(c.column) for c in diff.changes), default=0)
        lines += [f"    {c.column:<{width}}  {c.text()[len(c.column) + 1 :]}" for c in diff.changes]
        if diff.layers:
            lines.append(f"    layers changed: {len(diff.layers)} of {diff.total_layers}")
            shown = diff.layers if max_layers <= 0 else diff.layers[:max_layers]
            for layer in shown:
                moved = ", ".join(c.text() for c in layer.changes)
                lines.append(f"      [{layer.index}] {layer.name} ({layer.kind} {layer.phase}): {moved}")
            if len(shown) < len(diff.layers):
                lines.append(f"      ... {len(diff.layers) - len(shown)} more layers (--max-layers 0 lists all)")
    if diffs:
        lines.append(f"{where}: {len(diffs)} of {runs} runs differ beyond rtol {rtol:g}")
    else:
        lines.append(f"{where}: {runs} runs unchanged within rtol {rtol:g}")
    return lines
