"""What a target name resolves to: a chip, or a system of chips (and the system's fabric).

A chip is a system of one chip: :class:`Target` carries the chip every run prices ops with and, for a
multi-chip system (``interconnect/systems/``, ``kind: system``), the system and its file. The runner
resolves a request's target once (:func:`resolve`).
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
class Target:
    """A resolved target: the chip it runs on, how many of them, and the system joining them (if any)."""

    name: str
    chip: ChipSpec
    num_chips: int = 1
    system: SystemSpec | None = None
    """The multi-chip system (None: one chip)."""
    source: str = ""
    """The system's file, for messages (empty for one chip)."""


def resolve(name: str, library: Library) -> Target:
    """A chip or system name, alias or YAML path -> Target (looked up once)."""
    entry = library.find(["chip", "system"], name)
    if entry.kind == "system":
        system = library.system(name)
        return Target(name=system.name, chip=library.chip(system.chip), system=system, source=entry.source)
    return resolve_target(name, library)


def resolve_target(name: str, library: Library) -> Target:
    """A chip name, alias or YAML path -> Target."""
    chip = library.chip(name)
    return Target(name=chip.name, chip=chip)


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
