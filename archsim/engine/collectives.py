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

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import simpy

from archsim.engine.network import RepNetwork, Route, send
from archsim.engine.trees import TreePorts
from archsim.errors import LimitError, UsageError
from archsim.models.interconnect import Fabric, TierKind
from archsim.models.placement import Placement, place
from archsim.spec.system import Algorithm

DEFAULT_CHUNK_BYTES = 512 * 2**10
"""Pipelining chunk (512 KiB, the slot size of NCCL's default 4 MiB buffer over its 8 steps)."""
MAX_CHUNKS = 16
"""Most chunks a ring step is cut into; larger steps use larger chunks (bounds the event count)."""
MAX_FLAT_RING_HOPS = 1_000_000
"""Most flat-ring hops (steps x rings x tiers x chunks) one step may simulate (some seconds): the flat
ring takes a step per chip, where the hierarchical, torus and tree algorithms take steps per tier."""


class Collective(enum.StrEnum):
    """The collectives the engine simulates."""

    ALL_REDUCE = "all-reduce"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_GATHER = "all-gather"
    BROADCAST = "broadcast"
    ALL_TO_ALL = "all-to-all"


class PhaseKind(enum.StrEnum):
    """What one phase does at its tier."""

    REDUCE_SCATTER = "rs"
    ALL_GATHER = "ag"
    TREE_REDUCE = "reduce"
    TREE_BROADCAST = "bcast"
    SCATTER = "scatter"
    FLAT_REDUCE_SCATTER = "flat-rs"
    FLAT_ALL_GATHER = "flat-ag"
    EXCHANGE = "exchange"
    SWITCH_REDUCE = "switch-reduce"


@dataclass(frozen=True)
class Phase:
    """One step of a collective's plan."""

    kind: PhaseKind
    tiers: tuple[int, ...]
    collapsed: frozenset[int] = frozenset()
    """Lower tiers reduced onto a root by a tree: only their root chips take part."""


def resolve_algorithm(algorithm: str | Algorithm | None, fabric: Fabric, source: str = "") -> Algorithm:
    """The algorithm to run: ``auto``/None picks the system's default; ``torus`` needs a torus tier."""
    try:
        chosen = Algorithm(algorithm or Algorithm.AUTO)
    except ValueError:
        choices = ", ".join(a.value for a in Algorithm)
        raise UsageError(source or fabric.system, "--collective", f"{algorithm!r} is not one of {choices}") from None
    if chosen is Algorithm.AUTO:
        chosen = Algorithm(fabric.default_algorithm)
    if chosen is Algorithm.TORUS and fabric.num_chips > 1 and not any(t.torus for t in fabric.tiers):
        raise UsageError(
            source or fabric.system, "--collective", f"torus needs a torus level; {fabric.system} has none"
        )
    return chosen


def torus_parts(collective: Collective, algorithm: Algorithm, placement: Placement) -> int:
    """Parts a torus collective runs in at once.

    One per active dimension when every active tier is a torus dimension (reduce-scatter, all-gather,
    all-reduce); else 1.
    """
    active = [g for g in placement.tiers if g.group > 1]
    reduces = collective in (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER)
    if algorithm is Algorithm.TORUS and reduces and len(active) > 1 and all(g.tier.torus for g in active):
        return len(active)
    return 1


def plan(collective: Collective, algorithm: Algorithm, placement: Placement, rotation: int = 0) -> list[Phase]:
    """The phases of ``collective`` with ``algorithm`` over the data-parallel groups of ``placement``.

    ``rotation`` starts a torus plan at that active tier (the order of :func:`torus_parts`' parts).
    """
    active = [g.index for g in placement.tiers if g.group > 1]
    if not active:
        return []
    if rotation:
        active = active[rotation:] + active[:rotation]
    if collective is Collective.ALL_TO_ALL:  # dimension by dimension, whatever the all-reduce algorithm
        return [Phase(PhaseKind.EXCHANGE, (t,)) for t in active]
    if algorithm is Algorithm.RING and collective is not Collective.BROADCAST:
        rs, ag = Phase(PhaseKind.FLAT_REDUCE_SCATTER, tuple(active)), Phase(PhaseKind.FLAT_ALL_GATHER, tuple(active))
        return {Collective.ALL_REDUCE: [rs, ag], Collective.REDUCE_SCATTER: [rs], Collective.ALL_GATHER: [ag]}[
            collective
        ]
    tree = algorithm is Algorithm.TREE

    def pooled(index: int) -> bool:
        return placement.tiers[index].tier.kind is TierKind.POOLED

    if collective is Collective.BROADCAST:
        everything = frozenset(active)
        phases: list[Phase] = []
        for t in reversed(active):
            below = frozenset(u for u in everything if u != t)
            if tree and pooled(t):
                phases.append(Phase(PhaseKind.TREE_BROADCAST, (t,), below))
            else:
                phases += [Phase(PhaseKind.SCATTER, (t,), below), Phase(PhaseKind.ALL_GATHER, (t,), below)]
        return phases
    up: list[Phase] = []
    down: list[Phase] = []
    collapsed: frozenset[int] = frozenset()
    for t in active:
        if collective is Collective.ALL_REDUCE and placement.tiers[t].tier.in_network_reduction:
            up.append(Phase(PhaseKind.SWITCH_REDUCE, (t,), collapsed))
        elif tree and pooled(t) and collective is Collective.ALL_REDUCE:
            up.append(Phase(PhaseKind.TREE_REDUCE, (t,), collapsed))
            down.insert(0, Phase(PhaseKind.TREE_BROADCAST, (t,), collapsed))
            collapsed = collapsed | {t}
        else:
            up.append(Phase(PhaseKind.REDUCE_SCATTER, (t,), collapsed))
            down.insert(0, Phase(PhaseKind.ALL_GATHER, (t,), collapsed))
    return {Collective.ALL_REDUCE: up + down, Collective.REDUCE_SCATTER: up, Collective.ALL_GATHER: down}[collective]


