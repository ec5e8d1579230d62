"""Where tensor-parallel groups, pipeline stages and data-parallel replicas sit on a fabric's tiers (pure).

Chips are numbered along the tiers, innermost first. A tensor-parallel group is ``T`` consecutive
chips of the first tier (``T`` must divide its size); a pipeline of ``P`` stages is ``P`` such groups
in a row, ``U = T x P`` consecutive chips: chip ``i`` runs stage ``(i // T) mod P``. Without tensor
parallelism ``P`` divides the first tier's size (the pipeline lies within one member of the next
tier) or is a multiple of it (Graphcore's 8-stage BERT over two IPU-M2000s); with it a pipeline may
span members of higher tiers (Megatron-LM's GPT-3 runs: ``T = 8`` inside a DGX node, the stages
across nodes). Either way the chips it spans must tile each tier. Every other chip is a data-parallel
replica, so the data-parallel group of a chip is every chip with its stage and its tensor-parallel
rank. At a tier whose members (of ``m`` chips) each hold whole pipelines (``U`` divides ``m``), that
group takes all ``size`` members; at a tier whose members are smaller than a pipeline, ``size /
(U/m)`` members at a stride of ``U/m`` (1 when the pipeline spans the whole tier: no data-parallel
traffic there).

The engine simulates one *representative member* per tier for each distinct set of stages a member
holds (one member when a member holds whole pipelines, one per stage when it holds a single chip,
as the first tier and the further dimensions of a chip-level torus do). By symmetry every other
member of the tier does the same thing at the same time on its own links.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from archsim.errors import UsageError
from archsim.models.interconnect import Fabric, Tier

if TYPE_CHECKING:
    from archsim.spec.model import DecoderSection


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
    sharers: int = 1
    """On a strided tier, the chips of one member that share its lanes for one stage's traffic (the
    tensor-parallel ranks of the stage in a member of several chips; 1 for single-chip members)."""

    def member_of(self, stage: int) -> int:
        """The representative member that holds chips of ``stage``."""
        if len(self.member_stages) == 1:
            return 0
        return next((k for k, stages in enumerate(self.member_stages) if stage in stages), 0)


@dataclass(frozen=True)
class Placement:
    """Pipeline stages and data-parallel groups of one run on a fabric."""

    fabric: Fabric
    stages: int
    data_parallel: int
    """Replicas of the pipeline (the data-parallel width): chips / (stages x tensor_parallel)."""
    tiers: tuple[TierGroups, ...]
    tensor_parallel: int = 1
    """Chips of one tensor-parallel group (consecutive chips of the first tier)."""

    def send_tier(self, stage: int, to: int | None = None) -> int:
        """The tier whose links carry stage ``stage``'s activations to stage ``to`` (None: ``stage + 1``).

        The highest tier at which the two stages' chips (same tensor-parallel rank) sit in different
        members; 0 when both are on one member of the first tier.
        """
        other = stage + 1 if to is None else to
        a, b = stage * self.tensor_parallel, other * self.tensor_parallel
        crossing = 0
        for index in range(len(self.tiers)):
            below = self.fabric.chips_below(index)
            if a // below != b // below:
                crossing = index
        return crossing

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


Model = tuple[str, "DecoderSection"]
"""A decoder model a layout splits: the name its refusals give, and its decoder section."""


def tensor_parallel_fits(fabric: Fabric, model: DecoderSection | None = None) -> list[int]:
    """The tensor-parallel degrees ``fabric`` allows, ascending, and of those the ones ``model`` splits into.

    A group is consecutive chips of the first tier, so its size divides the tier's (a group never leaves
    its NVLink or IPU-Link domain); a decoder's heads, key/value heads and feed-forward size must split
    over it (:func:`~archsim.workloads.decoder.tensor_parallel_problem`).
    """
    first_size = fabric.tiers[0].size if fabric.tiers else 1
    fits = [d for d in range(1, first_size + 1) if first_size % d == 0]
    if model is None:
        return fits
    from archsim.workloads.decoder import tensor_parallel_problem  # only where a model is split

    return [d for d in fits if tensor_parallel_problem(model, d) is None]


def check_tensor_parallel(fabric: Fabric, tensor_parallel: int, source: str, model: Model | None = None) -> None:
    """Refuse (one line, naming the degrees that would do) a tensor-parallel group the fabric or model cannot take."""
    t = tensor_parallel
    if t == 1:
        return
    first = fabric.tiers[0] if fabric.tiers else None
    first_size = first.size if first is not None else 1
    fits = ", ".join(map(str, tensor_parallel_fits(fabric, None if model is None else model[1])))
    if first_size % t:
        where = f"its first tier ({first.name}, {first_size} chips)" if first is not None else "it (1 chip)"
        raise UsageError(source, "--tensor-parallel", f"{t} chips must divide {where} of {fabric.system}; {fits} would")
    if model is not None:
        from archsim.workloads.decoder import tensor_parallel_problem

        problem = tensor_parallel_problem(model[1], t)
        if problem is not None:
            where = f"{first.name} of {first_size} chips" if first is not None else "1 chip"
            raise UsageError(model[0], "--tensor-parallel", f"{problem}; {fits} would on {fabric.system} ({where})")


def place(
    fabric: Fabric, stages: int, source: str = "", tensor_parallel: int = 1, model: Model | None = None
) -> Placement:
    """Place tensor-parallel groups, then a pipeline of ``stages``, along the tiers; replicate the rest.

    Raises UsageError naming what would fit when the groups (of the decoder ``model``, if given: its
    heads must split too) or the pipeline do not tile the tiers. The one check of a layout's shape:
    a run refuses what it raises, and ``archsim plan`` never simulates such a layout.
    """
    source = source or fabric.system
    if stages < 1:
        raise UsageError(source, "--pipeline-stages", f"must be a positive integer, got {stages}")
    tiers = fabric.tiers
    t = tensor_parallel
    first = tiers[0] if tiers else None
    first_size = first.size if first is not None else 1
    where = f"its first tier ({first.name}, {first_size} chips)" if first is not None else "it (1 chip)"
    check_tensor_parallel(fabric, t, source, model)
    if t == 1 and stages > 1 and first_size % stages and stages % first_size:
        problem = f"{stages} stages must divide the chips joined by {where} of {fabric.system}, or be a multiple"
        raise UsageError(source, "--pipeline-stages", problem)
    unit = t * stages
    if not _tiles(fabric, unit):
        fits = ", ".join(str(p) for p in range(1, fabric.num_chips // t + 1) if _tiles(fabric, t * p))
        raise UsageError(
            source,
            "--pipeline-stages",
            f"{stages} stages of {t} chips do not tile the {fabric.num_chips} chips of {fabric.system} "
            f"({', '.join(str(x.size) for x in tiers)} per tier); {fits} would",
        )
    groups = [_tier_groups(fabric, index, tier, stages, t) for index, tier in enumerate(tiers)]
    return Placement(fabric, stages, fabric.num_chips // unit, tuple(groups), t)


def _tiles(fabric: Fabric, unit: int) -> bool:
    """True when blocks of ``unit`` consecutive chips tile every tier (whole members, whole groups)."""
    if fabric.num_chips % unit:
        return False
    for index, tier in enumerate(fabric.tiers):
        below, size = fabric.chips_below(index), tier.size
        if unit <= below:
            ok = below % unit == 0
        elif unit < below * size:
            ok = unit % below == 0 and size % (unit // below) == 0
        else:
            ok = unit % (below * size) == 0
        if not ok:
            return False
    return True


def _tier_groups(fabric: Fabric, index: int, tier: Tier, stages: int, t: int) -> TierGroups:
    """The data-parallel groups at one tier and its representative members (see the module docstring)."""
    unit = t * stages
    below = fabric.chips_below(index)
    m = tier.chips_per_member
    if unit == 1:
        return TierGroups(index, tier, tier.size, 1, ((0,) * m,))
    if unit <= below:  # each member holds whole pipelines
        if m % unit == 0:
            members: tuple[tuple[int, ...], ...] = (tuple((i // t) % stages for i in range(m)),)
        else:  # one chip per member (a further dimension of a chip-level torus): one member per stage
            members = tuple((s,) for s in range(stages))
        return TierGroups(index, tier, tier.size, 1, members)
    span = unit // below  # members of this tier one pipeline spans
    # the pipeline spans the whole tier or more: one group of 1, no data-parallel traffic here
    stride, group = min(span, tier.size), max(1, tier.size // span)
    reps: dict[int, tuple[int, ...]] = {}
    for s in range(stages):  # the member holding rank 0 of each stage
        j = (s * t // below) % tier.size
        reps.setdefault(j, tuple(((j * below + i) // t) % stages for i in range(m)))
    members = tuple(reps.values())
    sharers = min(t, m)
    return TierGroups(index, tier, group, stride, members, sharers)
