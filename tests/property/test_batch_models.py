"""Every family's batch model (:mod:`archsim.models.batch`) against the one-chip model it mirrors.

Random variants of a family's chips (:func:`archsim.testing.strategies.chips`), random efficiency
values and footprints, random ops of every kind: each entry of the batch model's record is the
one-chip model's :class:`~archsim.models.base.OpCost` field, bit for bit, and so is the bound the
batch path derives from it. An entry the batch model leaves NaN is a chip the one-chip model refuses.
"""

from __future__ import annotations

import dataclasses
import importlib
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from archsim.errors import ArchsimError
from archsim.models.base import Bound
from archsim.spec.chip import ChipSpec
from archsim.spec.registry import family_definition
from archsim.sweep.batch_eval import _bound
from archsim.testing.strategies import chips, ops
from archsim.workloads.trace import Op

FIELDS = ("time_s", "compute_s", "memory_s", "overhead_s", "roofline_s", "communication_s", "fill_s")


@st.composite
def efficiencies(draw: st.DrawFn, family: str) -> object:
    """A complete efficiency record of ``family`` with random values (overheads of microseconds)."""
    record = family_definition(family).efficiency
    values = {
        f.name: draw(st.floats(0.0, 5e-6) if "overhead" in f.name else st.floats(0.05, 1.0))
        for f in dataclasses.fields(record)
    }
    return record(**values)


@pytest.mark.parametrize("family", ["tensorcore", "cube", "ipu", "dataflow", "systolic"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_batch_model_equals_one_chip_model(family: str, data: st.DataObject) -> None:
    definition = family_definition(family)
    assert definition.batch is not None
    module = importlib.import_module(definition.batch)
    first: ChipSpec = data.draw(chips(family))
    variants = [first, *data.draw(st.lists(chips(family), max_size=3))]
    precision = first.default_precision
    variants = [c for c in variants if precision in c.peak and module.group_key(c) == module.group_key(first)]
    efficiency = data.draw(efficiencies(family))
    footprint = data.draw(st.integers(0, 2**36))
    op: Op = data.draw(ops(precision))
    assume(op.gemm is None or op.gemm.batch * op.gemm.m * op.gemm.n < 2**40)
    cost = module.build_batch(variants, efficiency, precision, footprint).cost(op)
    event(f"{'matrix' if op.gemm is not None else 'vector'} op, {'not ' if cost is None else ''}priced")
    if cost is None:
        return  # integers past 2**53: the batch path prices these one at a time
    bounds = _bound(cost.compute_s, cost.memory_s, cost.overhead_s, cost.communication_s, cost.fill_s)
    for i, chip in enumerate(variants):
        try:
            expected = definition.model(chip, efficiency, precision, footprint).cost(op)
        except ArchsimError:
            assert math.isnan(cost.time_s[i])  # the event path refuses it, in its own words
            event("a variant refused")
            continue
        assert tuple(float(getattr(cost, name)[i]) for name in FIELDS) == tuple(getattr(expected, n) for n in FIELDS)
        assert int(cost.dram_bytes[i]) == expected.dram_bytes
        assert int(np.broadcast_to(cost.onchip_bytes, cost.time_s.shape)[i]) == expected.onchip_bytes
        assert cost.unit is expected.unit
        assert list(Bound)[bounds[i]] is expected.bound
