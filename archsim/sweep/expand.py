"""Expansion of a sweep into configurations, and of a configuration into a variant library.

A *configuration* is one base target with one value per axis; a *task* is a configuration with one
workload (one row of the results). Each task has a stable key: a hash of the canonical JSON of the
library's fingerprint (its description files' content), its target, axis values (as written),
workload entry, run settings and ``rescale_peak``, so that a rerun of the same sweep recognises the
rows it already has, and none whose descriptions have changed since.

:func:`variant` applies a configuration's ``chip.``, ``system.``, ``link.`` and ``memory.`` values to
copies of the descriptions' YAML data, validates them like any description (quantities parsed,
cross-field checks run) and returns a :class:`~archsim.spec.library.Library` in which the variants
replace the originals, with the run arguments the ``run.`` values and the settings give.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast, get_args

from pydantic import BaseModel, ValidationError

from archsim.errors import ArchsimError, LookupFailed, SpecError, UnitError
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Precision
from archsim.spec.library import SPEC_CLASSES, Entry, Library
from archsim.spec.registry import family_definition, plugin_modules
from archsim.spec.sweep import RunSettings, SweepSpec, WorkloadEntry
from archsim.spec.yamlio import validate
from archsim.sweep.constraints import Constraint
from archsim.units import Dimension, parse, parse_any


@dataclass(frozen=True)
class Configuration:
    """One base target and one value per axis (as written in the sweep, in axis order)."""

    target: str
    values: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Task:
    """One row to compute: a configuration with a workload; ``key`` is stable across runs."""

    key: str
    index: int
    """Position in the sweep's order (configurations in expansion order, workloads within each)."""
    configuration: Configuration
    workload: WorkloadEntry


def si_value(value: Any) -> Any:
    """An axis value as a column holds it: a quantity string becomes its SI number, anything else stays."""
    if isinstance(value, str):
        try:
            return parse_any(value)
        except UnitError:
            return value
    return value


def task_key(spec: SweepSpec, configuration: Configuration, workload: WorkloadEntry, library: str) -> str:
    """The stable key of a row: a hash of everything that determines its result.

    The hash is of the canonical JSON (sorted keys, no spaces) of the library's fingerprint
    (:func:`library_fingerprint`), the target, the axis values sorted by path, the workload entry, the
    settings and ``rescale_peak``: a rerun recognises the rows it already has, and recomputes them all
    once a description on the search path (or archsim's version) has changed.
    """
    return TaskKeys(spec, library).key(configuration, workload)


def library_fingerprint(library: Library) -> str:
    """A hash of archsim's version, its plug-in family modules' code and every description on ``library``'s path.

    What a row's result depends on besides the sweep: the descriptions its target, workload, family,
    memory, links and software stack come from, and the code of the plug-in families
    (:func:`~archsim.spec.registry.plugin_modules`, each module's source file). Any edit to any of them
    changes it (a conservative key: the rows of a sweep whose own descriptions did not change are
    recomputed too). archsim's own code between two commits of one version is not covered.
    """
    from archsim import __version__
    from archsim.limits import description_files

    digest = hashlib.sha256(__version__.encode())
    for module, _ in plugin_modules():
        digest.update(f"plug-in:{module}:".encode())
        digest.update(_module_source_digest(module))
    for number, root in enumerate(library.roots):
        for path in sorted(description_files(root)):
            digest.update(f"{number}:{path.relative_to(root).as_posix()}:".encode())
            try:
                content = path.read_bytes()
            except OSError as err:
                raise LookupFailed(str(path), "search path", f"cannot read: {err.strerror or err}") from None
            digest.update(hashlib.sha256(content).digest())
    return digest.hexdigest()[:32]


