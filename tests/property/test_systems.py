"""Properties of multi-chip runs: one chip is a chip, more bandwidth never hurts, rings obey their bound."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from archsim import simulate
from archsim.engine.collectives import Collective, simulate_collective
from archsim.engine.parallel import CommOptions, Schedule, data_parallel_step, pipeline_step, price_programs
from archsim.models import cost_model_for
from archsim.models.base import OpCost
from archsim.models.interconnect import Fabric, Tier, TierKind, ring_allreduce_lower_bound_s
from archsim.models.placement import place
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.spec.system import Algorithm
from archsim.stack import default_efficiency
from archsim.testing.strategies import fabrics
from archsim.workloads import build_trace
from archsim.workloads.trace import Mode, Op
from tests.pipelines import StageTimes, uniform_programs

CHIPS = ["v100", "a100", "h100", "tpu-v3", "gc200", "ascend910"]


@pytest.fixture(scope="module")
def one_chip_systems(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with one single-chip system per chip (a level of size 1)."""
    folder = tmp_path_factory.mktemp("one-chip")
    for chip in CHIPS:
        data = {
            "schema_version": 1,
            "kind": "system",
            "name": f"one-{chip}",
            "description": "one chip",
            "chip": chip,
            "levels": {"node": {"size": 1, "topology": "switch", "link": "pcie4", "links": 1}},
            "sources": {"chip": "test", "levels.node": "test"},
        }
        (folder / f"one-{chip}.yaml").write_text(yaml.safe_dump(data))
    return folder


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    chip=st.sampled_from(CHIPS),
    mode=st.sampled_from(["train", "infer"]),
    shape=st.tuples(*(st.integers(min_value=16, max_value=1024),) * 3),
)
def test_one_chip_in_a_system_is_the_single_chip_result(
    one_chip_systems: Path, chip: str, mode: str, shape: tuple[int, int, int]
) -> None:
    library = Library([one_chip_systems], use_env=False)
    workload = "gemm:{}x{}x{}".format(*shape)
    alone = simulate(chip, workload, mode=mode, library=library)
    system = simulate(f"one-{chip}", workload, mode=mode, library=library)
    assert system.num_chips == 1
    assert (system.step_time_s, system.throughput, system.flops) == (alone.step_time_s, alone.throughput, alone.flops)
    assert [layer.cycles for layer in system.layers] == [layer.cycles for layer in alone.layers]
    assert system.scaling_efficiency == pytest.approx(1.0)
    assert (system.comm_s, system.exposed_comm_s) == (0.0, 0.0)


def test_one_chip_system_trains_resnet_like_the_chip(one_chip_systems: Path) -> None:
    library = Library([one_chip_systems], use_env=False)
    alone = simulate("v100", "resnet50", mode="train", batch=4, library=library)
    system = simulate("one-v100", "resnet50", mode="train", batch=4, library=library)
    assert system.step_time_s == alone.step_time_s
    assert [layer.end_s for layer in system.layers] == [layer.end_s for layer in alone.layers]


def faster(fabric: Fabric) -> Fabric:
    tiers = tuple(dataclasses.replace(t, link_bytes_per_s=2 * t.link_bytes_per_s) for t in fabric.tiers)
    return dataclasses.replace(fabric, tiers=tiers)


@pytest.fixture(scope="module")
def small_step(library: Library) -> tuple[list[Op], list[OpCost], bool]:
    chip = library.chip("v100")
    trace = build_trace("resnet50", library, Mode.TRAIN, 1, Precision.FP16, None)
    efficiency = default_efficiency(library, chip)
    model = cost_model_for(chip, efficiency, trace.precision, trace.memory_bytes)
    return list(trace.ops), [model.cost(op) for op in trace.ops], model.separate_units


