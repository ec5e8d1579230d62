"""Sweep descriptions (``kind: sweep``): a design space to explore, as data.

A sweep names one or more base targets (chips or systems), the workloads to run on each variant, run
settings, and axes that change fields of the target's descriptions by dotted path::

    schema_version: 1
    kind: sweep
    name: systolic-shape
    target: systolic-32x32            # or a list: [v100, gc200, ascend910, tpu-v3]
    workloads: [resnet50, {name: bert-large, batch: 8}]
    settings: {mode: infer}           # defaults of every run (see RunSettings)
    grid:                             # crossed with each other
      chip.systolic.array_rows: [32, 64, 128]
      chip.systolic.ifmap_sram: {start: "64 KiB", stop: "4 MiB", factor: 2}
    zip:                              # each group moves together, crossed with the grid
      - {chip.systolic.array_cols: [32, 64], chip.clock: ["1 GHz", "0.9 GHz"]}
    points:                           # explicit configurations, crossed with the rest
      - {chip.systolic.dataflow: ws}
    constraints: ["chip.systolic.array_rows * chip.systolic.array_cols <= 16384"]

Axis paths start with ``chip.`` (the target's chip, also a system's chip), ``system.`` (the target
system), ``link.NAME.`` (a link type), ``memory.NAME.`` (a memory technology) or ``run.`` (a run
setting: ``batch``, ``nodes``, ``precision``, ...). Values are written as in the description files
(quantities as strings with their unit). The expansion and the checks of each variant live in
:mod:`archsim.sweep.expand`.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    PlainValidator,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from archsim.errors import UnitError
from archsim.spec.common import Count, Fusion, Name, Precision, Spec, StreamingMemory
from archsim.units import dimension_of, parse_any

ROOTS = ("chip", "system", "link", "memory", "run")
RUN_SETTINGS = (
    "mode",
    "batch",
    "precision",
    "seq_len",
    "nodes",
    "pipeline_stages",
    "microbatches",
    "schedule",
    "collective",
    "overlap",
    "fusion",
    "recompute",
    "padding",
    "software",
    "streaming_memory",
    "time_to_train",
    "optimizer",
    "epochs",
    "input_decode",
    "prompt_len",
    "gen_len",
    "tensor_parallel",
    "sequence_parallel",
    "interleave",
    "zero",
    "expert_parallel",
    "bn_group",
)
MAX_AXIS_VALUES = 100_000
"""Values one axis may take (a range that would produce more is refused)."""
MAX_CONFIGURATIONS = 1_000_000
"""Configurations one sweep may expand to, before constraints."""

_PATH = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9][a-z0-9_.-]*)+$")
_QUANTITY = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(\S.*?)?\s*$")

Scalar = StrictInt | StrictFloat | StrictBool | str


class RunSettings(Spec):
    """Settings of every run of a sweep (the arguments of :func:`archsim.simulate`); None: its default."""

    mode: Literal["infer", "train", "prefill", "decode", "generate"] = "infer"
    batch: Count | None = None
    precision: Precision | None = None
    seq_len: Count | None = None
    nodes: Count | None = None
    pipeline_stages: Count = 1
    microbatches: Count | None = None
    schedule: Literal["1f1b", "gpipe"] = "1f1b"
    collective: Literal["ring", "tree", "hierarchical", "torus"] | None = None
    overlap: StrictBool = True
    fusion: Fusion | None = None
    """None: what the software does."""
    recompute: StrictBool | Literal["none", "selective", "full"] | None = None
    """``none``, ``selective`` or ``full`` (True: full, False: none); None: what the software does."""
    padding: Literal["kept", "removed", "packed"] | None = None
    """Whether a training step computes its sequences' padding; None: what the software does."""
    software: Name | None = None
    """The software stack (a ``software/`` name; None: the chip's default)."""
    streaming_memory: StreamingMemory = StreamingMemory.NONE
    time_to_train: StrictBool = False
    """Add the time to train (:func:`archsim.simulate_training`; training runs only)."""
    optimizer: Name | None = None
    """Optimizer of the convergence data (None: the data's default)."""
    epochs: Annotated[StrictInt | StrictFloat, Field(gt=0)] | None = None
    """The run's own schedule in epochs, trained in full (None: the convergence data's epochs)."""
    input_decode: Literal["host", "device"] | None = None
    """Feed each step from the system's input pipeline, decoding on the host or on the chips."""
    prompt_len: Count | None = None
    """Prompt tokens per sequence of the text-generation modes (None: 128)."""
    gen_len: Count | None = None
    """Tokens generated per sequence of ``decode`` and ``generate`` (None: 128)."""
    tensor_parallel: Count = 1
    """Chips that split each layer of a decoder model (a system target)."""
    sequence_parallel: StrictBool = False
    """Sequence parallelism within the tensor-parallel group."""
    interleave: Count = 1
    """Model chunks per pipeline stage (interleaved 1F1B)."""
    zero: Literal[0, 1, 2, 3] = 0
    """ZeRO stage of a data-parallel training run (0: none)."""
    expert_parallel: Count = 1
    """Chips of the data-parallel group that share a mixture of experts' experts."""
    bn_group: Count = 1
    """Consecutive chips that share their batch-norm statistics in training (synchronized batch norm)."""


