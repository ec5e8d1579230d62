"""The pure interconnect model: rings in graphs, tiers of a fabric, placement of pipelines, stage splits."""

from __future__ import annotations

import pytest

from archsim.errors import UsageError
from archsim.models.interconnect import (
    TierKind,
    hamiltonian_rings,
    ring_allreduce_closed_form_s,
    ring_allreduce_lower_bound_s,
)
from archsim.models.placement import place
from archsim.run.target import fabric_for
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.workloads import build_trace
from archsim.workloads.pipeline import split_stages, stage_memory_bytes, sub_trace
from archsim.workloads.trace import Mode, Phase

DGX1 = [
    (0, 1, 1),
    (0, 2, 1),
    (0, 3, 2),
    (0, 4, 2),
    (1, 2, 2),
    (1, 3, 1),
    (1, 5, 2),
    (2, 3, 2),
    (2, 6, 1),
    (3, 7, 1),
    (4, 5, 1),
    (4, 6, 1),
    (4, 7, 2),
    (5, 6, 2),
    (5, 7, 1),
    (6, 7, 2),
]


def test_dgx1_cube_mesh_has_three_edge_disjoint_rings() -> None:
    rings = hamiltonian_rings(8, DGX1)
    assert len(rings) == 3  # the whitepaper's "three interwoven rings of single NVLink connections"
    used: dict[tuple[int, int], int] = {}
    for ring in rings:
        assert sorted(ring) == list(range(8))
        for i, a in enumerate(ring):
            b = ring[(i + 1) % 8]
            key = (min(a, b), max(a, b))
            used[key] = used.get(key, 0) + 1
    capacity = {(a, b): n for a, b, n in DGX1}
    assert all(used[e] <= capacity[e] for e in used)
    assert sum(used.values()) == 24  # every one of the 24 NVLinks


def test_full_mesh_of_four_has_one_ring_and_a_path_has_none() -> None:
    k4 = [(a, b, 1) for a in range(4) for b in range(a + 1, 4)]
    assert len(hamiltonian_rings(4, k4)) == 1
    assert hamiltonian_rings(4, [(0, 1, 1), (1, 2, 1), (2, 3, 1)]) == []


def test_doubled_ring_gives_two_rings() -> None:
    assert len(hamiltonian_rings(4, [(0, 1, 2), (1, 2, 2), (2, 3, 2), (3, 0, 2)])) == 2


def test_tiers_of_the_built_in_systems(library: Library) -> None:
    dgx1 = fabric_for(library.system("dgx1"), library, 1, "dgx1")
    assert [(t.kind, t.size, t.lanes) for t in dgx1.tiers] == [(TierKind.RING, 8, 3)]
    assert dgx1.tiers[0].egress_bytes_per_s == pytest.approx(150e9)  # 6 NVLinks of 25 GB/s
    pod = fabric_for(library.system("tpu-v3-pod"), library, 1, "tpu-v3-pod")
    assert [(t.name, t.size) for t in pod.tiers] == [("pod.d0", 32), ("pod.d1", 32)]
    assert pod.num_chips == 1024
    atlas = fabric_for(library.system("atlas-800"), library, 4, "atlas-800")
    assert [(t.name, t.kind, t.lanes, t.chips_per_member) for t in atlas.tiers] == [
        ("hccs", TierKind.POOLED, 3, 1),  # full mesh of 4: 3 ports
        ("server", TierKind.POOLED, 4, 4),
        ("scale-out", TierKind.POOLED, 8, 8),
    ]
    assert atlas.num_chips == 32


def test_scale_out_needs_a_fabric_and_respects_its_limit(library: Library) -> None:
    with pytest.raises(UsageError, match="no scale-out"):
        fabric_for(library.system("ipu-pod16"), library, 2, "x")
    with pytest.raises(UsageError, match="1024 nodes at most"):
        fabric_for(library.system("ipu-pod64"), library, 1025, "x")
    assert fabric_for(library.system("ipu-pod256"), library, 4, "x").num_chips == 1024


def test_placement_of_pipelines(library: Library) -> None:
    fabric = fabric_for(library.system("ipu-pod16"), library, 1, "x")
    placement = place(fabric, 4)
    assert placement.data_parallel == 4
    machine, rack = placement.tiers
    assert (machine.group, machine.stride, machine.member_stages) == (1, 4, ((0,), (1,), (2,), (3,)))
    assert (rack.group, rack.stride, rack.member_stages) == (4, 1, ((0, 1, 2, 3),))
    with pytest.raises(UsageError, match="must divide"):
        place(fabric, 3)
    torus = place(fabric_for(library.system("tpu-v3-8"), library, 1, "x"), 2)
    assert torus.tiers[1].member_stages == ((0,), (1,))  # a chip per member: one representative per stage


def test_ring_closed_forms() -> None:
    assert ring_allreduce_lower_bound_s(8e6, 8, 1e9) == pytest.approx(2 * 7 / 8 * 8e6 / 1e9)
    assert ring_allreduce_closed_form_s(8e6, 8, 1e9, 1e-6) == pytest.approx(14 * (1e-6 + 1e6 / 1e9))
    assert ring_allreduce_lower_bound_s(8e6, 1, 1e9) == 0.0


def test_pipeline_split_covers_every_op_once_and_balances(library: Library) -> None:
    trace = build_trace("bert-base", library, Mode.TRAIN, 2, Precision.FP16, 128)
    seconds = [1.0 if op.kind.is_matrix else 0.1 for op in trace.ops]
    stages = split_stages(trace, 4, seconds)
    compute = sorted(i for s in stages for i in (*s.forward, *s.backward))
    assert compute == [i for i, op in enumerate(trace.ops) if op.phase is not Phase.UPDATE]
    loads = [sum(seconds[i] for i in (*s.forward, *s.backward)) for s in stages]
    assert max(loads) < 1.35 * sum(loads) / 4
    # the tied word embedding (input embedding and MLM decoder) is held by the first and last stage
    shared = sum(
        t.bytes for op in trace.ops for t in op.writes if t.name == "embeddings.word_embeddings.weight.grad"
    ) / sum({t.name: t.bytes for op in trace.ops for t in op.writes if t.role.value == "gradient"}.values())
    assert sum(s.parameter_fraction for s in stages) == pytest.approx(1.0 + shared, rel=0.01)
    assert stages[-1].send_bytes == 0
    assert all(s.send_bytes > 0 for s in stages[:-1])
    assert all(stage_memory_bytes(trace, s, 2) > 0 for s in stages)
    sub = sub_trace(trace, stages[1].forward, "s1")
    sub.check()


def test_untied_model_splits_its_parameters_exactly(library: Library) -> None:
    trace = build_trace("resnet50", library, Mode.TRAIN, 2, Precision.FP16, None)
    stages = split_stages(trace, 3, [1.0] * len(trace.ops))
    assert sum(s.parameter_fraction for s in stages) == pytest.approx(1.0)
    update = next(op for op in trace.ops if op.phase is Phase.UPDATE)
    assert sum(s.update.flops for s in stages if s.update is not None) == pytest.approx(update.flops, abs=3)
