"""The chip-family registry: every family, built-in or plugged in, is one :class:`FamilyDefinition`.

A definition names everything archsim needs to know about a kind of chip, in one place:

* ``section``: the schema of the chip file's family section (a :class:`FamilySection`, whose methods
  give the rates: MACs per clock at a precision, on-chip bytes, the matrix instruction's shape);
* ``efficiency``: the complete, typed record of efficiency values its cost model reads (a
  :class:`FamilyEfficiency`); its fields other than the dispatch costs are the ones the family file
  must set;
* ``dispatch``: how the family's software issues an op (a :class:`Mechanism`);
* ``model``: the cost-model factory, called as ``model(chip, efficiency, precision, footprint_bytes)``;
* ``defaults`` (optional, :class:`FamilyDefaults`): the family's efficiency values and its default
  software stack, declared in code, so that a plug-in family is its module and a chip file: the
  library serves them as the family file and the stack a library folder would otherwise need
  (:func:`declared_descriptions`; a file of the same name on the search path wins).
* ``batch``: optionally, the module of its batch model (many configurations priced at once, for sweeps).

A family module defines these and calls :func:`register_family` when imported. The built-in families
are such modules (:data:`BUILTIN_MODULES`); the registry imports them, then the modules named by the
entry points of the group :data:`ENTRY_POINT_GROUP` (installed packages), then those named in the
:data:`ENV_VAR` environment variable (modules on ``PYTHONPATH``), the first time every family is
asked for. Looking up one built-in family while no plug-in module is named imports its module alone
(a run needs its chip's family only). The modules are named as strings and imported on demand, so
this module depends on nothing above ``spec/``; a later registration of a name replaces an earlier one.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import importlib
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar, Self

from archsim.errors import ArchsimError, PluginError, SpecError
from archsim.spec.common import Precision, Spec
from archsim.spec.efficiency import Efficiency

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from archsim.spec.chip import ChipSpec

BUILTIN_MODULES = (
    "archsim.models.tensorcore",
    "archsim.models.ipu",
    "archsim.models.cube",
    "archsim.models.systolic",
    "archsim.models.dataflow",
)
"""The built-in family modules, imported (in this order) before any plug-in."""
ENTRY_POINT_GROUP = "archsim.families"
"""Entry-point group of installed family packages: each entry point names a module to import."""
ENV_VAR = "ARCHSIM_FAMILIES"
"""Environment variable of family modules to import (names separated by commas)."""
DISPATCH = ("op_overhead", "framework_overhead", "host_overhead", "step_overhead")
"""Efficiency fields that a software stack sets (:data:`archsim.spec.software.DISPATCH_FIELDS`), never a family."""


class Mechanism(enum.StrEnum):
    """How a family's software pays for each op: each family registers one (:attr:`FamilyDefinition.dispatch`)."""

    KERNEL_LAUNCH = "kernel-launch"
    """GPU: one kernel launch per op, plus an eager framework's dispatch and host issue."""
    SUPERSTEP = "superstep"
    """IPU: a compiled program of supersteps; program control per compute set, on top of the sync."""
    PROGRAM_LAUNCH = "program-launch"
    """TPU/XLA: one compiled program launched per step; its ops are sequenced on the chip."""
    TASK_DISPATCH = "task-dispatch"
    """Ascend: the runtime dispatches one task per op to the AI cores."""

    @property
    def overlaps_collectives(self) -> bool:
        """Whether a collective can run while the chip computes.

        Not on a bulk-synchronous chip (``superstep``): its tiles either compute or exchange, so
        a collective over its links (an exchange phase) waits for the compute phase to end and the
        next compute waits for it (Graphcore, "Understanding the IPU programming model": local
        compute, global synchronisation and data exchange are separate phases).
        """
        return self is not Mechanism.SUPERSTEP