class WorkloadEntry(Spec):
    """A workload with its own settings (they override the sweep's ``settings``)."""

    name: Annotated[str, Field(min_length=1)]
    mode: Literal["infer", "train"] | None = None
    batch: Count | None = None
    precision: Precision | None = None
    seq_len: Count | None = None


class Range(Spec):
    """Values from ``start`` to ``stop`` (inclusive), by adding ``step`` or multiplying by ``factor``.

    ``start`` and ``stop`` are numbers, or quantity strings in the same unit (``"64 KiB"`` to
    ``"4 MiB"``: the numbers are stepped and the unit is written back on each value).
    """

    start: StrictInt | StrictFloat | str
    stop: StrictInt | StrictFloat | str
    step: StrictInt | StrictFloat | None = None
    factor: StrictInt | StrictFloat | None = None

    @model_validator(mode="after")
    def _one_rule(self) -> Range:
        if (self.step is None) == (self.factor is None):
            raise ValueError("give exactly one of step and factor")
        for rule in (self.step, self.factor):
            if rule is not None and not math.isfinite(rule):
                raise ValueError(f"step and factor must be finite, got {rule!r}")
        if self.step is not None and self.step <= 0:
            raise ValueError(f"step must be positive, got {self.step!r}")
        if self.factor is not None and self.factor <= 1:
            raise ValueError(f"factor must be above 1, got {self.factor!r}")
        self.values()
        return self

    def values(self) -> list[Any]:
        """The values of the range, in order (quantities as strings in ``start``'s unit)."""
        start, unit = _split(self.start, "start")
        stop, stop_unit = _split(self.stop, "stop")
        if unit != stop_unit:
            stop = _in_unit(self.stop, unit, stop_unit)
        if stop < start or (self.factor is not None and start <= 0):
            raise ValueError("stop must not be below start (and a geometric range must start above 0)")
        if self.factor is not None:
            steps = math.log(stop / start, self.factor)
        else:
            assert self.step is not None
            steps = (stop - start) / self.step
        if not math.isfinite(steps) or steps >= MAX_AXIS_VALUES:
            raise ValueError(f"the range has more than the {MAX_AXIS_VALUES} values allowed")
        count = math.floor(steps + 1e-9) + 1
        if count > MAX_AXIS_VALUES:
            raise ValueError(f"the range has {count} values, more than the {MAX_AXIS_VALUES} allowed")
        integral = all(isinstance(v, int) for v in (start, self.step or 1, self.factor or 1))
        numbers: list[Any] = []
        for i in range(count):
            value = start * self.factor**i if self.factor is not None else start + i * (self.step or 0)
            numbers.append(int(value) if integral else round(float(value), 12))
        if unit is None:
            return numbers
        return [f"{n:g} {unit}" if isinstance(n, float) else f"{n} {unit}" for n in numbers]


