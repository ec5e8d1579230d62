"""Search a sweep's design space with Optuna instead of running every configuration.

:func:`optimize` treats each factor of a sweep (a grid axis, a zip group, the points, the targets) as
one integer parameter, the index of its value (ordered, so that a sampler can learn that more rows
help), and asks an Optuna sampler (``random``, ``tpe`` or ``nsga2``) for ``batch`` configurations at a
time. Each batch is priced like sweep rows (the batch path where it applies, see
:mod:`archsim.sweep.batch`) and stored in the same ``rows.jsonl`` with the same keys, so a configuration
asked twice is priced once, and the objectives and constraints are told back to the sampler.

Objectives are numeric columns of a sweep's table (``throughput_per_mm2``, ``throughput_per_watt``,
``step_time_s``, ``area_mm2``, ...; ``area``, ``power``, ``energy`` are short names), each maximized
or minimized. A constraint is ``NAME OP VALUE [UNIT]`` (``area <= 600 mm^2``, ``power_w < 300 W``,
``chip.systolic.array_rows >= 64``); a configuration that breaks one, or that archsim refuses, is
infeasible: the samplers are told so (``constraints_func``) and it is never reported as best.

Resumable: the study lives in ``DIR/study.journal`` (Optuna's journal storage) and its settings in
``DIR/search.json``; running the same command again continues until ``trials`` trials are done, and a
different objective, constraint, sampler, seed or batch on the same folder is refused. Deterministic:
each batch's sampler is seeded with ``seed`` plus the batch's number, so a search interrupted between
batches and resumed asks for the same configurations as one that ran through.
"""

from __future__ import annotations

import json
import operator
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archsim.errors import UnitError, UsageError
from archsim.sweep.batch import batch_reason, run_batch_chunk
from archsim.sweep.constraints import Constraint
from archsim.sweep.executors import default_jobs, run_local
from archsim.sweep.expand import Configuration, Task, TaskKeys, library_fingerprint, si_value
from archsim.sweep.run import _chunks, _load, _progress, _search_path
from archsim.sweep.store import RowStore
from archsim.sweep.worker import DESIGN_COLUMNS, RESULT_COLUMNS, SweepContext, run_chunk, worker_library
from archsim.units import parse_any

if TYPE_CHECKING:
    import optuna

    from archsim.spec.sweep import SweepSpec

SAMPLERS = ("random", "tpe", "nsga2")
ALIASES = {"area": "area_mm2", "power": "power_w", "energy": "energy_j", "step_time": "step_time_s"}
"""Short names of columns in objectives and constraints."""
NON_NUMERIC = {
    "mode",
    "precision",
    "area_source",
    "software",
    "extrapolation",
    "memory_technology",
    "system",
    "schedule",
    "collective",
    "scaling_note",
    "step_bound",
    "chip",
}
OBJECTIVES = tuple(c for c in (*RESULT_COLUMNS, *DESIGN_COLUMNS) if c not in NON_NUMERIC)
"""Columns a search may optimize (numbers in every priced row)."""
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
    "==": operator.eq,
}
_CONSTRAINT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.\-]*)\s*(<=|>=|==|<|>)\s*(\S.*?)\s*$")
STUDY_FILE = "study.journal"
SETTINGS_FILE = "search.json"


@dataclass(frozen=True)
class Objective:
    """A column to maximize or minimize."""

    column: str
    maximize: bool


@dataclass(frozen=True)
class Limit:
    """A constraint on a column: ``column op value`` (value in the column's unit: SI, or mm^2 for area)."""

    text: str
    column: str
    op: str
    value: float

    def slack(self, row: dict[str, Any]) -> float:
        """Optuna's constraint value: at most 0 when the row meets it (1 when the column has no number)."""
        got = row.get(self.column)
        if not isinstance(got, int | float) or isinstance(got, bool):
            return 1.0
        if _COMPARE[self.op](got, self.value):
            return 0.0
        return float(abs(got - self.value)) or 1.0


