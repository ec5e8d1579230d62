"""Link descriptions (``interconnect/NAME.yaml``, ``kind: link``).

A link type gives the bandwidth of one link in one direction, its latency and its energy per bit;
a chip or a system says how many links of the type join what. Systems (``kind: system``), which name a chip, a topology
and the link type of each level, have their own schema in :mod:`archsim.spec.system`.
"""

from __future__ import annotations

from typing import Literal

from archsim.spec.common import Bandwidth, EnergyPerBit, Name, Spec, Time


class LinkSpec(Spec):
    """One link type: per-direction bandwidth of a single link and its one-way latency."""

    schema_version: Literal[1]
    kind: Literal["link"]
    name: Name
    aliases: tuple[Name, ...] = ()
    description: str
    bandwidth: Bandwidth
    """Bandwidth of one link, one direction."""
    latency: Time
    """One-way latency of a message across one link (including the endpoints' overheads)."""
    energy_per_bit: EnergyPerBit | None = None
    """Energy of one bit sent over one link (both ends' SerDes, and the switch where the link goes
    through one), not scaled with the chips' node. Needed to price a run whose step uses the link:
    a run over a link without it is refused in one line naming this file and field."""
    full_duplex: bool = True
    in_network_reduction: bool = False
    """The switch behind this port reduces data in the network (NVLink SHARP on NVSwitch 3): a
    collective library that can use it all-reduces by sending each byte once."""
    sources: dict[str, str]