def _in_unit(stop: object, unit: str | None, stop_unit: str | None) -> float:
    """``stop`` as a number of ``unit`` (``"8 MiB"`` in KiB is 8192), when both are quantities of one dimension."""
    if unit is None or stop_unit is None or dimension_of(f"1 {unit}") is None:
        raise ValueError(f"start and stop must both be numbers or quantities, got units {unit!r} and {stop_unit!r}")
    if dimension_of(f"1 {unit}") != dimension_of(stop):
        raise ValueError(f"start and stop must be quantities of one dimension, got units {unit!r} and {stop_unit!r}")
    try:
        return parse_any(stop) / parse_any(f"1 {unit}")
    except UnitError as err:
        raise ValueError(f"stop: {err.problem}") from None


def _split(value: object, field: str) -> tuple[Any, str | None]:
    """A range bound -> (number, unit or None)."""
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"{field}: must be a finite number, got {value!r}")
        return value, None
    match = _QUANTITY.match(str(value))
    if match is None or match.group(2) is None:
        raise ValueError(f"{field}: expected a number or a quantity such as '64 KiB', got {value!r}")
    text = match.group(1)
    number: int | float = int(text) if re.fullmatch(r"[-+]?\d+", text) else float(text)
    if not math.isfinite(number):
        raise ValueError(f"{field}: must be a finite number, got {value!r}")
    return number, match.group(2)


def _axis_values(value: object) -> list[Any] | Range:
    """A grid axis: a non-empty list of values, or a range mapping."""
    if isinstance(value, Range):
        return value
    if isinstance(value, dict):
        try:
            return Range.model_validate(value)
        except ValidationError as err:
            first = err.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"])
            message = str(first["msg"]).removeprefix("Value error, ")
            raise ValueError(f"{where}: {message}" if where else message) from None
    if isinstance(value, list) and 0 < len(value) <= MAX_AXIS_VALUES:
        return value
    raise ValueError(
        f"expected a list of 1 to {MAX_AXIS_VALUES} values or a range {{start, stop, step or factor}}, got {value!r}"[
            :200
        ]
    )


AxisValues = Annotated[list[Any] | Range, PlainValidator(_axis_values)]


def _check_path(path: str) -> str:
    if not _PATH.match(path) or path.split(".", 1)[0] not in ROOTS:
        raise ValueError(f"axis {path!r}: a path must start with one of {', '.join(r + '.' for r in ROOTS)}")
    root, rest = path.split(".", 1)
    if root in ("link", "memory") and "." not in rest:
        raise ValueError(f"axis {path!r}: write {root}.NAME.FIELD (the {root} description's name, then its field)")
    if root == "run" and rest not in RUN_SETTINGS:
        raise ValueError(f"axis {path!r}: run settings are {', '.join(RUN_SETTINGS)}")
    return path