def parse_objective(text: str, maximize: bool) -> Objective:
    """``NAME`` or ``NAME:max`` / ``NAME:min``; an unknown column is a UsageError naming the known ones."""
    name, _, direction = text.partition(":")
    column = ALIASES.get(name, name)
    if column not in OBJECTIVES:
        raise UsageError("", "--objective", f"{name!r} is not a result column (one of: {', '.join(OBJECTIVES)})")
    if direction not in ("", "max", "min"):
        raise UsageError("", "--objective", f"{text!r}: the direction after ':' must be max or min")
    return Objective(column, maximize if not direction else direction == "max")


def parse_limit(text: str, axes: Sequence[str]) -> Limit:
    """``NAME OP VALUE [UNIT]`` over a result column or an axis path; bad syntax is a UsageError."""
    match = _CONSTRAINT.match(text)
    if match is None:
        raise UsageError("", "--constraint", f"{text!r} is not NAME OP VALUE (OP one of <=, >=, <, >, ==)")
    name, op, value_text = match.groups()
    column = ALIASES.get(name, name)
    if column not in OBJECTIVES and column not in axes:
        raise UsageError("", "--constraint", f"{name!r} is not a result column or an axis of the sweep")
    area = re.fullmatch(r"([-+]?[0-9.eE+-]+)\s*mm(\^2|2|²)", value_text)
    try:
        if area is not None:
            if column != "area_mm2":
                raise UsageError("", "--constraint", f"{text!r}: mm^2 applies to area only")
            value = float(area.group(1))
        else:
            try:
                value = float(value_text)
            except ValueError:
                value = float(parse_any(value_text))
    except (ValueError, UnitError):
        raise UsageError("", "--constraint", f"{text!r}: {value_text!r} is not a number or a quantity") from None
    return Limit(text, column, op, value)


@dataclass(frozen=True)
class Settings:
    """What a search folder was started with (``search.json``); a resume must match it."""

    spec: str
    objectives: list[dict[str, Any]]
    constraints: list[str]
    sampler: str
    seed: int
    batch: int


@dataclass(frozen=True)
class SearchResult:
    """The outcome of a search: every priced trial's row, the best designs and the Pareto front."""

    objectives: list[Objective]
    limits: list[Limit]
    trials: int
    feasible: list[dict[str, Any]]
    """Feasible rows, one per distinct configuration, best first (by the first objective)."""
    pareto: list[dict[str, Any]]
    """Rows no other feasible row beats on every objective (the best row, for one objective)."""


class _Space:
    """The sweep's factors as Optuna integer parameters, and back to configurations."""

    def __init__(self, spec: SweepSpec, source: str) -> None:
        self.spec, self.groups = spec, spec.groups()
        self.names = [self._name(i, group) for i, group in enumerate(self.groups)]
        names = {*spec.axis_paths, "target"}
        self.constraints = [Constraint(t, names, source, f"constraints[{i}]") for i, t in enumerate(spec.constraints)]
        self.size = len(spec.targets)
        for group in self.groups:
            self.size *= len(group)

    @staticmethod
    def _name(index: int, group: list[dict[str, Any]]) -> str:
        paths = list(group[0])
        return paths[0] if len(paths) == 1 else f"{index}:{'+'.join(paths)}"

    def suggest(self, trial: optuna.Trial) -> Configuration | None:
        """The trial's configuration, or None when the sweep's own constraints drop it."""
        target_index = trial.suggest_int("target", 0, len(self.spec.targets) - 1) if len(self.spec.targets) > 1 else 0
        target = self.spec.targets[target_index]
        assigned: dict[str, Any] = {}
        for name, group in zip(self.names, self.groups, strict=True):
            assigned.update(group[trial.suggest_int(name, 0, len(group) - 1)])
        if self.constraints:
            values = {path: si_value(v) for path, v in assigned.items()} | {"target": target}
            if not all(c.holds(values) for c in self.constraints):
                return None
        return Configuration(target, tuple((path, assigned[path]) for path in self.spec.axis_paths))


