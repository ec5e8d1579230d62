"""What a collective library adds to the wire: nccl-tests' factors, protocol choice, latencies, slices."""

from __future__ import annotations

import math

import pytest

from archsim.collective_run import call_time_s
from archsim.engine.collectives import simulate_collective
from archsim.models.collective_cost import (
    bus_factor,
    choose_algorithm,
    choose_protocol,
    estimate_s,
    library_fabric,
    plan_call,
)
from archsim.models.interconnect import Fabric
from archsim.run.target import fabric_for
from archsim.spec.collective_library import CollectiveLibrarySpec
from archsim.spec.library import Library
from archsim.spec.system import Algorithm

GIB = 2**30
MIB = 2**20


FAST = {
    "wire_efficiency": 0.5,
    "launch_latency": "1 us",
    "hop_latency": "2 us",
    "network_hop_latency": "5 us",
    "chunk": "64 KiB",
}


def make_library(**changes: object) -> CollectiveLibrarySpec:
    data: dict[str, object] = {
        "schema_version": 1,
        "kind": "collective-library",
        "name": "toy",
        "description": "toy",
        "launch_latency": "10 us",
        "wire_efficiency": 0.5,
        "protocols": {"fast": FAST},
        "sources": {"launch_latency": "x", "wire_efficiency": "x", "protocols": "x"},
    }
    data.update(changes)
    return CollectiveLibrarySpec.model_validate(data)


def fabric(library: Library, name: str, nodes: int = 1) -> Fabric:
    return fabric_for(library.system(name), library, nodes, name)


@pytest.mark.parametrize(
    ("op", "n", "factor"),
    [
        ("all-reduce", 8, 1.75),
        ("all-gather", 8, 0.875),
        ("reduce-scatter", 4, 0.75),
        ("all-to-all", 2, 0.5),
        ("broadcast", 8, 1.0),
        ("all-reduce", 1, 0.0),
    ],
)
def test_bus_factor_is_nccl_tests_definition(op: str, n: int, factor: float) -> None:
    assert bus_factor(op, n) == pytest.approx(factor)


def test_estimate_by_hand_on_dgx_a100(library: Library) -> None:
    lib = make_library()
    dgx = fabric(library, "dgx-a100")
    # 8 GPUs, 12 ports of 25 GB/s each: egress 300 GB/s; all-reduce: 14 ring steps
    expected = 10e-6 + 1e-6 + 14 * 2e-6 + 1.75 * GIB / (300e9 * 0.5 * 0.5)
    assert estimate_s(lib, lib.protocols["fast"], "all-reduce", GIB, dgx) == pytest.approx(expected)
    # two nodes: 14 steps inside, 2 across the scale-out fabric
    # two nodes: 8 HDR ports of 25 GB/s per node, 25 GB/s per GPU at 0.5 (the protocol's only: the
    # library's efficiency caps fast links inside a node) is slower than 300 GB/s x 0.25 inside
    two = fabric(library, "dgx-a100", nodes=2)
    assert two.tiers[1].egress_bytes_per_s / two.tiers[1].chips_per_member == pytest.approx(25e9)
    expected = 11e-6 + 14 * 2e-6 + 2 * 5e-6 + bus_factor("all-reduce", 16) * MIB / (25e9 * 0.5)
    assert estimate_s(lib, lib.protocols["fast"], "all-reduce", MIB, two) == pytest.approx(expected)


def test_nccl_picks_low_latency_protocol_small_and_simple_large(library: Library) -> None:
    nccl = library.collective_library("nccl")
    dgx = fabric(library, "dgx-a100")
    assert choose_protocol(nccl, "all-reduce", 64 * 2**10, dgx)[0] == "ll"
    assert choose_protocol(nccl, "all-reduce", GIB, dgx)[0] == "simple"


def test_protocol_size_limit_is_respected(library: Library) -> None:
    protocols = {"small": {**FAST, "max_bytes": "1 KiB", "wire_efficiency": 1.0}, "big": FAST}
    lib = make_library(protocols=protocols)
    dgx = fabric(library, "dgx-a100")
    assert choose_protocol(lib, "all-reduce", 1024, dgx)[0] == "small"
    assert choose_protocol(lib, "all-reduce", 1025, dgx)[0] == "big"