class SweepSpec(Spec):
    """A whole sweep description (``kind: sweep``)."""

    schema_version: Literal[1]
    kind: Literal["sweep"]
    name: Name
    description: str = ""
    target: Name | Annotated[list[str], Field(min_length=1)]
    """A chip or system (name, alias or path), or a list of them: each is a base of the variants."""
    workloads: Annotated[list[Annotated[str, Field(min_length=1)] | WorkloadEntry], Field(min_length=1)]
    settings: RunSettings = Field(default_factory=RunSettings)
    grid: dict[str, AxisValues] = Field(default_factory=dict)
    zip: list[dict[str, Annotated[list[Any], Field(min_length=1, max_length=MAX_AXIS_VALUES)]]] = Field(
        default_factory=list
    )
    points: list[dict[str, Any]] = Field(default_factory=list)
    constraints: list[Annotated[str, Field(min_length=1, max_length=1000)]] = Field(default_factory=list)
    rescale_peak: StrictBool = True
    """Move the chip's published peaks with its unit counts and clock (a variant with twice the PEs
    gets twice the peak), so that variants pass the chip's peak check; false keeps the file's peaks."""

    @field_validator("grid")
    @classmethod
    def _grid_paths(cls, grid: dict[str, Any]) -> dict[str, Any]:
        for path in grid:
            _check_path(path)
        return grid

    @field_validator("zip")
    @classmethod
    def _zip_groups(cls, groups: list[dict[str, list[Any]]]) -> list[dict[str, list[Any]]]:
        for i, group in enumerate(groups):
            if not group:
                raise ValueError(f"[{i}]: an empty group")
            lengths = {len(v) for v in group.values()}
            if len(lengths) != 1:
                raise ValueError(f"[{i}]: the lists of a group must have the same length, got {sorted(lengths)}")
            for path in group:
                _check_path(path)
        return groups

    @field_validator("points")
    @classmethod
    def _point_paths(cls, points: list[dict[str, Any]]) -> list[dict[str, Any]]:
        keys = {tuple(sorted(p)) for p in points}
        if len(keys) > 1:
            raise ValueError("every point must set the same paths")
        for point in points:
            for path in point:
                _check_path(path)
        return points

    @model_validator(mode="after")
    def _distinct_axes(self) -> SweepSpec:
        seen: set[str] = set()
        for path in self.axis_paths:
            if path in seen:
                raise ValueError(f"axis {path!r} is given twice")
            seen.add(path)
        targets = self.targets
        if len(set(targets)) != len(targets):
            raise ValueError("target: a target is listed twice")
        count = len(targets)
        for group in self.groups():
            count *= len(group)
        if count > MAX_CONFIGURATIONS:
            raise ValueError(f"the sweep expands to {count} configurations, more than the {MAX_CONFIGURATIONS} allowed")
        return self

    @property
    def targets(self) -> list[str]:
        """The base targets, in order."""
        return [self.target] if isinstance(self.target, str) else list(self.target)

    @property
    def workload_entries(self) -> list[WorkloadEntry]:
        """The workloads, each as an entry."""
        return [WorkloadEntry(name=w) if isinstance(w, str) else w for w in self.workloads]

    @property
    def axis_paths(self) -> list[str]:
        """Every axis path, in the order of the columns of the results: grid, zip groups, points."""
        paths = list(self.grid)
        for group in self.zip:
            paths += list(group)
        if self.points:
            paths += list(self.points[0])
        return paths

    def groups(self) -> list[list[dict[str, Any]]]:
        """The factors of the cross product: each a list of partial assignments (path -> value)."""
        groups: list[list[dict[str, Any]]] = []
        for path, values in self.grid.items():
            listed = values.values() if isinstance(values, Range) else values
            groups.append([{path: v} for v in listed])
        for group in self.zip:
            length = len(next(iter(group.values())))
            groups.append([{path: values[i] for path, values in group.items()} for i in range(length)])
        if self.points:
            groups.append([dict(p) for p in self.points])
        return groups

    def reduced(self, max_values: int) -> SweepSpec:
        """A smaller copy: at most ``max_values`` values per axis (first, last and evenly between).

        Notebooks and tests use it to run a sweep's shape at a small size.
        """

        def pick(values: list[Any]) -> list[Any]:
            if len(values) <= max_values:
                return list(values)
            if max_values == 1:
                return [values[0]]
            step = (len(values) - 1) / (max_values - 1)
            return [values[round(i * step)] for i in range(max_values)]

        grid = {p: pick(v.values() if isinstance(v, Range) else v) for p, v in self.grid.items()}
        zipped = []
        for group in self.zip:
            indices = pick(list(range(len(next(iter(group.values()))))))
            zipped.append({p: [v[i] for i in indices] for p, v in group.items()})
        return self.model_copy(update={"grid": grid, "zip": zipped, "points": pick(self.points)})