def _sampler(name: str, seed: int, batch: int) -> optuna.samplers.BaseSampler:
    """A sampler; TPE and NSGA-II read each trial's constraints (:meth:`optuna.trial.Trial.set_constraint`)."""
    import optuna

    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True)
    return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(2, batch))


MAX_SEED = 2**32 - 1
"""Largest seed a sampler takes (Optuna seeds numpy's ``RandomState``, whose seeds are 32-bit)."""


def _check_seed(seed: object, batches: int) -> None:
    """Refuse a seed the samplers cannot take: batch ``k`` (of ``batches``) is seeded with ``seed + k``."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise UsageError("", "--seed", f"must be an integer, got {seed!r}")
    highest = MAX_SEED - (batches - 1)
    if not 0 <= seed <= highest:
        why = "" if batches == 1 else f" (its {batches} batches are seeded with --seed plus their number)"
        raise UsageError("", "--seed", f"must be between 0 and {highest}{why}, got {seed}")


def _check_settings(folder: Path, settings: Settings) -> None:
    path = folder / SETTINGS_FILE
    if path.exists():
        before = json.loads(path.read_text())
        if before != asdict(settings):
            changed = ", ".join(k for k in before if before.get(k) != asdict(settings).get(k))
            raise UsageError(str(folder), "--out", f"holds a search with other settings ({changed}): use a new folder")
    else:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(settings), indent=1) + "\n")


def optimize(
    sweep: str | os.PathLike[str],
    out: str | os.PathLike[str],
    objectives: Sequence[str],
    *,
    maximize: bool = True,
    constraints: Sequence[str] = (),
    trials: int = 200,
    sampler: str = "tpe",
    seed: int = 0,
    batch: int = 50,
    jobs: int | None = None,
    search_path: Sequence[str] = (),
    progress: bool = False,
) -> SearchResult:
    """Search ``sweep``'s space for the best configurations (see the module docstring).

    ``objectives``: columns, each ``NAME`` or ``NAME:max``/``NAME:min`` (the bare ones go the way
    ``maximize`` says); ``trials``: how many trials the folder ``out`` holds when done.
    """
    import optuna
    from optuna.storages.journal import JournalFileBackend

    if not objectives:
        raise UsageError("", "--objective", "name at least one column to optimize")
    if sampler not in SAMPLERS:
        raise UsageError("", "--sampler", f"{sampler!r} is not one of {', '.join(SAMPLERS)}")
    for flag, value in (("--trials", trials), ("--batch", batch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError("", flag, f"must be a positive integer, got {value!r}")
    _check_seed(seed, -(-trials // batch))
    folders = _search_path(search_path)
    spec, source = _load(sweep, folders)
    library = worker_library(folders)
    goals = [parse_objective(text, maximize) for text in objectives]
    limits = [parse_limit(text, spec.axis_paths) for text in constraints]
    if len(spec.workload_entries) != 1:
        raise UsageError(
            source, "workloads", f"a search scores one workload, the sweep has {len(spec.workload_entries)}"
        )
    folder = Path(out)
    settings = Settings(source, [asdict(g) for g in goals], list(constraints), sampler, seed, batch)
    _check_settings(folder, settings)
    space = _Space(spec, source)
    context = SweepContext(spec, source, folders)
    runner = run_batch_chunk if batch_reason(spec, library) is None else run_chunk
    store = RowStore(folder)
    stored = store.load()
    keys = TaskKeys(spec, library_fingerprint(library))
    workload = spec.workload_entries[0]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(folder / STUDY_FILE)))
    study = optuna.create_study(
        study_name=spec.name,
        storage=storage,
        load_if_exists=True,
        directions=["maximize" if g.maximize else "minimize" for g in goals],
    )
    workers = jobs or default_jobs()
    done = sum(1 for t in study.trials if t.state.is_finished())
    bar = _progress(trials, min(done, trials), spec.name, progress)
    try:
        while True:
            finished = [t for t in study.trials if t.state.is_finished()]
            if len(finished) >= trials:
                break
            number = len(finished) // batch
            study.sampler = _sampler(sampler, seed + number, batch)
            # trials asked before an interruption are told now, in their order; then new ones
            asked = [
                optuna.Trial(study, t._trial_id) for t in study.trials if t.state == optuna.trial.TrialState.RUNNING
            ]
            asked += [study.ask() for _ in range(min(batch, trials - len(finished)) - len(asked))]
            chosen = [(trial, space.suggest(trial)) for trial in asked]
            todo: dict[str, Task] = {}
            for _, configuration in chosen:
                if configuration is not None:
                    key = keys.key(configuration, workload)
                    if key not in stored and key not in todo:
                        todo[key] = Task(key, len(todo), configuration, workload)
            for rows in run_local(context, _chunks(list(todo.values()), workers, None, True), workers, runner):
                for row, line in zip(rows, store.append(rows), strict=True):
                    stored.setdefault(row["key"], json.loads(line))
            for trial, configuration in chosen:
                _tell(
                    study,
                    trial,
                    None if configuration is None else stored[keys.key(configuration, workload)],
                    goals,
                    limits,
                )
            bar.update(len(chosen))
    finally:
        bar.close()
    return _summary(study, stored, keys, space, workload, goals, limits)


def _tell(
    study: optuna.Study, trial: optuna.Trial, row: dict[str, Any] | None, goals: list[Objective], limits: list[Limit]
) -> None:
    """Tell the study the trial's objectives (a failed trial when archsim refused it or it is not in the sweep)."""
    import optuna

    values = [None if row is None or row.get("error") is not None else row.get(g.column) for g in goals]
    if row is None or any(not isinstance(v, int | float) or isinstance(v, bool) for v in values):
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        return
    slack = [limit.slack(row) for limit in limits]
    for index, value in enumerate(slack):
        trial.set_constraint(str(index), value)
    trial.set_user_attr("key", row["key"])
    trial.set_user_attr("feasible", all(value <= 0 for value in slack))
    study.tell(trial, [float(v) for v in values if v is not None])


