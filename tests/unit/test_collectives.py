"""Collectives in the engine: closed forms without contention, the symmetry shortcut, algorithms."""

from __future__ import annotations

import math

import pytest

from archsim.engine.collectives import Collective, CollectiveEngine, plan, resolve_algorithm, simulate_collective
from archsim.errors import UsageError
from archsim.models.interconnect import Fabric, Tier, TierKind, ring_allreduce_closed_form_s
from archsim.models.placement import place
from archsim.run.target import fabric_for
from archsim.spec.library import Library
from archsim.spec.system import Algorithm
from tests.reference_network import full_allreduce_time


def tier(name: str, level: int, kind: TierKind, size: int, member: int, gbps: float, lat_us: float, lanes: int) -> Tier:
    return Tier(name, level, kind, size, member, "test-link", gbps * 1e9, lat_us * 1e-6, lanes)


def fabric(*tiers: Tier) -> Fabric:
    return Fabric("test", "chip", 1, math.prod(t.size for t in tiers), tuple(tiers), "hierarchical")


def test_ring_without_contention_equals_the_closed_form() -> None:
    # one chunk per step: each of the 2 x lanes channels is an unpipelined ring of p steps
    for p, lanes in [(2, 1), (5, 1), (8, 3)]:
        f = fabric(tier("r", 0, TierKind.RING, p, 1, 10, 2, lanes))
        nbytes = 100e3
        got = simulate_collective(f, Collective.ALL_REDUCE, nbytes, Algorithm.RING).time_s
        expected = ring_allreduce_closed_form_s(nbytes / (2 * lanes), p, 10e9, 2e-6)
        assert got == pytest.approx(expected, rel=1e-12)


SYMMETRIC = {
    "ring5": (tier("a", 0, TierKind.RING, 5, 1, 10, 1, 2),),
    "switch4": (tier("a", 0, TierKind.POOLED, 4, 1, 10, 1, 3),),
    "torus3x4": (tier("a.d0", 0, TierKind.RING, 3, 1, 10, 1, 1), tier("a.d1", 0, TierKind.RING, 4, 1, 10, 2, 1)),
    "switch2+ring3": (tier("a", 0, TierKind.POOLED, 2, 1, 20, 1, 1), tier("b", 1, TierKind.RING, 3, 2, 5, 3, 4)),
}
SHARED_PORTS = {
    "ring4+switch3": (tier("a", 0, TierKind.RING, 4, 1, 20, 1, 2), tier("b", 1, TierKind.POOLED, 3, 4, 5, 3, 2)),
    "switch4+switch2": (tier("a", 0, TierKind.POOLED, 4, 1, 20, 1, 3), tier("b", 1, TierKind.POOLED, 2, 4, 5, 3, 3)),
}


@pytest.mark.parametrize("name", sorted(SYMMETRIC))
@pytest.mark.parametrize("nbytes", [1e3, 3e6, 1e8])
def test_symmetry_shortcut_equals_the_full_simulation(name: str, nbytes: float) -> None:
    f = fabric(*SYMMETRIC[name])
    representative = simulate_collective(f, Collective.ALL_REDUCE, nbytes, Algorithm.HIERARCHICAL).time_s
    assert representative == pytest.approx(full_allreduce_time(f, nbytes), rel=1e-9)


@pytest.mark.parametrize("name", sorted(SHARED_PORTS))
@pytest.mark.parametrize("nbytes", [1e3, 3e6, 1e8])
def test_symmetry_shortcut_with_shared_ports_is_within_one_percent(name: str, nbytes: float) -> None:
    # a member's chips share its ports; the representative waits for the most loaded one
    f = fabric(*SHARED_PORTS[name])
    representative = simulate_collective(f, Collective.ALL_REDUCE, nbytes, Algorithm.HIERARCHICAL).time_s
    full = full_allreduce_time(f, nbytes)
    assert full <= representative * (1 + 1e-9)
    assert representative == pytest.approx(full, rel=0.01)


def test_reduce_scatter_and_all_gather_are_the_halves_of_all_reduce() -> None:
    f = fabric(tier("r", 0, TierKind.RING, 8, 1, 10, 1, 1))
    nbytes = 64e6
    whole = simulate_collective(f, Collective.ALL_REDUCE, nbytes).time_s
    rs = simulate_collective(f, Collective.REDUCE_SCATTER, nbytes).time_s
    ag = simulate_collective(f, Collective.ALL_GATHER, nbytes).time_s
    assert rs == pytest.approx(ag, rel=1e-9)
    assert rs + ag == pytest.approx(whole, rel=1e-9)


def test_tree_beats_ring_on_small_messages_and_not_on_large_ones() -> None:
    f = fabric(tier("s", 0, TierKind.POOLED, 64, 1, 25, 1, 1))
    small_tree = simulate_collective(f, Collective.ALL_REDUCE, 1e3, Algorithm.TREE).time_s
    small_ring = simulate_collective(f, Collective.ALL_REDUCE, 1e3, Algorithm.RING).time_s
    assert small_tree < small_ring / 3  # log2(64) hops against 63
    big_tree = simulate_collective(f, Collective.ALL_REDUCE, 256e6, Algorithm.TREE).time_s
    big_ring = simulate_collective(f, Collective.ALL_REDUCE, 256e6, Algorithm.RING).time_s
    assert big_ring < big_tree < 1.5 * big_ring