def _module_source_digest(module: str) -> bytes:
    """A hash of ``module``'s source file, found without importing it (empty for one without a file)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # its parent package is missing: the run itself names the module
        return b""
    origin = spec.origin if spec is not None and spec.has_location else None
    if origin is None:
        return b""
    try:
        return hashlib.sha256(Path(origin).read_bytes()).digest()
    except OSError as err:
        raise LookupFailed(origin, "plug-in family", f"cannot read: {err.strerror or err}") from None


class TaskKeys:
    """:func:`task_key` for many rows of one sweep: the JSON of what every row shares is written once."""

    def __init__(self, spec: SweepSpec, library: str) -> None:
        # the canonical object's keys in sorted order: library, rescale_peak, settings, target, values, workload
        self.head = '{"library":' + _canonical(library) + ',"rescale_peak":' + _canonical(spec.rescale_peak)
        self.head += ',"settings":' + _canonical(spec.settings.model_dump(mode="json")) + ',"target":'
        self.workloads: dict[int, str] = {}
        self.spec = spec

    def key(self, configuration: Configuration, workload: WorkloadEntry) -> str:
        """The row's key, as :func:`task_key` defines it."""
        tail = self.workloads.get(id(workload))
        if tail is None:
            tail = self.workloads[id(workload)] = ',"workload":' + _canonical(workload.model_dump(mode="json")) + "}"
        values = _canonical(sorted([path, value] for path, value in configuration.values))
        text = self.head + _canonical(configuration.target) + ',"values":' + values + tail
        return hashlib.sha256(text.encode()).hexdigest()[:32]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def iter_configurations(spec: SweepSpec, source: str) -> Iterator[Configuration]:
    """Every configuration of the sweep that its constraints keep, in a fixed order, one at a time.

    Nothing is materialized: a sweep of a million configurations is streamed in constant memory.
    """
    names = {*spec.axis_paths, "target"}
    constraints = [Constraint(text, names, source, f"constraints[{i}]") for i, text in enumerate(spec.constraints)]
    groups = spec.groups()
    paths = spec.axis_paths
    for target in spec.targets:
        for combination in itertools.product(*groups):
            assigned: dict[str, Any] = {}
            for part in combination:
                assigned.update(part)
            if constraints:
                values = {path: si_value(v) for path, v in assigned.items()}
                values["target"] = target
                if not all(c.holds(values) for c in constraints):
                    continue
            yield Configuration(target, tuple((path, assigned[path]) for path in paths))


def configurations(spec: SweepSpec, source: str) -> list[Configuration]:
    """Every configuration of the sweep that its constraints keep, in a fixed order."""
    return list(iter_configurations(spec, source))


def tasks(spec: SweepSpec, source: str, library: str) -> list[Task]:
    """Every row of the sweep, in order, each with its key (``library``: :func:`library_fingerprint`)."""
    entries = spec.workload_entries
    keys = TaskKeys(spec, library)
    rows: list[Task] = []
    for configuration in iter_configurations(spec, source):
        for workload in entries:
            key = keys.key(configuration, workload)
            rows.append(Task(key, len(rows), configuration, workload))
    return rows


def _set_path(data: dict[str, Any], parts: list[str], value: Any) -> None:
    """Set ``data[parts[0]][parts[1]]... = value``, creating missing mappings.

    ``data`` is a shallow copy of a description's data: each mapping on the path is copied before it
    is changed (once: a copy is marked by being a :class:`_Copied`), so the description's own data,
    which other variants start from, is never touched and nothing off the path is copied.
    """
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = _Copied()
        elif not isinstance(child, dict):
            raise ValueError(f"{part!r} is a {type(child).__name__}, not a section")
        elif not isinstance(child, _Copied):
            child = node[part] = _Copied(child)
        node = child
    node[parts[-1]] = value


class _Copied(dict[str, Any]):
    """A mapping of a variant's data that was copied for it (see :func:`_set_path`)."""


MEMO_SECTIONS = 4096
"""Validated sections kept by :func:`_validated_section` (least recently used dropped)."""
_SECTIONS_SEEN: OrderedDict[tuple[type[Any], str], Any] = OrderedDict()


def _validated_section(model: type[BaseModel], data: dict[str, Any]) -> BaseModel | None:
    """``data`` validated as ``model``, memoized by its ``repr``; None when it does not validate alone.

    Variants of one description share most sections, and many variants share the section an axis
    edits (a sweep's other axes vary around it). A model holding an already validated section as a
    field value takes it as it is (pydantic does not validate an instance again), so a description
    whose sections are passed validated gives the same object as from plain data; a section that
    fails alone is left as data, for the whole description's validation to report in its own words.
    """
    key = (model, repr(data))
    found = _SECTIONS_SEEN.get(key)
    if found is None:
        try:
            found = model.model_validate(data)
        except ValidationError:
            return None
        _SECTIONS_SEEN[key] = found
        while len(_SECTIONS_SEEN) > MEMO_SECTIONS:
            _SECTIONS_SEEN.popitem(last=False)
    else:
        _SECTIONS_SEEN.move_to_end(key)
    return cast(BaseModel, found)


def _section_model(annotation: Any) -> type[BaseModel] | None:
    """The one model class of a field's annotation (``X`` or ``X | None``), or None."""
    models = [a for a in (get_args(annotation) or (annotation,)) if isinstance(a, type) and issubclass(a, BaseModel)]
    return models[0] if len(models) == 1 else None