def _summary(
    study: optuna.Study,
    stored: dict[str, dict[str, Any]],
    keys: TaskKeys,
    space: _Space,
    workload: Any,
    goals: list[Objective],
    limits: list[Limit],
) -> SearchResult:
    """Feasible rows (distinct, best first) and their Pareto front."""
    import optuna

    rows: dict[str, dict[str, Any]] = {}
    for trial in study.trials:
        if trial.state == optuna.trial.TrialState.COMPLETE and trial.user_attrs["feasible"]:
            key = trial.user_attrs["key"]
            rows.setdefault(key, stored[key])
    signs = [1.0 if g.maximize else -1.0 for g in goals]
    scored = sorted(
        rows.values(), key=lambda r: ([-s * r[g.column] for s, g in zip(signs, goals, strict=True)], r["key"])
    )

    def beats(a: dict[str, Any], b: dict[str, Any]) -> bool:
        better = [s * a[g.column] >= s * b[g.column] for s, g in zip(signs, goals, strict=True)]
        strictly = [s * a[g.column] > s * b[g.column] for s, g in zip(signs, goals, strict=True)]
        return all(better) and any(strictly)

    if len(goals) == 1:  # the best value, with any ties
        pareto = [r for r in scored if not scored or r[goals[0].column] == scored[0][goals[0].column]]
    else:
        pareto = [r for r in scored if not any(beats(o, r) for o in scored)]
    finished = sum(1 for t in study.trials if t.state.is_finished())
    return SearchResult(goals, limits, finished, scored, pareto)
