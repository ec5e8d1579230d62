"""The interconnect of a system as the engine sees it: tiers of identical members, and closed forms.

:func:`build_fabric` turns a :class:`~archsim.spec.system.SystemSpec` (plus its link types and the
``--nodes`` count) into a :class:`Fabric`: a list of *tiers*, innermost first. A tier is one level of
the system, or one dimension of a torus level, or the scale-out fabric. All members of a tier are
identical and joined the same way, which is the symmetry the engine exploits.

Each tier is one of two kinds:

* ``POOLED`` (switch, full mesh, scale-out fabric): a member owns ``lanes`` ports, each one link of the
  tier's type; any other member of the group is one hop away. A full mesh of ``size`` members with
  ``links`` per pair is a pool of ``(size - 1) * links`` ports.
* ``RING`` (ring, torus dimension, rings found in a graph): a member owns ``lanes`` links towards its
  next neighbour in each of the two directions. For a graph level, ``lanes`` is the number of
  edge-disjoint Hamiltonian rings found in it (:func:`hamiltonian_rings`); each ring hop is one link.

Bandwidths are bytes per second of one link in one direction; latencies are seconds per hop. Nothing
here imports SimPy: this module is pure, and also gives the closed-form lower bounds the property
tests hold the engine to.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from archsim.errors import LimitError, SpecError, UsageError
from archsim.limits import MAX_GRAPH_SEARCH_STEPS
from archsim.spec.link import LinkSpec
from archsim.spec.system import Level, SystemSpec, Topology


class TierKind(enum.StrEnum):
    """How a member's links reach the other members of its group."""

    POOLED = "pooled"
    RING = "ring"


@dataclass(frozen=True)
class Tier:
    """One tier: ``size`` identical members per group, each of ``chips_per_member`` chips."""

    name: str
    """``LEVEL`` for a whole level, ``LEVEL.dD`` for torus dimension D, ``scale-out`` for ``--nodes``."""
    level_index: int
    """Index of the level the tier belongs to (the scale-out fabric is one past the last level)."""
    kind: TierKind
    size: int
    chips_per_member: int
    link: str
    """Link type name."""
    link_bytes_per_s: float
    """Bandwidth of one link in one direction."""
    latency_s: float
    """One-way latency of one hop."""
    lanes: int
    """POOLED: ports per member. RING: links per member towards its next neighbour, per direction."""
    torus: bool = False
    """True for a dimension of a torus level."""
    link_reduces: bool = False
    """The tier's switch can reduce in the network (its link's ``in_network_reduction``)."""
    in_network_reduction: bool = False
    """A collective library uses that reduction here (set by its plan, never by the system alone)."""
    open_line: bool = False
    """A torus dimension without wraparound (a line): its ring is laid along the line, out on one
    direction of every link and back on the other, so it has one direction, and a ring step mostly
    crosses two links (``latency_s`` is two hops)."""

    @property
    def directions(self) -> int:
        """Directions a member sends in: both ring directions (one on an open line), or one egress pool."""
        return 2 if self.kind is TierKind.RING and not self.open_line else 1

    @property
    def egress_bytes_per_s(self) -> float:
        """Bandwidth out of one member at this tier, all its lanes in every direction."""
        return self.lanes * self.directions * self.link_bytes_per_s


@dataclass(frozen=True)
class Fabric:
    """A system's interconnect as a list of tiers, innermost first (tiers of size 1 left out)."""

    system: str
    chip: str
    nodes: int
    num_chips: int
    tiers: tuple[Tier, ...]
    default_algorithm: str
    first_ring: tuple[int, ...] = ()
    """Order of the chips of level 0 along its first ring (graph levels; identity otherwise)."""

    def chips_below(self, tier_index: int) -> int:
        """Chips spanned by the tiers before ``tier_index`` (the chip stride of its coordinate)."""
        return math.prod(t.size for t in self.tiers[:tier_index])