ALGORITHMS = [Algorithm.RING, Algorithm.TREE, Algorithm.HIERARCHICAL]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    fabric=fabrics(),
    algorithm=st.sampled_from(ALGORITHMS),
    bucket_mib=st.integers(min_value=1, max_value=64),
    overlap=st.booleans(),
)
def test_doubling_link_bandwidth_never_slows_a_data_parallel_step(
    small_step: tuple[list[Op], list[OpCost], bool],
    fabric: Fabric,
    algorithm: Algorithm,
    bucket_mib: int,
    overlap: bool,
) -> None:
    ops, costs, separate = small_step
    options = CommOptions(algorithm, bucket_mib * 2**20, overlap)
    slow = data_parallel_step(ops, costs, separate, place(fabric, 1), options).end_s
    fast = data_parallel_step(ops, costs, separate, place(faster(fabric), 1), options).end_s
    assert fast <= slow * (1 + 1e-12)


@settings(max_examples=30, deadline=None)
@given(
    fabric=fabrics(),
    schedule=st.sampled_from(list(Schedule)),
    microbatches=st.integers(min_value=1, max_value=6),
    send_mib=st.integers(min_value=0, max_value=64),
    data=st.data(),
)
def test_doubling_link_bandwidth_never_slows_a_pipelined_step(
    fabric: Fabric, schedule: Schedule, microbatches: int, send_mib: int, data: st.DataObject
) -> None:
    first = fabric.tiers[0].size
    stages = data.draw(st.sampled_from([d for d in range(1, first + 1) if first % d == 0]))
    times = [
        StageTimes(
            forward_s=data.draw(st.floats(min_value=1e-5, max_value=1e-2)),
            backward_s=data.draw(st.floats(min_value=1e-5, max_value=2e-2)),
            update_s=1e-4,
            send_bytes=send_mib * 2**20,
            gradient_bytes=data.draw(st.integers(min_value=1, max_value=2**28)),
        )
        for _ in range(stages)
    ]
    programs, models = uniform_programs(times, schedule, microbatches, bucket_bytes=2**30)
    options = CommOptions(Algorithm.HIERARCHICAL)
    priced = price_programs(programs, models)
    slow = pipeline_step(priced, place(fabric, stages), options).end_s
    fast = pipeline_step(priced, place(faster(fabric), stages), options).end_s
    assert fast <= slow * (1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(
    chips=st.integers(min_value=2, max_value=48),
    kind=st.sampled_from(list(TierKind)),
    lanes=st.integers(min_value=1, max_value=4),
    gbps=st.floats(min_value=1.0, max_value=500.0),
    latency=st.floats(min_value=0.0, max_value=1e-5),
    nbytes=st.floats(min_value=1.0, max_value=1e9),
    chunk=st.sampled_from([4096.0, 512 * 2**10, 8 * 2**20]),
)
def test_ring_all_reduce_is_never_faster_than_its_bandwidth_bound(
    chips: int, kind: TierKind, lanes: int, gbps: float, latency: float, nbytes: float, chunk: float
) -> None:
    tier = Tier("ring", 0, kind, chips, 1, "test-link", gbps * 1e9, latency, lanes)
    fabric = Fabric("random", "chip", 1, chips, (tier,), "ring")
    time = simulate_collective(fabric, Collective.ALL_REDUCE, nbytes, Algorithm.RING, chunk_bytes=chunk).time_s
    # every chip sends 2(p-1)/p x S through its own links: per link of the bandwidth, times the links it drives
    bound = ring_allreduce_lower_bound_s(nbytes, chips, tier.egress_bytes_per_s)
    assert time >= bound * (1 - 1e-12)
    if lanes == 1 and kind is TierKind.POOLED:  # the statement with one link: 2(p-1)/p x S / link bandwidth
        assert time >= 2 * (chips - 1) / chips * nbytes / tier.link_bytes_per_s * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(fabric=fabrics(), algorithm=st.sampled_from(ALGORITHMS), nbytes=st.floats(min_value=1e3, max_value=1e9))
def test_every_all_reduce_respects_the_bandwidth_bound(fabric: Fabric, algorithm: Algorithm, nbytes: float) -> None:
    assume(fabric.num_chips > 1)
    time = simulate_collective(fabric, Collective.ALL_REDUCE, nbytes, algorithm).time_s
    # a chip's data leaves through its share of every tier's links at best
    egress = sum(t.egress_bytes_per_s for t in fabric.tiers)
    assert time >= ring_allreduce_lower_bound_s(nbytes, fabric.num_chips, egress) * (1 - 1e-12)