def test_library_fabric_scales_bandwidth_and_raises_latency(library: Library) -> None:
    lib = make_library()
    dgx = fabric(library, "dgx-a100", nodes=2)
    seen = library_fabric(dgx, lib, lib.protocols["fast"])
    for before, after in zip(dgx.tiers, seen.tiers, strict=True):
        efficiency = 0.5 if before.name == "scale-out" else 0.25  # the library's 0.5 only inside a node
        assert after.link_bytes_per_s == pytest.approx(before.link_bytes_per_s * efficiency)
        hop = 5e-6 if before.name == "scale-out" else 2e-6
        assert after.latency_s == pytest.approx(max(before.latency_s, hop))


def test_algorithm_rules_first_match_wins() -> None:
    rules = [
        {"algorithm": "tree", "min_nodes": 2, "max_bytes": "1 MiB"},
        {"algorithm": "ring", "min_nodes": 2},
        {"algorithm": "auto"},
    ]
    lib = make_library(algorithms=rules)
    assert choose_algorithm(lib, MIB, 4) is Algorithm.TREE
    assert choose_algorithm(lib, MIB + 1, 4) is Algorithm.RING
    assert choose_algorithm(lib, MIB, 1) is Algorithm.AUTO


def test_call_is_launch_plus_engine_on_the_protocols_fabric(library: Library) -> None:
    lib = make_library()
    dgx = fabric(library, "dgx-a100")
    time_s, plan, _ = call_time_s(dgx, lib, "all-reduce", GIB)
    assert plan is not None
    assert plan.fixed_s == pytest.approx(11e-6)
    alone = simulate_collective(plan.fabric, "all-reduce", GIB, plan.algorithm, chunk_bytes=plan.chunk_bytes)
    assert time_s == pytest.approx(plan.fixed_s + alone.time_s)
    # a large call is bandwidth bound: 1.75 S over a quarter of 300 GB/s, plus the latencies
    assert time_s == pytest.approx(1.75 * GIB / 75e9, rel=0.01)
    assert time_s > 1.75 * GIB / 75e9


def test_library_never_beats_the_bare_wire(library: Library) -> None:
    nccl = library.collective_library("nccl")
    dgx = fabric(library, "dgx-a100")
    for size in (MIB, 64 * MIB, GIB):
        bare = simulate_collective(dgx, "all-reduce", size).time_s
        assert call_time_s(dgx, nccl, "all-reduce", size)[0] > bare


def test_all_to_all_on_a_switch_and_on_a_ring(library: Library) -> None:
    bare = make_library(launch_latency="0 s", wire_efficiency=1.0)
    dgx = fabric(library, "dgx-a100")
    # through the switch: 7/8 of the buffer out of 300 GB/s
    switch_s = simulate_collective(dgx, "all-to-all", GIB).time_s
    assert switch_s == pytest.approx(0.875 * GIB / 300e9, rel=0.01)
    ring = fabric(library, "tpu-v4-pod:4x1x1")
    # ring of 4: pieces travel 1, 2, 1 hops: S/4 * 4 = S bytes over the two directions of 46.9 GB/s
    ring_s = simulate_collective(ring, "all-to-all", GIB).time_s
    assert ring_s == pytest.approx(GIB / (2 * 46.9e9), rel=0.01)
    assert call_time_s(ring, bare, "all-to-all", GIB)[0] >= ring_s


def test_slice_tiers_follow_the_shape(library: Library) -> None:
    cube = fabric(library, "tpu-v4-pod:4x4x4")
    assert [t.size for t in cube.tiers] == [4, 4, 4]
    assert not any(t.open_line for t in cube.tiers)
    small = fabric(library, "tpu-v4-pod:2x2x4")
    assert [(t.size, t.open_line, t.directions) for t in small.tiers] == [(2, True, 1), (2, True, 1), (4, False, 2)]
    line = fabric(library, "tpu-v4-pod:8x1x1")  # 8 wraps (a multiple of 4)
    assert line.tiers[0].directions == 2
    three = fabric(library, "tpu-v4-pod:3x1x1")  # 3 is an open line: one direction, two-link steps
    assert three.tiers[0].directions == 1
    assert three.tiers[0].latency_s == pytest.approx(2 * line.tiers[0].latency_s)