class FamilySection(Spec, abc.ABC):
    """The family section of a chip file: the unit counts and sizes its cost model reads.

    A family's section class subclasses this and gives the rates below; the chip's published peak
    of each precision is checked against :meth:`macs_per_clock` and the clock.
    """

    peak_counts: ClassVar[tuple[str, ...]] = ()
    """Unit-count fields the matrix peak is linear in (property tests scale them with the peak)."""

    @abc.abstractmethod
    def macs_per_clock(self, precision: Precision) -> int | None:
        """Whole-chip dense multiply-accumulates per clock of the matrix unit at ``precision`` (None: unsupported)."""

    @abc.abstractmethod
    def onchip_bytes(self) -> int:
        """SRAM bytes on the chip (buffers, caches, tile memories), for energy and area."""

    def matrix_instruction_shape(self) -> str | None:
        """``MxNxK`` of one matrix instruction when published (tensor core, cube), else None."""
        return None

    def latches_partial_sums(self) -> bool:
        """True when a MAC passes a 32-bit partial sum between processing elements (weight/input stationary)."""
        return False

    def simt_ops_per_instruction(self, precision: Precision, matrix: bool) -> int | None:
        """MACs (``matrix``) or element-wise FLOPs one lane instruction of a SIMT core does at ``precision``.

        None where no SIMT core (a GPU's CUDA cores or SIMD lanes, issued one instruction per lane op)
        runs that work: a matrix unit, a systolic array, a vector unit of wide fixed operations.
        """
        return None

    def simt_lanes(self) -> int:
        """FP32 lanes of the chip's SIMT cores, whole chip (0: it has none)."""
        return 0

    def in_processor_bytes(self) -> int | None:
        """Bytes of on-chip program memory that must hold a step's data (IPU), or None (main memory holds it)."""
        return None

    def check_chip(self, chip: ChipSpec) -> None:
        """Cross-field checks between this section and the rest of ``chip``; raise ValueError on a problem."""