def hamiltonian_rings(size: int, connections: Sequence[tuple[int, int, int]]) -> list[tuple[int, ...]]:
    """A largest set of edge-disjoint Hamiltonian cycles of a multigraph, as member orders.

    Every Hamiltonian cycle through member 0 is enumerated (each once, in one direction); then a
    backtracking search picks as many as the links allow, each cycle using one link of every edge it
    crosses. The bound ``min(degree) // 2`` stops the search early. Deterministic: cycles are tried in
    lexicographic order. Meant for the graph of one machine (DGX-1's 8 GPUs: its three rings); a graph
    of more than 12 members, or one whose search takes more than
    :data:`~archsim.limits.MAX_GRAPH_SEARCH_STEPS` steps, is a LimitError.
    """
    if size > 12:
        raise LimitError(
            "", "connections", f"graph levels are searched exhaustively; {size} members is too many (at most 12)"
        )
    steps = 0

    def step() -> None:
        # the searches below are exponential in the worst case (a dense graph): bound their work
        nonlocal steps
        steps += 1
        if steps > MAX_GRAPH_SEARCH_STEPS:
            raise LimitError(
                "",
                "connections",
                f"too densely connected to search for rings (more than {MAX_GRAPH_SEARCH_STEPS} steps)",
            )

    if size < 3:
        return []
    capacity: dict[tuple[int, int], int] = {}
    for a, b, count in connections:
        key = (min(a, b), max(a, b))
        capacity[key] = capacity.get(key, 0) + count
    neighbours = {m: sorted({b if a == m else a for a, b in capacity if m in (a, b)}) for m in range(size)}

    cycles: list[tuple[int, ...]] = []

    def extend(path: list[int], seen: set[int]) -> None:
        step()
        if len(path) == size:
            if path[-1] in neighbours[0] and path[1] < path[-1]:
                cycles.append(tuple(path))
            return
        for nxt in neighbours[path[-1]]:
            if nxt not in seen:
                path.append(nxt)
                seen.add(nxt)
                extend(path, seen)
                seen.discard(nxt)
                path.pop()

    extend([0], {0})
    edges_of = [[(min(c[i], c[(i + 1) % size]), max(c[i], c[(i + 1) % size])) for i in range(size)] for c in cycles]
    degree = min(sum(n for (a, b), n in capacity.items() if m in (a, b)) for m in range(size))
    bound = degree // 2
    best: list[int] = []

    def pack(start: int, chosen: list[int]) -> bool:
        nonlocal best
        step()
        if len(chosen) > len(best):
            best = list(chosen)
            if len(best) == bound:
                return True
        for index in range(start, len(cycles)):
            if all(capacity[e] > 0 for e in edges_of[index]):
                for e in edges_of[index]:
                    capacity[e] -= 1
                chosen.append(index)
                done = pack(index, chosen)
                chosen.pop()
                for e in edges_of[index]:
                    capacity[e] += 1
                if done:
                    return True
        return False

    pack(0, [])
    return [cycles[i] for i in best]