def test_torus_all_reduce_cost_follows_the_slice_shape(library: Library) -> None:
    def busbw(target: str) -> float:
        f = fabric(library, target)
        return bus_factor("all-reduce", f.num_chips) * GIB / simulate_collective(f, "all-reduce", GIB).time_s

    # a torus dimension's ring runs both ways: 2 x 46.9 GB/s; an open line one way
    assert busbw("tpu-v4-pod:4x1x1") == pytest.approx(2 * 46.9e9, rel=0.02)
    assert busbw("tpu-v4-pod:2x1x1") == pytest.approx(46.9e9, rel=0.02)
    assert busbw("tpu-v4-pod:4x4x4") == pytest.approx(busbw("tpu-v4-64"), rel=1e-9)
    assert busbw("tpu-v4-pod:2x2x4") < busbw("tpu-v4-pod:4x4x4")
    # 2x2x4 on its 2x2 open lines: 1 + 1 + 3 steps ... within the links' bound
    for target in ("tpu-v4-pod:2x2x4", "tpu-v4-pod:4x4x4", "tpu-v4-pod:4x4x8"):
        f = fabric(library, target)
        egress = sum(t.egress_bytes_per_s for t in f.tiers)
        assert busbw(target) <= egress


def test_plan_call_honours_an_explicit_algorithm(library: Library) -> None:
    nccl = library.collective_library("nccl")
    two = fabric(library, "dgx-a100", nodes=2)
    assert plan_call(nccl, "all-reduce", MIB, two, Algorithm.RING).algorithm is Algorithm.RING
    assert plan_call(nccl, "all-reduce", MIB, two, Algorithm.AUTO).algorithm is Algorithm.AUTO
    one = fabric(library, "dgx-a100")
    small = plan_call(nccl, "all-reduce", MIB, one)
    assert small.protocol == "ll"
    assert math.isclose(small.fixed_s, nccl.launch_latency + 3.6e-6)  # NCCL's Ring/LL baseLat


def test_in_network_reduction_only_where_the_switch_offers_it(library: Library) -> None:
    nccl = library.collective_library("nccl")
    h100 = fabric(library, "dgx-h100")
    assert all(t.link_reduces for t in h100.tiers)
    assert not any(t.link_reduces for t in fabric(library, "dgx-a100").tiers)
    assert choose_protocol(nccl, "all-reduce", GIB, h100)[0] == "nvls"
    assert choose_protocol(nccl, "all-gather", GIB, h100)[0] != "nvls"
    assert choose_protocol(nccl, "all-reduce", GIB, h100, Algorithm.RING)[0] != "nvls"
    assert choose_protocol(nccl, "all-reduce", GIB, fabric(library, "dgx-h100", nodes=2))[0] != "nvls"
    assert choose_protocol(nccl, "all-reduce", GIB, fabric(library, "dgx-a100"))[0] == "simple"


def test_in_network_all_reduce_sends_the_buffer_once(library: Library) -> None:
    switch = {**FAST, "in_network": True, "wire_efficiency": 0.8, "hop_latency": "20 us", "launch_latency": "0 s"}
    lib = make_library(protocols={"ring": FAST, "switch": switch})
    h100 = fabric(library, "dgx-h100")
    time_s, plan, _ = call_time_s(h100, lib, "all-reduce", GIB)
    assert plan is not None and plan.protocol == "switch"
    assert all(t.in_network_reduction for t in plan.fabric.tiers)
    # 18 ports of 25 GB/s x 0.5 (library) x 0.8 (protocol); one pass; 10 us launch, one 20 us step
    expected = 10e-6 + GIB / (18 * 25e9 * 0.5 * 0.8) + 20e-6
    assert time_s == pytest.approx(expected, rel=0.01)
    assert time_s >= expected * (1 - 1e-9)  # nothing faster than the closed form
    # the in-network estimate is the same closed form
    assert estimate_s(lib, lib.protocols["switch"], "all-reduce", GIB, h100) == pytest.approx(expected)


def test_torus_runs_every_dimension_at_once(library: Library) -> None:
    cube = fabric(library, "tpu-v4-pod:4x4x4")
    # three parts, each in its own dimension order: all six links of a chip busy, 6 x 46.9 GB/s
    busbw = bus_factor("all-reduce", 64) * GIB / simulate_collective(cube, "all-reduce", GIB, "torus").time_s
    assert busbw == pytest.approx(6 * 46.9e9, rel=0.02)
    assert busbw <= sum(t.egress_bytes_per_s for t in cube.tiers)
    # one dimension at a time (hierarchical on the same torus) uses two links at once
    one_at_a_time = simulate_collective(cube, "all-reduce", GIB, "hierarchical").time_s
    assert bus_factor("all-reduce", 64) * GIB / one_at_a_time == pytest.approx(2 * 46.9e9, rel=0.02)