@dataclass(frozen=True, slots=True)
class FamilyEfficiency:
    """The efficiency values of a run, resolved once: family file, software stack, chip overrides.

    Every field is set (see :class:`archsim.spec.efficiency.Efficiency` for their meaning); a family whose
    model needs more subclasses this with more float fields, which its family file must set.
    """

    compute: float
    memory_bandwidth: float
    vector: float
    op_overhead: float
    framework_overhead: float
    host_overhead: float
    step_overhead: float

    @classmethod
    def required(cls) -> tuple[str, ...]:
        """The fields a family file must set (every field but the software's dispatch costs)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.name not in DISPATCH)

    @classmethod
    def resolve(cls, efficiency: Efficiency, source: str) -> Self:
        """The complete record of ``efficiency`` (a merged spec); a value left unset is a SpecError."""
        values: dict[str, float] = {}
        for field in dataclasses.fields(cls):
            value = getattr(efficiency, field.name, None)
            if value is None and field.name == "framework_overhead":
                value = 0.0  # a bare kernel library adds no framework time
            if value is None:
                problem = "not set by the family file, the software or the chip"
                raise SpecError(source, f"efficiency.{field.name}", problem)
            values[field.name] = float(value)
        return cls(**values)


@dataclass(frozen=True, slots=True)
class FamilyDefinition:
    """One chip family: its section schema, efficiency record, dispatch mechanism and cost model."""

    name: str
    """The ``family:`` value of its chips and the key of their family section."""
    section: type[FamilySection]
    efficiency: type[FamilyEfficiency]
    dispatch: Mechanism
    """How its software dispatches an op."""
    model: Callable[[ChipSpec, Any, Precision, int], Any]
    """Cost-model factory ``model(chip, efficiency record, precision, footprint_bytes)``."""
    description: str = ""
    defaults: FamilyDefaults | None = None
    """Its efficiency values and default software, declared in code (None: a family file gives them)."""
    batch: str | None = None
    """Module of the family's batch model (:mod:`archsim.models.batch`), imported when a sweep prices many
    variants of a chip at once; None: its sweeps take the event path, one run per configuration."""
    boost_clock: bool = False
    """Its chips' published clock is a boost clock, which the chip reaches at the top of its
    voltage-frequency curve (GPU Boost, AMD's peak engine clock), so its actions are priced at that
    voltage; otherwise at the energy table's reference voltage (:func:`archsim.models.energy.supply_scale`)."""
    reads_cache: bool = False
    """Its cost model moves no main-memory byte for a read the chip's ``memory.cache`` serves
    (:mod:`archsim.workloads.cache`); a chip of a family without it may not describe a cache."""


@dataclass(frozen=True, slots=True)
class FamilyDefaults:
    """What a family file and a software file say, declared by the family module instead.

    ``efficiency`` is the family file's ``efficiency`` section (each value with its source in
    ``sources``, keyed ``efficiency`` or ``efficiency.FIELD``); ``software`` is the family's default stack
    (the fields of a ``kind: software`` file but ``schema_version``, ``kind`` and ``family``, with its own
    ``sources``), which also runs bare kernels. Both are validated as the files would be.
    """

    efficiency: Mapping[str, Any]
    software: Mapping[str, Any]
    sources: Mapping[str, str]


@cache
def installed_entry_points() -> tuple[EntryPoint, ...]:
    """The entry points of archsim's groups (``archsim.*``) in the installed distributions, found once per process.

    Scanning every distribution's metadata takes tens of milliseconds at start-up, so what the scan
    finds is kept in the library cache, keyed by the folders on ``sys.path`` and their modification
    times (:func:`archsim.spec.cache.load_entry_points`): a run scans again only after a distribution
    was installed or removed. The family and cost-model plug-ins share it;
    ``installed_entry_points.cache_clear()`` looks again.
    """
    from archsim.spec.cache import load_entry_points, store_entry_points

    found = load_entry_points()
    if found is None:
        from importlib.metadata import entry_points

        scanned = entry_points()  # every group (SelectableGroups before Python 3.12)
        groups = sorted(group for group in scanned.groups if group.startswith("archsim."))
        found = [(group, point.name, point.value) for group in groups for point in scanned.select(group=group)]
        store_entry_points(found)
    if not found:
        return ()  # the usual case: importlib.metadata is not even imported
    from importlib.metadata import EntryPoint

    return tuple(EntryPoint(name, value, group) for group, name, value in found)


def entry_points_of(group: str) -> list[EntryPoint]:
    """The installed entry points of ``group``, in name order (:func:`installed_entry_points`)."""
    return sorted((point for point in installed_entry_points() if point.group == group), key=lambda p: p.name)


_FAMILIES: dict[str, FamilyDefinition] = {}
_loaded = False


def register_family(definition: FamilyDefinition) -> None:
    """Make ``definition`` the family of its name (a later registration of the name replaces it)."""
    if not isinstance(definition, FamilyDefinition):
        raise PluginError(repr(definition), "family", "register_family takes a FamilyDefinition")
    if not isinstance(definition.section, type) or not issubclass(definition.section, FamilySection):
        raise PluginError(definition.name, "section", "must be a FamilySection subclass")
    if not isinstance(definition.efficiency, type) or not issubclass(definition.efficiency, FamilyEfficiency):
        raise PluginError(definition.name, "efficiency", "must be a FamilyEfficiency subclass")
    unknown = [f.name for f in dataclasses.fields(definition.efficiency) if f.name not in Efficiency.model_fields]
    if unknown:
        problem = f"{', '.join(unknown)}: not a field a description can set (archsim.spec.efficiency.Efficiency)"
        raise PluginError(definition.name, "efficiency", problem)
    if definition.defaults is not None and not isinstance(definition.defaults, FamilyDefaults):
        raise PluginError(definition.name, "defaults", "must be a FamilyDefaults (or None: a family file gives them)")
    try:
        dispatch = Mechanism(definition.dispatch)
    except ValueError:
        known = ", ".join(m.value for m in Mechanism)
        raise PluginError(definition.name, "dispatch", f"{definition.dispatch!r} is not one of {known}") from None
    _FAMILIES[definition.name] = dataclasses.replace(definition, dispatch=dispatch)


def _import(module: str, source: str) -> None:
    try:
        importlib.import_module(module)
    except ArchsimError:
        raise
    except Exception as err:  # any failure of a user's module is one line
        raise PluginError(source, "family module", f"cannot import {module}: {type(err).__name__}: {err}") from None


def _load() -> None:
    """Import the built-in family modules, then the plug-ins (once per process)."""
    global _loaded
    if _loaded:
        return
    _loaded = True  # set first: a family module that looks a family up while importing sees what is there
    try:
        for module in BUILTIN_MODULES:
            importlib.import_module(module)
        # the built-ins first, in their order, whichever of them was imported first (looked up alone)
        builtins = [module.rpartition(".")[2] for module in BUILTIN_MODULES]
        ordered = {name: _FAMILIES[name] for name in builtins if name in _FAMILIES} | _FAMILIES
        _FAMILIES.clear()
        _FAMILIES.update(ordered)
        for module, source in plugin_modules():
            _import(module, source)
    except BaseException:
        _loaded = False  # the next lookup tries again, and fails the same way, rather than missing a family
        raise


def plugin_modules() -> list[tuple[str, str]]:
    """The plug-in family modules named, each with where (entry points, then :data:`ENV_VAR`), in load order.

    None is imported here.
    """
    named = [
        (point.value.split(":")[0].strip(), f"entry point {point.name} = {point.value}")
        for point in entry_points_of(ENTRY_POINT_GROUP)
    ]
    return named + [(m.strip(), ENV_VAR) for m in os.environ.get(ENV_VAR, "").split(",") if m.strip()]


def _builtin_alone(name: str) -> FamilyDefinition | None:
    """The built-in family ``name``, importing its module alone, when no plug-in could replace it.

    A run looks up one family, its chip's: the other built-in modules are imported when every family
    is asked for (:func:`families`). With a plug-in module named (an entry point or :data:`ENV_VAR`)
    everything is loaded in order instead, so that the plug-in's registration of a name wins as before.
    """
    module = f"archsim.models.{name}"
    if _loaded or module not in BUILTIN_MODULES or entry_points_of(ENTRY_POINT_GROUP) or os.environ.get(ENV_VAR):
        return None
    importlib.import_module(module)
    return _FAMILIES.get(name)


def families() -> dict[str, FamilyDefinition]:
    """Every registered family, by name, in registration order (built-ins first)."""
    _load()
    return dict(_FAMILIES)


def family_names() -> tuple[str, ...]:
    """The names of the registered families."""
    return tuple(families())


def family_definition(name: str) -> FamilyDefinition:
    """The family called ``name``; an unknown name is a ValueError naming the known ones."""
    found = _builtin_alone(name) or families().get(name)
    if found is None:
        raise ValueError(
            f"unknown family {name!r} (known: {', '.join(family_names())}; a plug-in family's module is named "
            f"in {ENV_VAR} or by an {ENTRY_POINT_GROUP} entry point)"
        )
    return found


def check_family_name(name: str) -> str:
    """``name`` if it is a registered family (a pydantic validator of ``family:`` fields)."""
    return family_definition(name).name


def declared_descriptions() -> list[tuple[str, dict[str, Any]]]:
    """The family and software descriptions registered families declare in code (:class:`FamilyDefaults`).

    Each comes as ``(where, data)``: the file of the module that registered it, and the content of the
    ``kind: family`` or ``kind: software`` file it stands for. The plug-ins are loaded first when one is
    named (the built-in families declare nothing: their files are in the library).
    """
    if _loaded or entry_points_of(ENTRY_POINT_GROUP) or os.environ.get(ENV_VAR):
        _load()
    found: list[tuple[str, dict[str, Any]]] = []
    for definition in _FAMILIES.values():
        defaults = definition.defaults
        if defaults is None:
            continue
        module = sys.modules.get(definition.section.__module__)
        where = getattr(module, "__file__", None) or definition.section.__module__
        stack = str(defaults.software.get("name", ""))
        family = {
            "schema_version": 1,
            "kind": "family",
            "name": definition.name,
            "description": definition.description or definition.name,
            "efficiency": dict(defaults.efficiency),
            "software": stack,
            "kernel_software": stack,
            "sources": dict(defaults.sources),
        }
        software = {"schema_version": 1, "kind": "software", "family": definition.name, **defaults.software}
        found += [(where, family), (where, software)]
    return found
