"""What a target name resolves to: a system of chips (and the system's fabric); a chip is a system of one chip.

:class:`Target` carries the chip every run prices ops with and the system that joins its chips: a
multi-chip system (``interconnect/systems/``, ``kind: system``) with its file, or, for a chip name,
:data:`ONE_CHIP` (one chip, no levels, no links). The runner resolves a request's target once
(:func:`resolve`) and replays every target through one seam (:func:`archsim.run.replay.replay_on_target`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from archsim import memory_fit
from archsim.spec.chip import ChipSpec
from archsim.spec.library import Library

if TYPE_CHECKING:  # a system's: a one-chip run loads neither module
    from archsim.models.interconnect import Fabric
    from archsim.spec.system import SystemSpec


@dataclass(frozen=True)
class OneChip:
    """The system a chip target is: one chip, no levels and no links (so no communication op can run on it)."""

    @property
    def num_chips(self) -> int:
        """One chip."""
        return 1


ONE_CHIP = OneChip()
"""The system of one chip."""


@dataclass(frozen=True)
class Target:
    """A resolved target: the chip it runs on and the system joining its chips (:data:`ONE_CHIP` for a chip)."""

    name: str
    chip: ChipSpec
    system: SystemSpec | OneChip = ONE_CHIP
    source: str = ""
    """The system's file, for messages (empty for one chip)."""
    chip_source: str = ""
    """The chip's file, for messages about its own figures (a power limit below its static power)."""

    @property
    def linked(self) -> SystemSpec | None:
        """The system's description when it joins chips by links (None: a system of one chip)."""
        return None if isinstance(self.system, OneChip) else self.system

    @property
    def num_chips(self) -> int:
        """Chips in the system (in one copy of it, before ``--nodes``)."""
        return self.system.num_chips


def resolve(name: str, library: Library) -> Target:
    """A chip or system name, alias or YAML path -> Target (looked up once)."""
    entry = library.find(["chip", "system"], name)
    if entry.kind == "system":
        system = library.system(name)
        chip = library.chip(system.chip)
        chip_source = library.find(["chip"], system.chip).source
        return Target(system.name, chip, system=system, source=entry.source, chip_source=chip_source)
    return resolve_target(name, library)


def resolve_target(name: str, library: Library) -> Target:
    """A chip name, alias or YAML path -> Target."""
    chip = library.chip(name)
    return Target(name=chip.name, chip=chip, chip_source=library.find(["chip"], name).source)


def preferred_capacity_bytes(chip: ChipSpec) -> int:
    """Memory a step's working set must fit: the in-processor memory on IPUs, the main memory elsewhere.

    See :func:`archsim.memory_fit.capacity_bytes`; an IPU keeps data in streaming memory only when a
    run asks for it (``streaming_memory``).
    """
    return memory_fit.capacity_bytes(chip)


def fabric_for(system: SystemSpec, library: Library, nodes: int, source: str) -> Fabric:
    """The fabric of a validated system scaled to ``nodes``."""
    from archsim.models.interconnect import build_fabric

    names = {level.link for level in system.levels.values()}
    if system.scale_out is not None:
        names.add(system.scale_out.link)
    return build_fabric(system, {name: library.link(name) for name in names}, nodes, source)
