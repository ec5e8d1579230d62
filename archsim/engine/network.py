"""Links as SimPy resources: lanes, routes over them, and the representative network of a fabric.

A :class:`Lane` is one physical link in one direction: a resource of capacity 1 in the SimPy simulation
(:class:`LinkSlot`, with ``simpy.Resource``'s semantics, event for event) with a
bandwidth (bytes per second) and a latency (seconds per hop). A transfer *holds* the lanes of its
:class:`Route` for ``bytes / bandwidth`` -- so traffic that shares a lane queues for it, first come
first served -- then arrives one latency per hop later (the latency does not occupy the link: links
are pipelined). A route over several lanes holds them all at once (cut-through, as a message crosses
intermediate chips of a ring); lanes are always acquired in a fixed global order, so no two
transfers can deadlock.

:class:`RepNetwork` creates lanes on demand, keyed by where they are in the *representative* members
the engine simulates (:mod:`archsim.models.placement`). Every lane of a real system is identical to
one of them by symmetry and carries the same traffic at the same time. A lane is named by a
:class:`LaneId` (its member or chip, its :class:`Direction`, its index).

What the lanes carry is reported to the network's observers (:class:`LinkObserver`): link statistics
and timelines attach from outside (:mod:`archsim.engine.records`), the engine keeps no record itself.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

from archsim.models.interconnect import Fabric, Tier

if TYPE_CHECKING:
    import simpy


class Direction(enum.StrEnum):
    """Which way a lane carries traffic: around a ring (``+``, ``-``) or through a switch port (``out``, ``in``)."""

    PLUS = "+"
    MINUS = "-"
    OUT = "out"
    IN = "in"


@dataclass(frozen=True, slots=True)
class LaneId:
    """Where a lane is within its tier: the member (or chip, or tree node) it leaves, its direction, its index."""

    member: str
    """``m0`` (a member of a tier), ``chip1`` (a stage's chip on a pipeline tier), ``m0 n3`` (a tree node)."""
    direction: Direction
    index: int

    def __str__(self) -> str:
        return f"{self.member} {self.direction.value}{self.index}"


class LinkObserver(Protocol):
    """Something told of every transfer a lane carries (statistics, a timeline)."""

    def transfer(self, lane: Lane, start_s: float, end_s: float, nbytes: float, label: str) -> None:
        """``lane`` carried ``nbytes`` of the transfer ``label`` from ``start_s`` to ``end_s``."""


class LinkSlot:
    """A capacity-1 resource with first-come-first-served waiting, event for event as ``simpy.Resource(env, 1)``.

    A link is held and released some 100,000 times in a large pipelined run, and SimPy's general
    resource (put and get queues, ``Request`` and ``Release`` event classes, queue invariants) is slow
    at it: three Megatron rows of ``validation/published-llm.yaml`` ran in 4.4 s with it, 3.7 s with
    this. This schedules the same events in the same order --
    a granted request succeeds at once; a release frees the slot at once and schedules a release
    event, whose processing grants the request at the head of the queue -- so event ids, ties and
    every result stay bit for bit those of ``simpy.Resource``; only the bookkeeping is shorter.
    """

    __slots__ = ("_event", "env", "holder", "waiting")

    def __init__(self, env: simpy.Environment) -> None:
        from simpy.events import Event  # loaded where a network is built, never by a one-chip run

        self._event = Event
        self.env = env
        self.holder: simpy.Event | None = None
        """The granted request, None while the link is free."""
        self.waiting: deque[simpy.Event] = deque()
        """Requests not yet granted, oldest first."""

    def request(self) -> simpy.Event:
        """An event that succeeds once the link is this request's (at once where it is free)."""
        event = self._event(self.env)
        self.waiting.append(event)
        self._grant()
        return event

    def release(self, request: simpy.Event) -> None:
        """Free the link held by ``request``; the next request is granted when the release is processed."""
        if self.holder is request:
            self.holder = None
        released = self._event(self.env)
        released.callbacks.append(self._grant)
        released.succeed()

    def _grant(self, _: object = None) -> None:
        """Give a free link to the oldest waiting request (SimPy's ``_trigger_put``: the head only)."""
        if self.holder is None and self.waiting:
            self.holder = self.waiting.popleft()
            self.holder.succeed()


@dataclass(eq=False)
class Lane:
    """One link in one direction: a capacity-1 resource with bandwidth and latency."""

    env: simpy.Environment
    index: int
    """Global acquisition order."""
    tier: Tier
    id: LaneId
    observers: tuple[LinkObserver, ...] = ()
    resource: LinkSlot = field(init=False)

    def __post_init__(self) -> None:
        self.resource = LinkSlot(self.env)

    @property
    def name(self) -> str:
        """``TIER MEMBER DIRECTIONINDEX``, e.g. ``nvlink m0 +1`` (timeline lanes are named by it)."""
        return f"{self.tier.name} {self.id}"

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

    # cached: a route's lanes never change, and a collective reads both once per chunk it sends
    @cached_property
    def bytes_per_s(self) -> float:
        """Bandwidth of the slowest lane."""
        return min(lane.bytes_per_s for lane in self.lanes)

    @cached_property
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
        for observer in lane.observers:
            observer.transfer(lane, start, end, nbytes, label)


class RepNetwork:
    """The lanes of the representative members of a fabric, created on first use."""

    def __init__(self, env: simpy.Environment, fabric: Fabric, observers: Sequence[LinkObserver] = ()) -> None:
        self.env = env
        self.fabric = fabric
        self.observers = tuple(observers)
        self._lanes: dict[tuple[int, LaneId], Lane] = {}

    @property
    def lanes(self) -> list[Lane]:
        """Every lane created so far, in creation order."""
        return list(self._lanes.values())

    def lane(self, tier_index: int, lane_id: LaneId) -> Lane:
        """The lane ``lane_id`` at ``tier_index`` (created on first use)."""
        key = (tier_index, lane_id)
        lane = self._lanes.get(key)
        if lane is None:
            lane = Lane(self.env, len(self._lanes), self.fabric.tiers[tier_index], lane_id, self.observers)
            self._lanes[key] = lane
        return lane

    def route(self, tier_index: int, ids: Sequence[LaneId], hops: int = 1) -> Route:
        """A route over the given lanes of one tier, in acquisition order."""
        lanes = sorted((self.lane(tier_index, i) for i in ids), key=lambda lane: lane.index)
        return Route(tuple(lanes), hops)