def input_bytes(collective: Collective, phases: list[Phase], placement: Placement, nbytes: float) -> float:
    """Bytes each chip holds when the first phase starts (a shard for all-gather, else everything)."""
    if collective is not Collective.ALL_GATHER:
        return nbytes
    shrink = math.prod(_group(placement, p.tiers) for p in phases)
    return nbytes / shrink


def _group(placement: Placement, tiers: tuple[int, ...]) -> int:
    return math.prod(placement.tiers[t].group for t in tiers)


@dataclass
class CollectiveEngine:
    """Runs collectives of one placement on a representative network, chunked."""

    net: RepNetwork
    placement: Placement
    chunk_bytes: float = DEFAULT_CHUNK_BYTES
    max_chunks: int = MAX_CHUNKS
    launch_s: float = 0.0
    """Fixed latency of every call (the collective library's launch), before the first byte moves."""
    records: list[tuple[str, int, float, float, float]] = field(default_factory=list)
    """(name, stage, bytes, start_s, end_s) of every collective run."""

    @property
    def env(self) -> simpy.Environment:
        """The environment the network lives in."""
        return self.net.env

    def chunks(self, nbytes: float) -> int:
        """Chunks a transfer of ``nbytes`` is pipelined in."""
        if nbytes <= 0:
            return 1
        return max(1, min(self.max_chunks, math.ceil(nbytes / self.chunk_bytes)))

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
        self.records.append((label, stage, nbytes, start, self.env.now))

    def _phases(self, phases: list[Phase], stage: int, held: float, label: str) -> simpy.events.ProcessGenerator:
        """Run ``phases`` one after another, starting with ``held`` bytes per chip."""
        for phase in phases:
            held = yield from self._phase(phase, stage, held, label)

    # -- phases ---------------------------------------------------------------------------------

    def _phase(self, phase: Phase, stage: int, held: float, label: str) -> simpy.events.ProcessGenerator:
        """Run one phase; returns the bytes each taking-part chip holds afterwards."""
        g = _group(self.placement, phase.tiers)
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

    @staticmethod
    def lane_name(kind: TierKind, lanes: int, index: int) -> str:
        """Name of lane ``index`` of a member: ``outI`` of a port pool, ``+I``/``-I`` of a ring."""
        if kind is TierKind.POOLED:
            return f"out{index}"
        return f"+{index}" if index < lanes else f"-{index - lanes}"

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
            return [(f"chip{stage}", list(range(lanes)), lanes)]
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
                [self.net.route(tier_index, [f"{member} {self.lane_name(tier.kind, tier.lanes, i)}"]) for i in indices],
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
            for sign, direction in ((1, "+"), (-1, "-")):
                chips = [(stage + sign * k) % stages for k in range(stages)]
                routes.append(self.net.route(tier_index, [f"chip{c} {direction}{i}" for c in chips], hops=stages))
        return routes

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
                    else [self.net.route(t, [f"chip{stage} out{i}"]) for i in range(tier.lanes)]
                )
                continue
            member = groups.member_of(stage)
            lanes = tier.lanes * tier.directions
            offset = stage * lanes if len(groups.member_stages) == 1 else 0
            per_tier.append(
                [
                    self.net.route(t, [f"m{member} {self.lane_name(tier.kind, tier.lanes, (offset + i) % lanes)}"])
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
        steps = _group(self.placement, phase.tiers) - 1
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
                g = _group(self.placement, phase.tiers)
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

    def stream(self, route: Route, nbytes: float, label: str, hops: int = 1) -> simpy.events.ProcessGenerator:
        """Process: send ``nbytes`` over ``route`` in chunks, then wait ``hops`` latencies for the last one."""
        chunks = self.chunks(nbytes)
        for _ in range(chunks):
            yield from send(self.env, route, nbytes / chunks, label)
        yield self.env.timeout(route.latency_s * hops)

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
    env = simpy.Environment()
    net = RepNetwork(env, fabric)
    placement = place(fabric, stages)
    engine = CollectiveEngine(net, placement, chunk_bytes, launch_s=launch_s)
    chosen = resolve_algorithm(algorithm, fabric)
    kind = Collective(collective)
    check_flat_ring_budget(sum(engine.check(kind, chosen, nbytes, s) for s in range(stages)), fabric.system)
    for stage in range(stages):
        env.process(engine.run(kind, chosen, nbytes, stage))
    env.run()
    lanes = tuple((lane.name, lane.bytes, lane.busy_s) for lane in net.lanes)
    return CollectiveOutcome(env.now, lanes)
