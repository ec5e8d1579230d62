"""Properties of collective library calls: a library only adds cost, and no call beats its links."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsim.collective_run import call_time_s
from archsim.engine.collectives import simulate_collective
from archsim.models.collective_cost import COLLECTIVES, bus_factor
from archsim.run.target import fabric_for
from archsim.spec.library import Library

SYSTEMS = ["dgx1", "dgx-a100", "dgx-h100", "ipu-pod16", "atlas-800", "tpu-v3-8", "tpu-v4-pod:4x4x4", "tpu-v4-pod:2x2x4"]


@pytest.fixture(scope="module")
def lib() -> Library:
    return Library(use_env=False)


@settings(max_examples=25, deadline=None)
@given(
    system=st.sampled_from(SYSTEMS),
    op=st.sampled_from(COLLECTIVES),
    nbytes=st.integers(min_value=1, max_value=2**32),
    nodes=st.sampled_from([1, 2]),
)
def test_library_adds_cost_and_respects_the_links(lib: Library, system: str, op: str, nbytes: int, nodes: int) -> None:
    spec = lib.system(system)
    if nodes > 1 and spec.scale_out is None:
        nodes = 1
    fabric = fabric_for(spec, lib, nodes, system)
    library = lib.system_collective_library(spec)
    assert library is not None
    time_s, plan, algorithm = call_time_s(fabric, library, op, nbytes)
    assert plan is not None
    assert time_s >= plan.fixed_s >= 0.0
    in_switch = any(t.in_network_reduction for t in plan.fabric.tiers)
    if not in_switch:  # the same algorithm on the bare links: efficiencies <= 1, latencies >= the links'
        assert time_s >= simulate_collective(fabric, op, nbytes, algorithm).time_s * (1 - 1e-9)
    # a chip sends bus_factor * nbytes (nbytes once, where the switch reduces) over at most its egress
    sent = nbytes if in_switch else bus_factor(op, fabric.num_chips) * nbytes
    total_egress = sum(t.egress_bytes_per_s / t.chips_per_member for t in fabric.tiers)
    assert sent / time_s <= total_egress * (1 + 1e-9)
