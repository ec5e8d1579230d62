"""The library of descriptions: finding chips, memories, links, families and models by name.

The search path is, in order: folders given explicitly (the CLI's ``--lib``, or ``Library(paths)``),
folders in the ``ARCHSIM_PATH`` environment variable (separated by ``os.pathsep``), then the built-in
library (``chips/``, ``memory/``, ``interconnect/``, ``software/``, ``workloads/``, ``validation/``,
``sweeps/``), which ships inside the wheel and is read from the source tree in a checkout. A name
found earlier in the path shadows a later one, so a user folder can replace a built-in chip. Every YAML
file under a folder is indexed by its ``kind``, ``name`` and ``aliases`` (kept between runs by
:mod:`archsim.spec.cache`, with each file's validated spec); a path to a file works wherever a name does.

A system with one torus level can be sliced: ``SYSTEM:AxBxC`` (``tpu-v4-pod:4x4x4``) is the system
with that level's shape replaced by the slice's, every dimension at most the pod's; which dimensions
wrap around follows the level's ``wraparound_multiple``.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archsim.errors import LookupFailed, SpecError, UsageError
from archsim.limits import description_files
from archsim.spec.cache import Problem, load_spec, read_headers, store_spec
from archsim.spec.entry import SPEC_CLASSES, Entry, builtin_roots, display_path

__all__ = ["ENV_VAR", "SPEC_CLASSES", "Entry", "Library", "builtin_roots", "display_path", "suggest"]

if TYPE_CHECKING:
    from archsim.spec.chip import ChipSpec
    from archsim.spec.collective_library import CollectiveLibrarySpec
    from archsim.spec.convergence import ConvergenceSpec
    from archsim.spec.energy import EnergySpec
    from archsim.spec.family import FamilySpec
    from archsim.spec.link import LinkSpec
    from archsim.spec.memory import MemorySpec
    from archsim.spec.mlperf import MlperfSpec
    from archsim.spec.model import ModelSpec
    from archsim.spec.software import SoftwareSpec
    from archsim.spec.sweep import SweepSpec
    from archsim.spec.system import SystemSpec
    from archsim.spec.uncertainty import UncertaintySpec
    from archsim.spec.validation import ValidationSpec

ENV_VAR = "ARCHSIM_PATH"


def suggest(name: str, known: Sequence[str]) -> str:
    """What to tell a user who typed an unknown ``name``: the closest of ``known``, else where to look.

    Close means :func:`difflib.get_close_matches` over case-folded names (at most three); with no close
    name, a short list is given whole and a long one is left to ``archsim list``.
    """
    import difflib  # only a misspelt name needs it: not loaded by every run

    by_folded = {n.casefold(): n for n in sorted(known, reverse=True)}
    close = difflib.get_close_matches(name.casefold(), list(by_folded), n=3, cutoff=0.6)
    if close:
        names = [by_folded[c] for c in close]
        return f"did you mean {' or '.join([', '.join(names[:-1]), names[-1]] if names[:-1] else names)}?"
    if len(known) <= 12:
        return f"known: {', '.join(known) or 'none'}"
    return "`archsim list` shows the known names"


class Library:
    """An indexed search path of description folders."""

    def __init__(self, paths: Sequence[str | os.PathLike[str]] = (), use_env: bool = True) -> None:
        roots = [Path(p) for p in paths]
        if use_env:
            roots += [Path(p) for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p]
        for root in roots:
            try:
                is_folder = root.is_dir()
            except (OSError, ValueError):  # a name too long for the OS, or holding a NUL
                is_folder = False
            if not is_folder:
                raise LookupFailed(str(root), "search path", "not a folder")
        self.roots: list[Path] = roots + builtin_roots()
        self._specs: dict[tuple[str, str], Any] = {}
        self._file_specs: dict[tuple[str, str], Any] = {}  # shared by with_specs copies: files are files

    @cached_property
    def _index(self) -> dict[tuple[str, str], Entry]:
        # every file's header, from the cache where its file is unchanged (archsim.spec.cache)
        files = [path for root in self.roots for path in description_files(root)]
        index: dict[tuple[str, str], Entry] = {}
        for path, header in zip(files, read_headers(self.roots, files), strict=True):
            if isinstance(header, Problem):
                raise SpecError(display_path(path), header.field, header.problem)
            entry = Entry(path, None, header)
            for name in (entry.name, *entry.aliases):
                index.setdefault((entry.kind, name), entry)
        return index

    def with_specs(self, replacements: Mapping[Entry, Any]) -> Library:
        """A copy of this library in which the given entries' specs are replaced by already validated ones.

        The copy shares the index (and the specs validated so far) but not later additions; sweeps use it
        to run a variant of a chip, system, link or memory without writing YAML.
        """
        _ = self._index  # index once, in the original, so that every copy shares it
        variant = copy.copy(self)
        variant._specs = {**self._specs, **{(e.kind, str(e.path)): spec for e, spec in replacements.items()}}
        return variant

    def entries(self, kind: str) -> list[Entry]:
        """Every description of ``kind`` on the search path (and declared by a family module), sorted by name."""
        seen = {id(e): e for (k, _), e in self._index.items() if k == kind}
        named = {e.name for e in seen.values()}
        declared = [e for e in self._declared(kind) if e.name not in named]
        return sorted([*seen.values(), *declared], key=lambda e: e.name)

    def _declared(self, kind: str) -> list[Entry]:
        """The descriptions of ``kind`` registered families declare in code.

        Only families and software stacks are declared (:func:`archsim.spec.registry.declared_descriptions`);
        a file on the search path of the same name wins.
        """
        if kind not in ("family", "software"):
            return []
        from archsim.spec.registry import declared_descriptions

        return [
            Entry(Path(f"{where}#{data['name']}"), data)
            for where, data in declared_descriptions()
            if data["kind"] == kind
        ]

    def kinds(self) -> set[str]:
        """Every ``kind`` of description on the search path."""
        return {kind for kind, _ in self._index}

    def find(self, kinds: Iterable[str], name: str) -> Entry:
        """The entry for a name (or alias, or file path) of one of ``kinds``; ``SYSTEM:AxB`` is a slice."""
        kinds = tuple(kinds)
        if "system" in kinds and ":" in name and not name.endswith((".yaml", ".yml")):
            return self._slice(name)
        if name.endswith((".yaml", ".yml")) or os.sep in name:
            from archsim.spec.yamlio import read_yaml

            path = Path(name)
            entry = Entry(path, read_yaml(path))
            if entry.kind not in kinds:
                raise SpecError(name, "kind", f"is {entry.kind!r}, expected {' or '.join(kinds)}")
            return entry
        for kind in kinds:
            if (kind, name) in self._index:
                return self._index[(kind, name)]
        # names are case-insensitive where that is unambiguous: `V100` is `v100`
        folded = {id(e): e for (k, n), e in self._index.items() if k in kinds and n.casefold() == name.casefold()}
        if len(folded) == 1:
            return next(iter(folded.values()))
        for kind in kinds:  # a family module's own efficiency values and stack (declared in code)
            for entry in self._declared(kind):
                if entry.name == name:
                    return entry
        known = sorted({n for (k, n) in self._index if k in kinds})
        raise LookupFailed(name, "", f"unknown {' or '.join(kinds)}; {suggest(name, known)}")

    def _slice(self, target: str) -> Entry:
        """The entry of ``SYSTEM:AxBxC``: the system's one torus level cut to that shape."""
        base_name, _, shape_text = target.rpartition(":")
        base = self.find(["system"], base_name)
        levels = base.data.get("levels")
        if not isinstance(levels, dict) or len(levels) != 1:
            raise UsageError(target, "slice", f"{base.name} is not one torus level, so it has no slices")
        ((level_name, level),) = levels.items()
        if not isinstance(level, dict) or level.get("topology") != "torus":
            raise UsageError(target, "slice", f"{base.name} is not one torus level, so it has no slices")
        pod = level.get("shape")
        if not isinstance(pod, list) or not all(isinstance(n, int) for n in pod):
            raise SpecError(base.source, f"levels.{level_name}.shape", "must be a list of integers")
        from archsim.spec.common import parse_shape

        try:
            shape = parse_shape(shape_text, len(pod))
        except ValueError as err:
            raise UsageError(target, "slice", str(err)) from None
        if any(n > m for n, m in zip(shape, pod, strict=True)):
            pod_text = "x".join(str(m) for m in pod)
            raise UsageError(target, "slice", f"larger than the {pod_text} of {base.name} in some dimension")
        sliced = {**level, "size": math.prod(shape), "shape": list(shape)}
        data = {
            **base.data,
            "name": f"{base.name}-{'x'.join(map(str, shape))}",
            "aliases": [],
            "levels": {level_name: sliced},
        }
        data["description"] = f"{'x'.join(map(str, shape))} slice of {base.description or base.name}"
        return Entry(Path(f"{base.path}:{'x'.join(map(str, shape))}"), data)

    def spec(self, entry: Entry) -> Any:
        """The validated spec of an entry (cached per file), or the one :meth:`with_specs` put in its place."""
        key = (entry.kind, str(entry.path))
        if key not in self._specs:
            self._specs[key] = self.file_spec(entry)
        return self._specs[key]

    def file_spec(self, entry: Entry) -> Any:
        """The validated spec of an entry as its file describes it, whatever :meth:`with_specs` replaced.

        Validated once per file; an indexed file's spec is read from the cache while the file is
        unchanged (:mod:`archsim.spec.cache`), and written to it once validated.
        """
        key = (entry.kind, str(entry.path))
        if key not in self._file_specs:
            if entry.kind not in SPEC_CLASSES:
                raise SpecError(entry.source, "kind", f"unknown kind {entry.kind!r}")
            spec = load_spec(entry.path, entry.kind) if entry.indexed else None
            if spec is None:
                from archsim.spec.yamlio import validate

                spec = validate(SPEC_CLASSES[entry.kind], entry.data, entry.source)
                if entry.indexed:
                    store_spec(entry.path, entry.kind, spec)
            self._file_specs[key] = spec
        return self._file_specs[key]

    def chip(self, name: str) -> ChipSpec:
        """A chip by name, alias or path, with its memory technologies checked to exist."""
        entry = self.find(["chip"], name)
        chip: ChipSpec = self.spec(entry)
        for level_name in ("main", "onchip"):
            level = getattr(chip.memory, level_name)
            if level is None:
                continue
            field = f"memory.{level_name}.technology"
            try:
                technology = self.memory(level.technology)
            except LookupFailed as err:
                raise SpecError(entry.source, field, err.problem) from None
            ceiling = technology.max_bandwidth_per_stack
            if level.stacks is not None and ceiling is not None and level.bandwidth > level.stacks * ceiling * 1.001:
                raise SpecError(
                    entry.source,
                    f"memory.{level_name}.bandwidth",
                    f"{level.bandwidth / 1e9:.0f} GB/s exceeds {level.stacks} stacks of "
                    f"{technology.name} ({ceiling / 1e9:.0f} GB/s each)",
                )
        return chip

    def family(self, family: str) -> FamilySpec:
        """The efficiency parameters of a family."""
        spec: FamilySpec = self.spec(self.find(["family"], family))
        return spec

    def memory(self, name: str) -> MemorySpec:
        """A memory technology by name."""
        spec: MemorySpec = self.spec(self.find(["memory"], name))
        return spec

    def energy(self, name: str = "cmos") -> EnergySpec:
        """An energy technology (``kind: energy``) by name; ``cmos`` is the built-in one."""
        spec: EnergySpec = self.spec(self.find(["energy"], name))
        return spec

    def link(self, name: str) -> LinkSpec:
        """A link type by name."""
        spec: LinkSpec = self.spec(self.find(["link"], name))
        return spec

    def validation(self, name: str) -> ValidationSpec:
        """A validation table by name or path."""
        spec: ValidationSpec = self.spec(self.find(["validation"], name))
        return spec

    def uncertainty(self, name: str) -> UncertaintySpec:
        """An error table (``kind: uncertainty``, written by ``scripts/calibrate.py --uncertainty``)."""
        spec: UncertaintySpec = self.spec(self.find(["uncertainty"], name))
        return spec

    def system(self, name: str) -> SystemSpec:
        """A multi-chip system by name, alias or path, with its chip, link types and sources checked."""
        entry = self.find(["system"], name)
        source = entry.source
        system: SystemSpec = self.spec(entry)
        missing = system.missing_sources()
        if missing:
            raise SpecError(source, "sources", f"no source for {', '.join(missing)} (cite where its numbers come from)")
        try:
            self.chip(system.chip)
        except LookupFailed as err:
            raise SpecError(source, "chip", err.problem) from None
        named = [(f"levels.{name}.link", level.link) for name, level in system.levels.items()]
        if system.scale_out is not None:
            named.append(("scale_out.link", system.scale_out.link))
        if system.input_pipeline is not None:
            named.append(("input_pipeline.host_link", system.input_pipeline.host_link))
        for field, link in named:
            try:
                self.link(link)
            except LookupFailed as err:
                raise SpecError(source, field, err.problem) from None
        if system.collective_library is not None:
            try:
                self.collective_library(system.collective_library)
            except LookupFailed as err:
                raise SpecError(source, "collective_library", f"{system.collective_library}: {err.problem}") from None
        return system

    def collective_library(self, name: str) -> CollectiveLibrarySpec:
        """A collective library by name, alias or path; a software stack (``kind: software``) gives its own.

        A stack names its library in ``collective_library``; the library's sources are checked.
        """
        entry = self.find(["collective-library", "software"], name)
        if entry.kind == "software":
            named = entry.data.get("collective_library")
            if not isinstance(named, str):
                raise SpecError(entry.source, "collective_library", "missing or not a name")
            try:
                entry = self.find(["collective-library"], named)
            except LookupFailed as err:
                raise SpecError(entry.source, "collective_library", err.problem) from None
        spec: CollectiveLibrarySpec = self.spec(entry)
        missing = spec.missing_sources()
        if missing:
            raise SpecError(
                entry.source, "sources", f"no source for {', '.join(missing)} (cite where its numbers come from)"
            )
        return spec

    def system_collective_library(self, system: SystemSpec) -> CollectiveLibrarySpec | None:
        """The collective library a system runs by default (its ``collective_library``), or None."""
        if system.collective_library is None:
            return None
        return self.collective_library(system.collective_library)

    def sweep(self, name: str) -> SweepSpec:
        """A sweep description by name or path."""
        spec: SweepSpec = self.spec(self.find(["sweep"], name))
        return spec

    def software(self, name: str) -> SoftwareSpec:
        """A software stack by name, alias or path."""
        spec: SoftwareSpec = self.spec(self.find(["software"], name))
        return spec

    def software_for(self, chip: ChipSpec, name: str | None, source: str = "--software") -> SoftwareSpec:
        """The stack a run on ``chip`` uses: ``name``, or the chip's default (its family file's).

        A stack written for another family is refused, naming the ones that run on this chip.
        """
        chosen = name if name is not None else self.family(chip.family).software
        spec = self.software(chosen)
        if spec.family != chip.family:
            fits = sorted(e.name for e in self.entries("software") if e.data.get("family") == chip.family)
            raise LookupFailed(
                chosen,
                source,
                f"runs on {spec.family} chips, not {chip.name} ({chip.family}); use one of: " + ", ".join(fits),
            )
        return spec

    def mlperf(self, name: str) -> MlperfSpec:
        """An MLPerf result table by name or path."""
        spec: MlperfSpec = self.spec(self.find(["mlperf"], name))
        return spec

    def convergence(self, workload: str) -> ConvergenceSpec:
        """The convergence description of a workload.

        Found by its own name or alias, or as the one whose ``workload`` is ``workload`` (``resnet50``
        finds ``convergence/resnet50.yaml``).
        """
        try:
            entry = self.find(["convergence"], workload)
        except LookupFailed:
            matches = [e for e in self.entries("convergence") if e.data.get("workload") == workload]
            if not matches:
                raise
            entry = matches[0]
        spec: ConvergenceSpec = self.spec(entry)
        try:
            self.model(spec.workload)
        except LookupFailed as err:
            raise SpecError(entry.source, "workload", err.problem) from None
        return spec

    def model(self, name: str) -> ModelSpec:
        """A built-in workload model by name."""
        spec: ModelSpec = self.spec(self.find(["model"], name))
        return spec
