"""Memory technology descriptions (``memory/NAME.yaml``, ``kind: memory``).

A chip's memory level names one of these by ``technology``. The technology gives what is common to
every part built from it (kind of memory, the standard it follows, per-stack bandwidth ceiling,
access latency, energy per bit moved); the chip gives what its part has (capacity, bandwidth,
stacks). The loader checks the chip's bandwidth against ``stacks x max_bandwidth_per_stack`` where both are known.
"""

from __future__ import annotations

import enum
from typing import Literal

from archsim.spec.common import Bandwidth, EnergyPerBit, Name, Spec, Time


class MemoryKind(enum.StrEnum):
    """Whether a technology is off-chip DRAM or on-chip SRAM."""

    DRAM = "dram"
    SRAM = "sram"


class MemorySpec(Spec):
    """A memory technology."""

    schema_version: Literal[1]
    kind: Literal["memory"]
    name: Name
    aliases: tuple[Name, ...] = ()
    description: str
    type: MemoryKind
    standard: str | None = None
    max_bandwidth_per_stack: Bandwidth | None = None
    """Highest bandwidth of one stack (or one device/module) the standard allows."""
    latency: Time
    """Typical load-to-use latency of one access from the compute units."""
    energy_per_bit: EnergyPerBit | None = None
    """Energy of one bit moved between a chip and this memory (array, datapath and I/O), not scaled
    with the chip's node. Needed to price a run whose main memory this is; an on-chip SRAM, priced
    by the energy technology's ``sram_read``, has none."""
    sources: dict[str, str]