def _level_tiers(
    name: str, level: Level, index: int, chips_below: int, link: LinkSpec, source: str
) -> tuple[list[Tier], tuple[int, ...]]:
    """The tiers of one level, and the order of its members along its first ring."""

    def make(tier_name: str, kind: TierKind, size: int, lanes: int, torus: bool = False, line: bool = False) -> Tier:
        return Tier(
            name=tier_name,
            level_index=index,
            kind=kind,
            size=size,
            chips_per_member=chips_below,
            link=link.name,
            link_bytes_per_s=link.bandwidth,
            latency_s=link.latency * (2 if line and size > 2 else 1),
            lanes=lanes,
            torus=torus,
            open_line=line,
            link_reduces=link.in_network_reduction and kind is TierKind.POOLED and level.topology is Topology.SWITCH,
        )

    order = tuple(range(level.size))
    if level.topology is Topology.TORUS:
        assert level.shape is not None
        assert level.links is not None
        links = level.links
        return [
            make(f"{name}.d{d}", TierKind.RING, n, links, torus=True, line=not level.wraps(d))
            for d, n in enumerate(level.shape)
        ], order
    if level.topology is Topology.GRAPH:
        assert level.connections is not None
        try:
            rings = hamiltonian_rings(level.size, level.connections)
        except LimitError as err:
            raise LimitError(source, f"levels.{name}.connections", err.problem) from None
        if not rings:
            raise SpecError(source, f"levels.{name}.connections", "the graph has no Hamiltonian ring")
        return [make(name, TierKind.RING, level.size, len(rings))], rings[0]
    assert level.links is not None
    if level.topology is Topology.RING:
        return [make(name, TierKind.RING, level.size, level.links)], order
    ports = level.links * (level.size - 1) if level.topology is Topology.FULL_MESH else level.links
    return [make(name, TierKind.POOLED, level.size, ports)], order


def build_fabric(system: SystemSpec, links: Mapping[str, LinkSpec], nodes: int = 1, source: str = "") -> Fabric:
    """The tiers of ``system`` scaled out to ``nodes`` copies; ``links`` maps link names to specs.

    Raises UsageError when ``nodes`` > 1 on a system without a scale-out fabric, or beyond its
    ``max_nodes``.
    """
    source = source or system.name
    if nodes < 1:
        raise UsageError(source, "--nodes", f"must be a positive integer, got {nodes}")
    if nodes > 1 and system.scale_out is None:
        raise UsageError(source, "--nodes", f"{system.name} declares no scale-out fabric (scale_out), so it has 1 node")
    limit = system.scale_out.max_nodes if system.scale_out is not None else None
    if limit is not None and nodes > limit:
        raise UsageError(source, "--nodes", f"{system.name} scales out to {limit} nodes at most")
    tiers: list[Tier] = []
    chips_below = 1
    first_ring: tuple[int, ...] = ()
    for index, (name, level) in enumerate(system.levels.items()):
        level_tiers, order = _level_tiers(name, level, index, chips_below, links[level.link], source)
        tiers.extend(level_tiers)
        if index == 0:
            first_ring = order
        chips_below *= level.size
    if nodes > 1 and system.scale_out is not None:
        link = links[system.scale_out.link]
        tiers.append(
            Tier(
                name="scale-out",
                level_index=len(system.levels),
                kind=TierKind.POOLED,
                size=nodes,
                chips_per_member=chips_below,
                link=link.name,
                link_bytes_per_s=link.bandwidth,
                latency_s=link.latency,
                lanes=system.scale_out.links,
            )
        )
    return Fabric(
        system=system.name,
        chip=system.chip,
        nodes=nodes,
        num_chips=chips_below * nodes,
        tiers=tuple(t for t in tiers if t.size > 1),
        default_algorithm=system.collective.value,
        first_ring=first_ring,
    )


def ring_allreduce_lower_bound_s(nbytes: float, chips: int, egress_bytes_per_s: float) -> float:
    """The bandwidth lower bound of any all-reduce of ``nbytes`` on ``chips`` chips: ``2(p-1)/p * S / B``.

    ``egress_bytes_per_s`` is the most a chip can send at once (all its links, every direction);
    every chip must send at least ``2(p-1)/p * S`` bytes (Patarasuk and Yuan, JPDC 2009).
    """
    if chips <= 1 or nbytes <= 0:
        return 0.0
    return 2.0 * (chips - 1) / chips * nbytes / egress_bytes_per_s


def ring_allreduce_closed_form_s(nbytes: float, chips: int, bytes_per_s: float, latency_s: float) -> float:
    """The alpha-beta time of an unpipelined ring all-reduce: ``2(p-1) * (latency + S/p / bandwidth)``."""
    if chips <= 1:
        return 0.0
    return 2.0 * (chips - 1) * (latency_s + nbytes / chips / bytes_per_s)
