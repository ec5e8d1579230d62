"""What a collective does, tier by tier: its phases (pure; the engine runs them).

:func:`plan` turns a collective, an algorithm and a placement into :class:`Phase` s (see
:mod:`archsim.engine.collectives` for the algorithms); :func:`resolve_algorithm` picks the algorithm
(``auto``: the system's); :func:`torus_parts` says how many parts a torus collective runs in at once.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from archsim.errors import UsageError
from archsim.models.interconnect import Fabric, TierKind
from archsim.models.placement import Placement
from archsim.spec.system import Algorithm


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
    shrink = math.prod(group_size(placement, p.tiers) for p in phases)
    return nbytes / shrink


def group_size(placement: Placement, tiers: tuple[int, ...]) -> int:
    """Members of one group across ``tiers`` (the product of their group sizes)."""
    return math.prod(placement.tiers[t].group for t in tiers)
