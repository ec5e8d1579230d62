"""Invariants of time to train: convergence interpolation stays between published points, the step
never beats the input pipeline, and the clock never beats the training samples at the step's rate."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from archsim.api import simulate
from archsim.input_pipeline import Decode, with_input
from archsim.spec.library import Library

LIBRARY = Library(use_env=False)
RESNET = LIBRARY.convergence("resnet50")
POINTS = RESNET.optimizers["lars"]


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=POINTS[0].global_batch, max_value=POINTS[-1].global_batch))
def test_interpolation_stays_between_the_neighbouring_points(batch: int) -> None:
    epochs, _ = RESNET.to_target("lars", batch)
    low = max((p for p in POINTS if p.global_batch <= batch), key=lambda p: p.global_batch)
    high = min((p for p in POINTS if p.global_batch >= batch), key=lambda p: p.global_batch)
    assert min(low.mean, high.mean) - 1e-9 <= epochs <= max(low.mean, high.mean) + 1e-9


@settings(max_examples=40, deadline=None)
@given(st.floats(min_value=1.0, max_value=1e7), st.floats(min_value=1.0, max_value=1e7))
def test_a_step_fed_by_a_pipeline_is_never_faster_than_either(ops_rate: float, input_rate: float) -> None:
    base = simulate("v100", "gemm:64x64x64", library=LIBRARY)
    chip = LIBRARY.chip("v100")
    # a real result moved to the drawn rate, then fed
    step = base.global_batch / ops_rate
    result = replace(base, step_time_s=step, throughput=ops_rate)
    fed = with_input(result, {"host-decode": input_rate}, Decode.HOST, chip)
    assert fed.throughput <= min(ops_rate, input_rate) * (1 + 1e-12)
    assert math.isclose(fed.throughput, min(ops_rate, input_rate), rel_tol=1e-9)
    assert fed.utilization <= result.utilization * (1 + 1e-12)
    assert (fed.input_pipeline is not None) and (
        fed.input_pipeline.step_bound == ("input" if input_rate < ops_rate else "ops")
    )
