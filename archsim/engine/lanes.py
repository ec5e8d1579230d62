"""The lanes a collective's representative chips drive at each tier, and chunked streams over them.

:class:`LaneMap` is the part of the collective engine that knows where traffic goes: which member
and lanes stand for a chip of a stage at a tier (:meth:`LaneMap._ports`), its ring channels
(:meth:`LaneMap._ring_routes`, and across the chips of other stages on a pipeline tier), and how a
transfer is cut into chunks (:meth:`LaneMap.chunks`, :meth:`LaneMap.stream`).
:class:`~archsim.engine.collectives.CollectiveEngine` runs the collectives' phases on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from archsim.engine.network import Direction, LaneId, RepNetwork, Route, send
from archsim.engine.options import DEFAULT_CHUNK_BYTES
from archsim.models.interconnect import TierKind
from archsim.models.placement import Placement

if TYPE_CHECKING:
    import simpy

MAX_CHUNKS = 16
"""Most chunks a ring step is cut into; larger steps use larger chunks (bounds the event count)."""


@dataclass
class LaneMap:
    """The representative network of one placement, as lanes per chip and tier, and chunking."""

    net: RepNetwork
    placement: Placement
    chunk_bytes: float = DEFAULT_CHUNK_BYTES
    max_chunks: int = MAX_CHUNKS

    @property
    def env(self) -> simpy.Environment:
        """The environment the network lives in."""
        return self.net.env

    def chunks(self, nbytes: float) -> int:
        """Chunks a transfer of ``nbytes`` is pipelined in."""
        if nbytes <= 0:
            return 1
        return max(1, min(self.max_chunks, math.ceil(nbytes / self.chunk_bytes)))

    @staticmethod
    def lane_id(member: str, kind: TierKind, lanes: int, index: int) -> LaneId:
        """Lane ``index`` of ``member``: ``outI`` of a port pool, ``+I`` then ``-I`` of a ring of ``lanes`` a way."""
        if kind is TierKind.POOLED:
            return LaneId(member, Direction.OUT, index)
        if index < lanes:
            return LaneId(member, Direction.PLUS, index)
        return LaneId(member, Direction.MINUS, index - lanes)

    def _ports(self, tier_index: int, stage: int, collapsed: frozenset[int]) -> list[tuple[str, list[int], int]]:
        """The chips of ``stage`` that represent the member at a tier, each with the lanes simulated for it.

        Returns (member name, lane indices, channels) per representative chip: the chip's data is split
        over ``channels`` lanes, of which those listed are simulated. A chip drives an equal share of its
        member's lanes; when the member's taking-part chips (of every stage) outnumber the lanes, they
        take turns on them (round robin). Lanes that carry the same mix of stages are identical by
        symmetry, so only the first lane of each mix is simulated, with all of its users: the users
        queue for it transfer by transfer, and every other lane of the mix does the same.
        """
        groups = self.placement.tiers[tier_index]
        tier = groups.tier
        lanes = tier.lanes * tier.directions
        if groups.stride > 1:  # the pipeline tier: each stage's chip is its own representative
            own = max(1, lanes // groups.sharers)  # its tensor-parallel peers in the member drive the others
            return [(f"chip{stage}", list(range(own)), own)]
        member = groups.member_of(stage)
        stage_of = groups.member_stages[member]
        everyone = self.placement.active_chips(tier_index, member, collapsed, None)
        per_chip = max(1, lanes // max(1, len(everyone)))
        users: dict[int, list[int]] = {}
        for position in range(len(everyone)):
            for r in range(per_chip):
                users.setdefault((position * per_chip + r) % lanes, []).append(position)
        first_of_mix: dict[tuple[int, ...], int] = {}
        for lane in sorted(users):
            first_of_mix.setdefault(tuple(sorted(stage_of[everyone[p]] for p in users[lane])), lane)
        return [
            (f"m{member}", [lane], per_chip)
            for lane in sorted(first_of_mix.values())
            for position in users[lane]
            if stage_of[everyone[position]] == stage
        ]

    def _ring_routes(self, tier_index: int, stage: int, collapsed: frozenset[int]) -> list[tuple[list[Route], int]]:
        """Ring channels (one route each) of the representative chips of ``stage`` at a tier.

        Each entry is (the routes simulated for one chip, the channels its data is split over).
        """
        groups = self.placement.tiers[tier_index]
        tier = groups.tier
        if groups.stride > 1 and tier.kind is TierKind.RING:
            routes = self._stride_routes(tier_index, stage)
            return [(routes, len(routes))]
        return [
            (
                [self.net.route(tier_index, [self.lane_id(member, tier.kind, tier.lanes, i)]) for i in indices],
                split,
            )
            for member, indices, split in self._ports(tier_index, stage, collapsed)
        ]

    def _stride_routes(self, tier_index: int, stage: int) -> list[Route]:
        """Ring channels of ``stage`` on a ring pipeline tier.

        A hop to the next chip of the same stage crosses every other stage's chip in between, holding
        all their links at once (cut-through).
        """
        groups = self.placement.tiers[tier_index]
        tier, stages = groups.tier, groups.stride
        routes = []
        for i in range(tier.lanes):
            for sign, direction in ((1, Direction.PLUS), (-1, Direction.MINUS)):
                chips = [(stage + sign * k) % stages for k in range(stages)]
                ids = [LaneId(f"chip{c}", direction, i) for c in chips]
                routes.append(self.net.route(tier_index, ids, hops=stages))
        return routes

    def stream(self, route: Route, nbytes: float, label: str, hops: int = 1) -> simpy.events.ProcessGenerator:
        """Process: send ``nbytes`` over ``route`` in chunks, then wait ``hops`` latencies for the last one."""
        chunks = self.chunks(nbytes)
        for _ in range(chunks):
            yield from send(self.env, route, nbytes / chunks, label)
        yield self.env.timeout(route.latency_s * hops)
