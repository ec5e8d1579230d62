"""What a collective library charges on top of the wire: protocol, algorithm, latencies (pure).

The engine (:mod:`archsim.engine.collectives`) moves chunks over links; this module says, for one call
of a collective library (:class:`~archsim.spec.collective_library.CollectiveLibrarySpec`), which
protocol and algorithm the library uses and how that changes the links the engine sees:

* :func:`choose_protocol` ranks the library's protocols by the alpha-beta estimate NCCL's tuner uses
  (``src/graph/tuning.cc``: ``time = latency + steps * hop latency + bytes / bandwidth``) and takes the
  fastest; :func:`choose_algorithm` applies the library's first matching rule.
* :func:`library_fabric` gives the fabric as the protocol sees it: every link's bandwidth times the
  protocol's ``wire_efficiency`` (times the library's inside a node: see :func:`tier_efficiency`),
  every hop's latency the larger of the link's and the protocol's per-step latency (the scale-out
  tier takes ``network_hop_latency``); tiers whose switch reduces are marked for an in-network protocol.
* :func:`plan_call` puts them together in a :class:`CallPlan`; its ``fixed_s`` (the library's and the
  protocol's launch latencies) is paid once per call, before the first byte moves.

:func:`bus_factor` is nccl-tests' conversion from algorithm bandwidth to bus bandwidth.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from archsim.models.interconnect import Fabric, Tier
from archsim.spec.collective_library import CollectiveLibrarySpec, Protocol
from archsim.spec.system import Algorithm

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "broadcast", "all-to-all")
"""The collectives a library call can be, by their nccl-tests names."""


def bus_factor(collective: str, chips: int) -> float:
    """The ratio busbw / algbw of nccl-tests (doc/PERFORMANCE.md): what each chip's links must carry per byte.

    all-reduce ``2(n-1)/n``; all-gather, reduce-scatter and all-to-all ``(n-1)/n``; broadcast 1.
    """
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}")
    if chips <= 1:
        return 0.0 if collective != "broadcast" else 1.0
    if collective == "all-reduce":
        return 2.0 * (chips - 1) / chips
    if collective == "broadcast":
        return 1.0
    return (chips - 1) / chips


def ring_steps(collective: str, fabric: Fabric) -> tuple[int, int]:
    """Steps of a tier-by-tier ring schedule: (steps inside a node, steps across the scale-out fabric)."""
    passes = 2 if collective == "all-reduce" else 1
    inside = sum(t.size - 1 for t in fabric.tiers if t.name != "scale-out")
    across = sum(t.size - 1 for t in fabric.tiers if t.name == "scale-out")
    return passes * inside, passes * across


def estimate_s(
    library: CollectiveLibrarySpec, protocol: Protocol, collective: str, nbytes: float, fabric: Fabric
) -> float:
    """The library's own alpha-beta estimate of a call with ``protocol`` (used to rank protocols).

    Latency: the launch latencies plus one per-step latency per ring step; bandwidth: the bus bytes
    (``bus_factor * nbytes``) over the slowest tier's per-chip egress times its efficiency. An
    in-network protocol takes one step and sends the buffer once.
    """
    if protocol.in_network:  # one step: up to the switch, reduced, and back
        inside, across, factor = 1, 0, 1.0
    else:
        (inside, across), factor = ring_steps(collective, fabric), bus_factor(collective, fabric.num_chips)
    latency = (
        library.launch_latency
        + protocol.launch_latency
        + inside * protocol.hop_latency
        + across * protocol.network_hop_latency
    )
    if not fabric.tiers:
        return latency
    rate = min(t.egress_bytes_per_s / t.chips_per_member * tier_efficiency(library, protocol, t) for t in fabric.tiers)
    return latency + factor * nbytes / rate


def tier_efficiency(library: CollectiveLibrarySpec, protocol: Protocol, tier: Tier) -> float:
    """Fraction of a tier's link bandwidth a call's payload reaches.

    The protocol's efficiency everywhere; the library's own only inside a node: it is the cap of the
    library's data movement on a chip's fast links (NCCL's model caps an A100's bus bandwidth at
    235 GB/s, which a node's network ports, 25 GB/s per GPU on a DGX A100, never reach).
    """
    inside = library.wire_efficiency if tier.name != "scale-out" else 1.0
    return inside * protocol.wire_efficiency


def choose_protocol(
    library: CollectiveLibrarySpec, collective: str, nbytes: float, fabric: Fabric, algorithm: Algorithm | None = None
) -> tuple[str, Protocol]:
    """The protocol with the smallest estimate among those allowed at ``nbytes`` (ties: file order).

    An in-network protocol is allowed only for an all-reduce on a fabric whose every tier reduces, by
    a tier-by-tier algorithm (not the flat ring, not a torus; ``algorithm`` None or auto: the system's).
    """
    chosen = fabric.default_algorithm if algorithm in (None, Algorithm.AUTO) else str(algorithm)
    reduces = (
        collective == "all-reduce"
        and chosen in (Algorithm.HIERARCHICAL, Algorithm.TREE)
        and bool(fabric.tiers)
        and all(t.link_reduces for t in fabric.tiers)
    )
    allowed = [
        (n, p)
        for n, p in library.protocols.items()
        if (p.max_bytes is None or nbytes <= p.max_bytes) and (reduces or not p.in_network)
    ]
    if not allowed:  # every protocol has a size limit below nbytes: the one with the largest limit
        allowed = [max(library.protocols.items(), key=lambda item: item[1].max_bytes or 0)]
    return min(allowed, key=lambda item: estimate_s(library, item[1], collective, nbytes, fabric))


def choose_algorithm(library: CollectiveLibrarySpec, nbytes: float, nodes: int) -> Algorithm:
    """The algorithm of the library's first rule that matches the call (``auto``: the system's own)."""
    for rule in library.algorithms:
        if nodes >= rule.min_nodes and (rule.max_bytes is None or nbytes <= rule.max_bytes):
            return rule.algorithm
    return Algorithm.AUTO


def library_fabric(fabric: Fabric, library: CollectiveLibrarySpec, protocol: Protocol) -> Fabric:
    """``fabric`` as ``protocol`` sees it.

    Bandwidths times the library's and the protocol's efficiency; hop latencies at least the protocol's
    per-step latency.
    """
    tiers = tuple(
        dataclasses.replace(
            tier,
            link_bytes_per_s=tier.link_bytes_per_s * tier_efficiency(library, protocol, tier),
            latency_s=max(
                tier.latency_s,
                protocol.network_hop_latency if tier.name == "scale-out" else protocol.hop_latency,
            ),
            in_network_reduction=protocol.in_network and tier.link_reduces,
        )
        for tier in fabric.tiers
    )
    return dataclasses.replace(fabric, tiers=tiers)


@dataclass(frozen=True)
class CallPlan:
    """How a library runs one call: protocol, algorithm, the fabric it sees and its fixed latency."""

    library: str
    protocol: str
    algorithm: Algorithm
    fabric: Fabric
    fixed_s: float
    """Launch latencies (library and protocol), paid once per call."""
    chunk_bytes: int


def plan_call(
    library: CollectiveLibrarySpec,
    collective: str,
    nbytes: float,
    fabric: Fabric,
    algorithm: Algorithm | None = None,
) -> CallPlan:
    """The library's plan for one call of ``collective`` on ``nbytes``; ``algorithm`` overrides its rules."""
    if algorithm in (None, Algorithm.AUTO):
        algorithm = choose_algorithm(library, nbytes, fabric.nodes)
    name, protocol = choose_protocol(library, collective, nbytes, fabric, algorithm)
    return CallPlan(
        library=library.name,
        protocol=name,
        algorithm=algorithm,
        fabric=library_fabric(fabric, library, protocol),
        fixed_s=library.launch_latency + protocol.launch_latency,
        chunk_bytes=protocol.chunk,
    )
