"""Where pipeline stages and data-parallel replicas sit on a fabric's tiers (pure, no SimPy).

Chips are numbered along the tiers, innermost first. A pipeline of ``P`` stages occupies ``P``
consecutive chips of the first tier (``P`` must divide its size): chip ``i`` runs stage ``i mod P``.
Every other chip is a data-parallel replica of one of those, so the data-parallel group of stage
``s`` is every chip of stage ``s``: at the first tier ``size / P`` members at a stride of ``P``, at
every higher tier all ``size`` members.

The engine simulates one *representative member* per tier for each distinct set of stages a member
holds (one member when a member holds whole pipelines, one per stage when it holds a single chip,
as the first tier and the further dimensions of a chip-level torus do). By symmetry every other
member of the tier does the same thing at the same time on its own links.
"""

from __future__ import annotations

from dataclasses import dataclass

from archsim.errors import UsageError
from archsim.models.interconnect import Fabric, Tier


@dataclass(frozen=True)
class TierGroups:
    """The data-parallel groups at one tier and the representative members the engine simulates."""

    index: int
    tier: Tier
    group: int
    """Members in one data-parallel group at this tier (1: no data-parallel traffic here)."""
    stride: int
    """Members between consecutive members of a group (the pipeline's stage count on the first tier)."""
    member_stages: tuple[tuple[int, ...], ...]
    """For each representative member, the stage of each of its chips, in chip order."""

    def member_of(self, stage: int) -> int:
        """The representative member that holds chips of ``stage``."""
        return stage if len(self.member_stages) > 1 else 0


@dataclass(frozen=True)
class Placement:
    """Pipeline stages and data-parallel groups of one run on a fabric."""

    fabric: Fabric
    stages: int
    data_parallel: int
    """Replicas of the pipeline (the data-parallel width): chips / stages."""
    tiers: tuple[TierGroups, ...]

    def coordinate(self, tier_index: int, local_chip: int) -> int:
        """Position in its data-parallel group, at tier ``tier_index``, of chip ``local_chip`` of a member."""
        groups = self.tiers[tier_index]
        coord = (local_chip // self.fabric.chips_below(tier_index)) % groups.tier.size
        return coord // groups.stride

    def active_chips(self, tier_index: int, member: int, collapsed: frozenset[int], stage: int | None) -> list[int]:
        """Chips of a representative member that take part in a phase at ``tier_index``.

        A chip takes part unless a lower tier inside its member was reduced onto a root by a tree
        (``collapsed``) and the chip is not at that root. ``stage`` None means chips of every stage.
        """
        groups = self.tiers[tier_index]
        level = groups.tier.level_index
        inside = [u for u in collapsed if u < tier_index and self.tiers[u].tier.level_index < level]
        return [
            i
            for i, chip_stage in enumerate(groups.member_stages[member])
            if (stage is None or chip_stage == stage) and all(self.coordinate(u, i) == 0 for u in inside)
        ]


def place(fabric: Fabric, stages: int, source: str = "") -> Placement:
    """Place a pipeline of ``stages`` along the first tier and replicate it over the rest.

    Raises UsageError when ``stages`` does not divide the first tier's size.
    """
    source = source or fabric.system
    if stages < 1:
        raise UsageError(source, "--pipeline-stages", f"must be a positive integer, got {stages}")
    tiers = fabric.tiers
    if stages > 1:
        first = tiers[0] if tiers else None
        if first is None or first.size % stages:
            size = first.size if first is not None else 1
            where = f"its first tier ({first.name}, {size} members)" if first is not None else "it (1 chip)"
            raise UsageError(
                source,
                "--pipeline-stages",
                f"{stages} stages must divide the chips joined by {where} of {fabric.system}",
            )
    groups: list[TierGroups] = []
    for index, tier in enumerate(tiers):
        if index == 0 and stages > 1:
            groups.append(TierGroups(index, tier, tier.size // stages, stages, tuple((s,) for s in range(stages))))
            continue
        m = tier.chips_per_member
        if m % stages == 0:
            members: tuple[tuple[int, ...], ...] = (tuple(i % stages for i in range(m)),)
        else:  # one chip per member (a further dimension of a chip-level torus): one member per stage
            members = tuple((s,) for s in range(stages))
        groups.append(TierGroups(index, tier, tier.size, 1, members))
    return Placement(fabric, stages, fabric.num_chips // stages, tuple(groups))
