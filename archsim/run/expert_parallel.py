"""The chips of one expert-parallel group, as a fabric its all-to-alls are priced on.

Placement (:mod:`archsim.models.placement`) puts a tensor-parallel group's ``T`` chips first, then the
pipeline's stages, then the data-parallel replicas: replica ``r`` holds chips ``r x T x P ...``. An
expert-parallel group of ``X`` chips is ``X`` consecutive replicas' chips of the same stage and
tensor-parallel rank, so its members are ``T x P`` chips apart (Megatron-LM builds its expert groups
from the data-parallel ranks the same way). :func:`archsim.run.tensor_parallel.group_fabric` gives the
tiers such a group spans: at each tier of the system, how many of the group's chips one member of
that tier holds. Inside an
NVLink node of 8 GPUs with ``T x P = 1`` a group of 8 is one tier of 8 chips; with ``T = 8`` each
chip of the group is in another node and the group spans the scale-out fabric, one chip per member,
with that chip's share of its node's ports (``lanes x chips / chips_per_member``, at least one).

The all-to-all itself (pairwise exchange: each chip sends ``1/X`` of its buffer to every other
member, ``(X-1)/X`` of it leaves the chip, at each tier along that tier's links) is the collective
engine's (:mod:`archsim.engine.collectives`), one call of the system's collective library with its
launch latency and protocol, as ``archsim collective all-to-all`` prices it on the same chips:
:class:`~archsim.run.tensor_parallel.GroupCalls` on this fabric. Like the tensor-parallel group's,
the group's links are its own: its calls do not contend with data-parallel gradient traffic.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from archsim.run.tensor_parallel import scale_out_nodes

if TYPE_CHECKING:  # the multi-chip modules: a one-chip run never loads them
    from archsim.models.interconnect import Fabric, Tier

EXPERT_PARALLEL_NOTE = "each chip holds a share of the experts: no one chip runs the whole model"
"""Why an expert-parallel run has no one-chip reference (``scaling_note``)."""


def expert_data_fabric(fabric: Fabric, unit: int, expert_parallel: int) -> Fabric:
    """The fabric of the replicas that hold the same experts: every ``expert_parallel``-th block of ``unit`` chips.

    ``unit`` is a replica's chips (``T x P``); the ``X`` consecutive replicas of an expert-parallel
    group take the innermost replica coordinates of the tiers, so each tier keeps ``1/X`` of those
    (at most) and the members of higher tiers the chips left; a member's ports are shared by the
    ``X`` groups that cross them at once (``lanes x chips kept / chips_per_member``, at least one).
    """
    tiers: list[Tier] = []
    remove, below, kept = expert_parallel, 1, 1
    for tier in fabric.tiers:
        inside = min(tier.size, max(1, unit // below))  # members of this tier within one replica
        take = math.gcd(tier.size // inside, remove)
        remove //= take
        size = tier.size // take
        if size > 1:
            lanes = max(1, tier.lanes * kept // tier.chips_per_member)
            tiers.append(replace(tier, size=size, chips_per_member=kept, lanes=lanes))
        below *= tier.size
        kept *= size
    same_first = bool(fabric.tiers) and bool(tiers) and tiers[0] == fabric.tiers[0]
    ring = fabric.first_ring if same_first else ()
    return replace(fabric, nodes=scale_out_nodes(tiers), num_chips=kept, tiers=tuple(tiers), first_ring=ring)