def _with_validated_sections(cls: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each section (a mapping held by a model-typed field) replaced by its validated model."""
    out = dict(data)
    for name, value in data.items():
        field = cls.model_fields.get(name)
        model = None if field is None or not isinstance(value, dict) else _section_model(field.annotation)
        if model is not None:
            section = _validated_section(model, value)
            if section is not None:
                out[name] = section
    family = data.get("family")
    if cls is ChipSpec and isinstance(family, str) and isinstance(data.get(family), dict):
        try:  # a chip's family section, written under the family's name (ChipSpec takes it validated)
            found = _validated_section(family_definition(family).section, data[family])
        except ValueError:  # an unknown family: the whole description's validation reports it
            found = None
        if found is not None:
            out[family] = found
    return out


def _rescaled_peaks(base: ChipSpec, data: dict[str, Any]) -> None:
    """Move each published peak in ``data`` by the ratio of the variant's derived peak to the base chip's.

    Problems are left for the full validation to report, so nothing happens when the variant's clock
    or family section does not validate on its own.
    """
    family = base.family
    section_data = data.get(family)
    try:
        model = family_definition(family).section
        section = _validated_section(model, section_data) if isinstance(section_data, dict) else None
        clock = parse(data.get("clock"), Dimension.FREQUENCY)
    except (ValueError, UnitError):
        return
    if section is None:
        return
    variant = base.model_copy(update={"section": section, "clock": clock})
    peaks = dict(data.get("peak") or {})
    for precision, published in base.peak.items():
        before, after = base.derived_peak(precision), variant.derived_peak(precision)
        if before and after:
            peaks[precision.value] = f"{published * after / before!r} FLOPS"
    data["peak"] = peaks


def _describe(configuration: Configuration) -> str:
    return ", ".join(f"{path}={value}" for path, value in configuration.values) or configuration.target


def variant(
    library: Library, spec: SweepSpec, source: str, configuration: Configuration
) -> tuple[Library, dict[str, Any]]:
    """The library holding the configuration's variants, and its ``run.`` values (path without ``run.``).

    Raises SpecError naming the sweep file, the configuration and the first invalid field.
    """
    target = configuration.target
    entry = library.find(["chip", "system"], target)
    entries: dict[str, Entry] = {}
    if entry.kind == "system":
        entries["system"] = entry
        entries["chip"] = library.find(["chip"], library.system(target).chip)
    else:
        entries["chip"] = entry
    run: dict[str, Any] = {}
    edited: dict[str, tuple[Entry, dict[str, Any]]] = {}
    for path, value in configuration.values:
        root, rest = path.split(".", 1)
        if root == "run":
            run[rest] = value
            continue
        if root in ("link", "memory"):
            name, rest = rest.split(".", 1)
            slot = f"{root}.{name}"
            if slot not in edited:
                found = library.find([root], name)
                edited[slot] = (found, _Copied(found.data))
        else:
            if root not in entries:
                raise SpecError(source, path, f"target {target!r} is a chip, not a system")
            slot = root
            if slot not in edited:
                edited[slot] = (entries[root], _Copied(entries[root].data))
        try:
            _set_path(edited[slot][1], rest.split("."), value)
        except ValueError as err:
            raise SpecError(source, path, str(err)) from None
    replacements: dict[Entry, Any] = {}
    for slot, (found, data) in edited.items():
        if slot == "chip" and spec.rescale_peak and not any(p.startswith("chip.peak") for p in spec.axis_paths):
            _rescaled_peaks(library.spec(found), data)
        try:
            model = SPEC_CLASSES[found.kind]
            replacements[found] = validate(model, _with_validated_sections(model, data), slot)
        except SpecError as err:  # a check across fields names them in its problem, with no field of its own
            where = f"{err.source}.{err.field}" if err.field else err.source
            raise SpecError(source, _describe(configuration), f"{where}: {err.problem}") from None
    if run:  # the run settings an axis sets take the same values as the sweep's settings
        try:
            validate(RunSettings, {**spec.settings.model_dump(), **run}, "run")
        except SpecError as err:
            raise SpecError(source, _describe(configuration), f"run.{err.field}: {err.problem}") from None
    result = library.with_specs(replacements)
    try:  # the checks across descriptions (memory ceilings, a system's chip and links)
        if "system" in entries:
            result.system(target)
        result.chip(library.system(target).chip if "system" in entries else target)
    except ArchsimError as err:
        raise SpecError(source, _describe(configuration), err.line()) from None
    return result, run


def run_arguments(spec: SweepSpec, workload: WorkloadEntry, run: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of :func:`archsim.simulate`: settings, overridden by the workload's, then by axes."""
    arguments = spec.settings.model_dump()
    for name in ("mode", "batch", "precision", "seq_len"):
        value = getattr(workload, name)
        if value is not None:
            arguments[name] = value
    arguments.update(run)
    if isinstance(arguments.get("precision"), Precision):
        arguments["precision"] = arguments["precision"].value
    return arguments
