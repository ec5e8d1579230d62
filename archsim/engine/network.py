"""Links as SimPy resources: lanes, routes over them, and the representative network of a fabric.

A :class:`Lane` is one physical link in one direction: a SimPy resource of capacity 1 with a
bandwidth (bytes per second) and a latency (seconds per hop). A transfer *holds* the lanes of its
:class:`Route` for ``bytes / bandwidth`` -- so traffic that shares a lane queues for it, first come
first served -- then arrives one latency per hop later (the latency does not occupy the link: links
are pipelined). A route over several lanes holds them all at once (cut-through, as a message crosses
intermediate chips of a ring); lanes are always acquired in a fixed global order, so no two
transfers can deadlock.

:class:`RepNetwork` creates lanes on demand, keyed by where they are in the *representative* members
the engine simulates (:mod:`archsim.models.placement`). Every lane of a real system is identical to
one of them by symmetry and carries the same traffic at the same time.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import simpy

from archsim.models.interconnect import Fabric, Tier


@dataclass(frozen=True, slots=True)
class Span:
    """One busy interval of a lane (for timelines), in seconds of simulated time."""

    start_s: float
    end_s: float
    label: str


@dataclass(eq=False)
class Lane:
    """One link in one direction: a capacity-1 resource with bandwidth, latency and statistics."""

    env: simpy.Environment
    index: int
    """Global acquisition order."""
    tier: Tier
    name: str
    record: bool
    resource: simpy.Resource = field(init=False)
    busy_s: float = 0.0
    """Seconds the lane spent transferring."""
    bytes: float = 0.0
    """Bytes it carried."""
    spans: list[Span] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.resource = simpy.Resource(self.env, capacity=1)

    @property
    def bytes_per_s(self) -> float:
        """Bandwidth of the link, one direction."""
        return self.tier.link_bytes_per_s

    @property
    def latency_s(self) -> float:
        """Latency of one hop."""
        return self.tier.latency_s


@dataclass(frozen=True)
class Route:
    """Lanes one transfer holds together, and the hops its latency is paid for."""

    lanes: tuple[Lane, ...]
    hops: int = 1

    @property
    def bytes_per_s(self) -> float:
        """Bandwidth of the slowest lane."""
        return min(lane.bytes_per_s for lane in self.lanes)

    @property
    def latency_s(self) -> float:
        """Latency from the first byte leaving to it arriving: one per hop."""
        return self.hops * max(lane.latency_s for lane in self.lanes)


def send(env: simpy.Environment, route: Route, nbytes: float, label: str) -> simpy.events.ProcessGenerator:
    """Hold ``route``'s lanes while ``nbytes`` cross them (queueing behind earlier transfers).

    Returns when the last byte has left; the caller adds ``route.latency_s`` for arrival.
    """
    requests = []
    for lane in route.lanes:  # ordered by Lane.index (RepNetwork.route sorts them): no deadlock
        request = lane.resource.request()
        requests.append(request)
        yield request
    start = env.now
    duration = nbytes / route.bytes_per_s
    if duration > 0.0:
        yield env.timeout(duration)
    end = env.now
    for lane, request in zip(route.lanes, requests, strict=True):
        lane.resource.release(request)
        lane.busy_s += end - start
        lane.bytes += nbytes
        if lane.record and end > start:
            lane.spans.append(Span(start, end, label))


class RepNetwork:
    """The lanes of the representative members of a fabric, created on first use."""

    def __init__(self, env: simpy.Environment, fabric: Fabric, record: bool = False) -> None:
        self.env = env
        self.fabric = fabric
        self.record = record
        self._lanes: dict[Hashable, Lane] = {}

    @property
    def lanes(self) -> list[Lane]:
        """Every lane created so far, in creation order."""
        return list(self._lanes.values())

    def lane(self, tier_index: int, name: str) -> Lane:
        """The lane called ``name`` at ``tier_index`` (created on first use)."""
        key = (tier_index, name)
        lane = self._lanes.get(key)
        if lane is None:
            tier = self.fabric.tiers[tier_index]
            lane = Lane(self.env, len(self._lanes), tier, f"{tier.name} {name}", self.record)
            self._lanes[key] = lane
        return lane

    def route(self, tier_index: int, names: list[str], hops: int = 1) -> Route:
        """A route over the named lanes of one tier, in acquisition order."""
        lanes = sorted((self.lane(tier_index, n) for n in names), key=lambda lane: lane.index)
        return Route(tuple(lanes), hops)
