"""Collectives as SimPy processes on the representative network of a fabric.

A collective is a sequence of *phases*; each phase runs on one tier (or, for the flat ring, on all
tiers at once) and moves chunks over lanes (:mod:`archsim.engine.network`), so its time comes out of
the discrete-event simulation: transfers that share a lane queue for it.

Algorithms (``nbytes`` S is the full buffer; a group of ``g`` members at each tier):

* ``hierarchical``: reduce-scatter on every tier going up, all-gather on every tier coming down.
  After the reduce-scatter at a tier each chip holds ``1/g`` of what it had, so higher tiers move
  less; at every tier *each chip* of a member runs its own ring on its shard, and the member's ports
  are shared among them.
* ``torus``: the same, one torus dimension after another, with the buffer cut into one part per
  dimension (of more than one chip), part ``r`` taking the dimensions in an order rotated by ``r``, all
  parts at once: every dimension's links carry a part at every moment. (Google states 1.1 PB/s of
  all-reduce bandwidth for a 4,096-chip TPU v4 pod, cloud.google.com/tpu/docs/v4: 4,096 chips x 6
  links x 46.9 GB/s = 1.15 PB/s, every link busy; one dimension at a time would use a third of it.)
* ``ring``: one flat ring through every chip (NCCL's ring): ``2(N-1)`` steps of ``S/N`` bytes; the
  hops of a step cross every tier at once (lock step), so the slowest tier sets the pace.
* ``tree``: pipelined binary trees (reduce to the root, then broadcast) on switched tiers, as a
  double binary tree (two trees with half the data each; each member is interior in at most one, so
  its ports carry the second tree's half on the way up); rings on the other tiers.
* reduce-scatter and all-gather run the first or second half of the ring-based all-reduce; broadcast
  is scatter then all-gather per tier (tree broadcast with ``tree``); all-to-all exchanges along one
  tier after another (dimension-ordered), whatever the algorithm. Where a collective library reduces
  in the switch (a tier's ``in_network_reduction``: NVLink SHARP), an all-reduce at that tier is one
  pass of the buffer up to the switch, which reduces and multicasts it back.

Rings are pipelined in chunks: chunk ``c`` of step ``k`` leaves once chunk ``c`` of step ``k - 1`` has
arrived (from the symmetric neighbour, whose timing is the representative's own). Ring channels: a
chip drives every lane it has at a tier (both directions of a ring, every port of a switch), each
carrying an equal share; when a member's chips outnumber its ports, they share ports.

Symmetry: only representative members are simulated (:mod:`archsim.models.placement`). A ring step of
the representative stands for the same step of every member of the ring, which by symmetry happens at
the same time on identical links; trees are simulated along one root-to-leaf path (one node per
depth, plus the sibling that shares its parent's ingress port).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from archsim.engine.lanes import MAX_CHUNKS, LaneMap
from archsim.engine.network import Direction, LaneId, RepNetwork, Route, send
from archsim.engine.options import DEFAULT_CHUNK_BYTES
from archsim.engine.plans import (
    Collective,
    Phase,
    PhaseKind,
    group_size,
    input_bytes,
    plan,
    resolve_algorithm,
    torus_parts,
)
from archsim.engine.records import CollectiveRecord, LinkStatistics
from archsim.engine.trees import TreePorts
from archsim.errors import LimitError
from archsim.models.interconnect import Fabric, TierKind
from archsim.models.placement import place
from archsim.spec.system import Algorithm

if TYPE_CHECKING:
    import simpy

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "MAX_CHUNKS",
    "MAX_FLAT_RING_HOPS",
    "Collective",
    "CollectiveEngine",
    "CollectiveOutcome",
    "check_flat_ring_budget",
    "plan",
    "resolve_algorithm",
    "simulate_collective",
]

MAX_FLAT_RING_HOPS = 1_000_000
"""Most flat-ring hops (steps x rings x tiers x chunks) one step may simulate (some seconds): the flat
ring takes a step per chip, where the hierarchical, torus and tree algorithms take steps per tier."""


@dataclass
class CollectiveEngine(LaneMap):
    """Runs collectives of one placement on a representative network, chunked."""

    launch_s: float = 0.0
    """Fixed latency of every call (the collective library's launch), before the first byte moves."""
    records: list[CollectiveRecord] = field(default_factory=list)
    """Every collective run, in the order they finished."""

    def run(
        self, collective: Collective, algorithm: Algorithm, nbytes: float, stage: int = 0, name: str = ""
    ) -> simpy.events.ProcessGenerator:
        """Process: one collective of ``nbytes`` for the data-parallel group of ``stage``."""
        start = self.env.now
        phases = plan(collective, algorithm, self.placement)
        held = input_bytes(collective, phases, self.placement, nbytes)
        label = name or collective.value
        if self.launch_s > 0.0:
            yield self.env.timeout(self.launch_s)
        parts = torus_parts(collective, algorithm, self.placement)
        if parts == 1:
            yield from self._phases(phases, stage, held, label)
        else:
            rotated = [plan(collective, algorithm, self.placement, r) for r in range(parts)]
            yield self.env.all_of([self.env.process(self._phases(p, stage, held / parts, label)) for p in rotated])
        self.records.append(CollectiveRecord(label, stage, nbytes, start, self.env.now))

    def _phases(self, phases: list[Phase], stage: int, held: float, label: str) -> simpy.events.ProcessGenerator:
        """Run ``phases`` one after another, starting with ``held`` bytes per chip."""
        for phase in phases:
            held = yield from self._phase(phase, stage, held, label)

    # -- phases ---------------------------------------------------------------------------------

    def _phase(self, phase: Phase, stage: int, held: float, label: str) -> simpy.events.ProcessGenerator:
        """Run one phase; returns the bytes each taking-part chip holds afterwards."""
        g = group_size(self.placement, phase.tiers)
        kind = phase.kind
        scatters = kind in (PhaseKind.REDUCE_SCATTER, PhaseKind.FLAT_REDUCE_SCATTER)
        step_bytes = held / g if scatters else held
        if kind in (PhaseKind.REDUCE_SCATTER, PhaseKind.ALL_GATHER):
            yield from self._rings(phase, stage, g - 1, step_bytes, label)
        elif kind in (PhaseKind.FLAT_REDUCE_SCATTER, PhaseKind.FLAT_ALL_GATHER):
            yield from self._flat_rings(phase, stage, g - 1, step_bytes, label)
        elif kind is PhaseKind.TREE_REDUCE:
            yield from self._tree(phase, stage, held, label, reduce=True)
        elif kind is PhaseKind.TREE_BROADCAST:
            yield from self._tree(phase, stage, held, label, reduce=False)
        elif kind is PhaseKind.EXCHANGE:
            yield from self._exchange(phase, stage, held, label)
        elif kind is PhaseKind.SWITCH_REDUCE:
            yield from self._switch_reduce(phase, stage, held, label)
        else:
            yield from self._scatter(phase, stage, held * (g - 1) / g, label)
        if scatters or kind is PhaseKind.SCATTER:
            return held / g
        if kind in (PhaseKind.ALL_GATHER, PhaseKind.FLAT_ALL_GATHER):
            return held * g
        return held

    def _rings(
        self, phase: Phase, stage: int, steps: int, step_bytes: float, label: str
    ) -> simpy.events.ProcessGenerator:
        """Every taking-part chip of ``stage`` runs its ring channels at one tier."""
        processes = []
        for routes, split in self._ring_routes(phase.tiers[0], stage, phase.collapsed):
            share = step_bytes / split
            for route in routes:
                processes.append(self.env.process(self._ring_channel(route, steps, share, label)))
        if processes:
            yield self.env.all_of(processes)

    def _ring_channel(self, route: Route, steps: int, step_bytes: float, label: str) -> simpy.events.ProcessGenerator:
        """One pipelined ring channel: ``steps`` steps of ``step_bytes`` each, in chunks."""
        env = self.env
        chunks = self.chunks(step_bytes)
        chunk = step_bytes / chunks
        previous: list[simpy.Event] = []
        for _ in range(steps):
            arrivals: list[simpy.Event] = []
            for c in range(chunks):
                if previous:
                    yield previous[c]
                yield from send(env, route, chunk, label)
                arrivals.append(env.timeout(route.latency_s))
            previous = arrivals
        if previous:
            yield env.all_of(previous)

    def _flat_routes(self, phase: Phase, stage: int) -> list[list[Route]]:
        """For each tier of a flat ring, the routes its rings leave a member by (ring ``r`` on ``r mod n``).

        Stages are offset so that concurrent pipelines' rings spread over a member's lanes.
        """
        per_tier: list[list[Route]] = []
        for t in phase.tiers:
            groups = self.placement.tiers[t]
            tier = groups.tier
            if groups.stride > 1:
                per_tier.append(
                    self._stride_routes(t, stage)
                    if tier.kind is TierKind.RING
                    else [
                        self.net.route(t, [LaneId(f"chip{stage}", Direction.OUT, i)])
                        for i in range(max(1, tier.lanes // groups.sharers))
                    ]
                )
                continue
            member = groups.member_of(stage)
            lanes = tier.lanes * tier.directions
            offset = stage * lanes if len(groups.member_stages) == 1 else 0
            per_tier.append(
                [
                    self.net.route(t, [self.lane_id(f"m{member}", tier.kind, tier.lanes, (offset + i) % lanes)])
                    for i in range(lanes)
                ]
            )
        return per_tier

    @staticmethod
    def _ring_classes(widths: list[int]) -> tuple[int, list[int]]:
        """The flat ring's rings, and one ring of each class of identical ones.

        Ring ``r`` uses lane ``r mod widths[t]`` at tier ``t``; rings that share a lane, directly or
        through others, must be simulated together. Two such groups with the same number of rings on
        the same number of lanes per tier behave identically, so the first ring of each group of the
        first of each kind is enough: the rings returned are the members of those groups.
        """
        rings = max(widths)
        parent = list(range(rings))

        def root(r: int) -> int:
            while parent[r] != r:
                parent[r] = parent[parent[r]]
                r = parent[r]
            return r

        for width in widths:
            for r in range(width, rings):
                parent[root(r)] = root(r % width)
        groups: dict[int, list[int]] = {}
        for r in range(rings):
            groups.setdefault(root(r), []).append(r)
        kinds: dict[tuple[int, ...], list[int]] = {}
        for members in groups.values():
            kinds.setdefault((len(members), *(len({r % w for r in members}) for w in widths)), members)
        return rings, sorted(r for members in kinds.values() for r in members)

    def flat_ring_hops(self, phase: Phase, stage: int, step_bytes: float) -> int:
        """Hops one flat-ring phase simulates (steps x simulated rings x tiers x chunks)."""
        widths = [len(routes) for routes in self._flat_routes(phase, stage)]
        rings, simulated = self._ring_classes(widths)
        steps = group_size(self.placement, phase.tiers) - 1
        return steps * len(simulated) * len(widths) * self.chunks(step_bytes / rings)

    def _flat_rings(
        self, phase: Phase, stage: int, steps: int, step_bytes: float, label: str
    ) -> simpy.events.ProcessGenerator:
        """NCCL's flat ring: every step crosses every tier at once; the slowest hop sets the pace."""
        per_tier = self._flat_routes(phase, stage)
        rings, simulated = self._ring_classes([len(routes) for routes in per_tier])
        share = step_bytes / rings
        processes = [
            self.env.process(self._flat_channel([routes[r % len(routes)] for routes in per_tier], steps, share, label))
            for r in simulated
        ]
        yield self.env.all_of(processes)

    def _flat_channel(
        self, routes: list[Route], steps: int, step_bytes: float, label: str
    ) -> simpy.events.ProcessGenerator:
        """One ring of the flat ring: a process per tier crossed, in lock step through counted barriers."""
        env = self.env
        chunks = self.chunks(step_bytes)
        chunk = step_bytes / chunks
        barrier = [[env.event() for _ in range(chunks)] for _ in range(steps)]
        pending = [[len(routes)] * chunks for _ in range(steps)]

        def arrived(s: int, c: int) -> Callable[[simpy.Event], None]:
            def callback(_: simpy.Event) -> None:
                pending[s][c] -= 1
                if pending[s][c] == 0:
                    barrier[s][c].succeed()

            return callback

        def hop(route: Route) -> simpy.events.ProcessGenerator:
            for s in range(steps):
                for c in range(chunks):
                    if s:
                        yield barrier[s - 1][c]
                    yield from send(env, route, chunk, label)
                    env.timeout(route.latency_s).callbacks.append(arrived(s, c))

        if steps:
            yield env.all_of([env.process(hop(route)) for route in routes])
            yield env.all_of(barrier[-1])

    def check(self, collective: Collective, algorithm: Algorithm, nbytes: float, stage: int = 0) -> int:
        """Flat-ring hops a collective will simulate (0 for other algorithms); call before running."""
        phases = plan(collective, algorithm, self.placement)
        held = input_bytes(collective, phases, self.placement, nbytes)
        hops = 0
        for phase in phases:
            if phase.kind in (PhaseKind.FLAT_REDUCE_SCATTER, PhaseKind.FLAT_ALL_GATHER):
                g = group_size(self.placement, phase.tiers)
                step = held / g if phase.kind is PhaseKind.FLAT_REDUCE_SCATTER else held
                hops += self.flat_ring_hops(phase, stage, step)
                held = held / g if phase.kind is PhaseKind.FLAT_REDUCE_SCATTER else held * g
        return hops

    def _scatter(self, phase: Phase, stage: int, nbytes: float, label: str) -> simpy.events.ProcessGenerator:
        """The root streams ``(g-1)/g`` of its buffer out of all its lanes.

        On a ring the farthest member is ``g/2`` hops away.
        """
        tier_index = phase.tiers[0]
        groups = self.placement.tiers[tier_index]
        hops = max(1, groups.group // 2) if groups.tier.kind is TierKind.RING else 1
        processes = []
        for routes, split in self._ring_routes(tier_index, stage, phase.collapsed):
            share = nbytes / split
            for route in routes:
                processes.append(self.env.process(self.stream(route, share, label, hops)))
        if processes:
            yield self.env.all_of(processes)

    def _exchange(self, phase: Phase, stage: int, nbytes: float, label: str) -> simpy.events.ProcessGenerator:
        """All-to-all at one tier: each chip sends ``nbytes / g`` to every other member.

        Through a switch every piece is one hop. On a ring each piece takes the shorter way round, so
        the links out of a chip carry ``nbytes / g * sum(min(k, g - k))`` bytes over both directions and
        the farthest piece is ``g // 2`` hops away.
        """
        tier_index = phase.tiers[0]
        groups = self.placement.tiers[tier_index]
        g = groups.group
        if groups.tier.kind is TierKind.RING:
            load, hops = nbytes / g * sum(min(k, g - k) for k in range(1, g)), max(1, g // 2)
        else:
            load, hops = nbytes * (g - 1) / g, 1
        processes = []
        for routes, split in self._ring_routes(tier_index, stage, phase.collapsed):
            for route in routes:
                processes.append(self.env.process(self.stream(route, load / split, label, hops)))
        if processes:
            yield self.env.all_of(processes)

    def _switch_reduce(self, phase: Phase, stage: int, nbytes: float, label: str) -> simpy.events.ProcessGenerator:
        """All-reduce in the switch: each chip sends its buffer once over all its ports.

        The switch reduces and multicasts the result back (the return path is the switch's, not the
        chip's egress).
        """
        processes = []
        for routes, split in self._ring_routes(phase.tiers[0], stage, phase.collapsed):
            for route in routes:
                processes.append(self.env.process(self.stream(route, nbytes / split, label)))
        if processes:
            yield self.env.all_of(processes)

    def _tree(self, phase: Phase, stage: int, nbytes: float, label: str, reduce: bool) -> simpy.events.ProcessGenerator:
        """A double binary tree at a switched tier, simulated along one root-to-leaf path.

        The path's node at depth ``d`` is ``nD``; ``sD`` is its sibling (the other child of ``n(D-1)``).
        ``n0`` is the representative member itself (its egress lanes are the member's ports).
        """
        tier_index = phase.tiers[0]
        depth = max(1, math.ceil(math.log2(self.placement.tiers[tier_index].group)))
        processes = []
        for member, indices, split in self._ports(tier_index, stage, phase.collapsed):
            share = nbytes / 2 / split  # each of the two trees carries half
            for port in indices:
                tree = TreePorts(self, tier_index, member, port, label)
                runner = tree.reduce if reduce else tree.broadcast
                processes.append(self.env.process(runner(depth, share)))
        if processes:
            yield self.env.all_of(processes)


def check_flat_ring_budget(hops: int, system: str) -> None:
    """Refuse a step whose flat rings would simulate more than :data:`MAX_FLAT_RING_HOPS` hops."""
    if hops > MAX_FLAT_RING_HOPS:
        raise LimitError(
            system,
            "--collective",
            f"the flat ring would simulate {hops} hops in this step (at most {MAX_FLAT_RING_HOPS}, "
            "a step per chip per gradient bucket); use hierarchical, tree or a larger --bucket-size",
        )


@dataclass(frozen=True)
class CollectiveOutcome:
    """Time of one collective run alone, and the busiest lanes' statistics."""

    time_s: float
    lanes: tuple[tuple[str, float, float], ...]
    """(lane name, bytes carried, busy seconds) of every representative lane."""


def simulate_collective(
    fabric: Fabric,
    collective: Collective | str,
    nbytes: float,
    algorithm: Algorithm | str | None = None,
    stages: int = 1,
    chunk_bytes: float = DEFAULT_CHUNK_BYTES,
    launch_s: float = 0.0,
) -> CollectiveOutcome:
    """Time one collective of ``nbytes`` over the data-parallel groups of ``fabric`` (alone on it).

    With ``stages`` > 1 the chips form pipelines and every stage runs the collective at once over its
    own group (``nbytes`` each), sharing links as they would in training. ``launch_s`` is paid once
    before the first byte moves (a collective library's launch latency).
    """
    import simpy  # loaded only where SimPy runs (a one-chip run never does)

    env = simpy.Environment()
    statistics = LinkStatistics()
    net = RepNetwork(env, fabric, [statistics])
    placement = place(fabric, stages)
    engine = CollectiveEngine(net, placement, chunk_bytes, launch_s=launch_s)
    chosen = resolve_algorithm(algorithm, fabric)
    kind = Collective(collective)
    check_flat_ring_budget(sum(engine.check(kind, chosen, nbytes, s) for s in range(stages)), fabric.system)
    for stage in range(stages):
        env.process(engine.run(kind, chosen, nbytes, stage))
    env.run()
    used = statistics.bytes, statistics.busy_s
    lanes = tuple((lane.name, used[0].get(lane, 0.0), used[1].get(lane, 0.0)) for lane in net.lanes)
    return CollectiveOutcome(env.now, lanes)