def test_hierarchical_beats_the_flat_ring_across_nodes(library: Library) -> None:
    f = fabric_for(library.system("dgx1"), library, 4, "dgx1")
    flat = simulate_collective(f, Collective.ALL_REDUCE, 100e6, Algorithm.RING).time_s
    hierarchical = simulate_collective(f, Collective.ALL_REDUCE, 100e6, Algorithm.HIERARCHICAL).time_s
    assert hierarchical < flat
    # the flat ring is bound by the InfiniBand hop: 2(N-1)/N * S over 4 x 12.5 GB/s
    assert flat >= 2 * 31 / 32 * 100e6 / (4 * 12.5e9)


def test_nic_sharing_is_contended(library: Library) -> None:
    # DGX-1 has 4 EDR ports for 8 GPUs: the inter-node phase is limited by them
    f = fabric_for(library.system("dgx1"), library, 2, "dgx1")
    outcome = simulate_collective(f, Collective.ALL_REDUCE, 80e6)
    nic = [busy for name, _, busy in outcome.lanes if name.startswith("scale-out")]
    assert len(nic) == 1  # the four ports carry the same load: one is simulated, with both its GPUs
    shard = 80e6 / 8  # after the NVLink reduce-scatter; each GPU sends half of it out and gets half back
    assert min(nic) == pytest.approx(2 * 2 * (shard / 2) / 12.5e9, rel=1e-6)  # two GPUs per port


def test_broadcast_streams_the_buffer_once_per_tier() -> None:
    f = fabric(tier("s", 0, TierKind.POOLED, 8, 1, 10, 1, 1))
    t = simulate_collective(f, Collective.BROADCAST, 80e6).time_s
    assert t >= 80e6 / 10e9
    assert t < 3 * 80e6 / 10e9


def test_concurrent_pipeline_stages_share_ring_links() -> None:
    f = fabric(tier("r", 0, TierKind.RING, 8, 1, 10, 1, 1))
    two_stages = simulate_collective(f, Collective.ALL_REDUCE, 40e6, stages=2).time_s
    alone = simulate_collective(fabric(tier("r", 0, TierKind.RING, 4, 1, 10, 1, 1)), Collective.ALL_REDUCE, 40e6).time_s
    assert two_stages > 1.9 * alone  # each link carries both stages' rings


def test_plans() -> None:
    f = fabric(tier("a", 0, TierKind.RING, 4, 1, 10, 1, 1), tier("b", 1, TierKind.POOLED, 2, 4, 10, 1, 1))
    placement = place(f, 1)
    kinds = [(p.kind.value, p.tiers) for p in plan(Collective.ALL_REDUCE, Algorithm.HIERARCHICAL, placement)]
    assert kinds == [("rs", (0,)), ("rs", (1,)), ("ag", (1,)), ("ag", (0,))]
    kinds = [(p.kind.value, p.tiers) for p in plan(Collective.ALL_REDUCE, Algorithm.TREE, placement)]
    assert kinds == [("rs", (0,)), ("reduce", (1,)), ("bcast", (1,)), ("ag", (0,))]
    kinds = [(p.kind.value, p.tiers) for p in plan(Collective.ALL_REDUCE, Algorithm.RING, placement)]
    assert kinds == [("flat-rs", (0, 1)), ("flat-ag", (0, 1))]
    assert plan(Collective.ALL_REDUCE, Algorithm.RING, place(fabric(), 1)) == []


def test_algorithm_choice() -> None:
    f = fabric(tier("s", 0, TierKind.POOLED, 4, 1, 10, 1, 1))
    assert resolve_algorithm(None, f) is Algorithm.HIERARCHICAL
    assert resolve_algorithm("auto", f) is Algorithm.HIERARCHICAL
    with pytest.raises(UsageError, match="torus needs a torus level"):
        resolve_algorithm("torus", f)
    with pytest.raises(UsageError, match="is not one of"):
        resolve_algorithm("butterfly", f)


@pytest.mark.parametrize(("system", "nodes", "stages"), [("dgx1", 4, 1), ("ipu-pod128", 1, 1), ("dgx2", 3, 4)])
@pytest.mark.parametrize("algorithm", [Algorithm.RING, Algorithm.HIERARCHICAL, Algorithm.TREE])
def test_simulating_one_lane_or_ring_per_identical_class_changes_nothing(
    library: Library, monkeypatch: pytest.MonkeyPatch, system: str, nodes: int, stages: int, algorithm: Algorithm
) -> None:
    f = fabric_for(library.system(system), library, nodes, system)
    reduced = simulate_collective(f, Collective.ALL_REDUCE, 30e6, algorithm, stages=stages).time_s

    def every_ring(widths: list[int]) -> tuple[int, list[int]]:
        return max(widths), list(range(max(widths)))

    def every_port(self: CollectiveEngine, tier_index: int, stage: int, collapsed: frozenset[int]) -> list:  # type: ignore[type-arg]
        groups = self.placement.tiers[tier_index]
        lanes = groups.tier.lanes * groups.tier.directions
        if groups.stride > 1:
            return [(f"chip{stage}", list(range(lanes)), lanes)]
        member = groups.member_of(stage)
        everyone = self.placement.active_chips(tier_index, member, collapsed, None)
        mine = set(self.placement.active_chips(tier_index, member, collapsed, stage))
        per_chip = max(1, lanes // len(everyone))
        return [
            (f"m{member}", [(p * per_chip + r) % lanes for r in range(per_chip)], per_chip)
            for p, chip in enumerate(everyone)
            if chip in mine
        ]

    monkeypatch.setattr(CollectiveEngine, "_ring_classes", staticmethod(every_ring))
    monkeypatch.setattr(CollectiveEngine, "_ports", every_port)
    assert simulate_collective(f, Collective.ALL_REDUCE, 30e6, algorithm, stages=stages).time_s == reduced
