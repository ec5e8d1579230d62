"""The systolic model over arrays of configurations (:mod:`archsim.models.systolic_batch`) against the
one-configuration model it mirrors: the same split, cycles, bytes and seconds, bit for bit."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from archsim.models.systolic import SystolicModel, SystolicSection
from archsim.models.systolic_batch import ArrayBatch, exact_integers, matrix_costs
from archsim.spec.chip import ChipSpec, Dataflow
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.spec.registry import FamilyEfficiency
from archsim.testing.strategies import conv_ops, gemm_ops
from archsim.workloads.trace import Op, Phase

BASE = Library(use_env=False).chip("systolic-32x32")
arrays = st.fixed_dictionaries(
    {
        "array_rows": st.integers(1, 300),
        "array_cols": st.integers(1, 300),
        "ifmap_sram": st.integers(0, 2**22),
        "filter_sram": st.integers(0, 2**22),
        "ofmap_sram": st.integers(0, 2**22),
        "cores": st.integers(1, 4),
        "arrays_per_core": st.integers(1, 4),
    }
)


def variant(fields: dict[str, int], dataflow: Dataflow, clock: float) -> ChipSpec:
    section = BASE.section_of(SystolicSection).model_copy(update={**fields, "dataflow": dataflow})
    return BASE.model_copy(update={"section": section, "clock": clock})


@settings(max_examples=60, deadline=None)
@given(
    op=st.one_of(gemm_ops(), conv_ops(phases=(Phase.FORWARD, Phase.BACKWARD_DATA, Phase.BACKWARD_WEIGHT))),
    configurations=st.lists(arrays, min_size=1, max_size=6),
    dataflow=st.sampled_from(list(Dataflow)),
    clock=st.floats(1e8, 3e9),
    compute=st.floats(0.3, 1.0),
    bandwidth=st.floats(1e10, 4e12),
)
def test_batch_equals_one_configuration(
    op: Op, configurations: list[dict[str, int]], dataflow: Dataflow, clock: float, compute: float, bandwidth: float
) -> None:
    chips = [variant(fields, dataflow, clock) for fields in configurations]
    e = Precision.FP16.nbytes(1)
    batch = ArrayBatch(
        dataflow=dataflow,
        rows=np.array([f["array_rows"] for f in configurations]),
        cols=np.array([f["array_cols"] for f in configurations]),
        ifmap_sram_words=np.array([f["ifmap_sram"] // e for f in configurations]),
        filter_sram_words=np.array([f["filter_sram"] // e for f in configurations]),
        ofmap_sram_words=np.array([f["ofmap_sram"] // e for f in configurations]),
        arrays=np.array([f["cores"] * f["arrays_per_core"] for f in configurations]),
        fed_together=np.array([f["arrays_per_core"] for f in configurations]),
        macs_per_pe=np.array([1] * len(configurations)),
        clock_hz=np.array([clock] * len(configurations)),
    )
    costs = matrix_costs(op, batch, e, compute, np.full(len(chips), bandwidth))
    if not exact_integers(costs):
        return  # the batch path prices these one at a time
    # only ``compute`` enters a split's times; the other values are placeholders the split never reads
    efficiency = FamilyEfficiency(compute, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0)
    for i, chip in enumerate(chips):
        choice = SystolicModel(chip, efficiency, Precision.FP16).best_split(op, bandwidth)
        got = (costs.compute_s[i], costs.fill_s[i], int(costs.dram_bytes[i]), costs.memory_s[i])
        assert got == (choice.compute_s, choice.fill_s, choice.dram_bytes, choice.memory_s)
