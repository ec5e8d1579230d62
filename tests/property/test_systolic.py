"""The systolic-array fast paths agree with their slow twins, and the layer model keeps its invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsim.kernels.fold_schedule import fold_schedule
from archsim.models.systolic_layer import StallModel, fold_arrays, simulate_layer
from archsim.models.systolic_map import ArrayConfig, ConvWindow, MatrixLayer, TrafficModel, fold_grid
from archsim.spec.chip import Dataflow
from tests.reference import (
    fold_schedule_reference,
    scalesim_cycles_reference,
    scalesim_ofmap_demand,
    scalesim_write_stalls,
    traffic_reference,
)

small = st.integers(min_value=1, max_value=12)
dataflows = st.sampled_from(list(Dataflow))
words = st.floats(min_value=0, max_value=5000, allow_nan=False, allow_infinity=False)


@st.composite
def schedules(draw: st.DrawFn) -> tuple[int, list[list[float]], list[float], tuple[float, float, float]]:
    folds = draw(st.integers(min_value=1, max_value=25))
    reads = [[draw(words) for _ in range(3)] for _ in range(folds)]
    writes = [draw(words) for _ in range(folds)]
    bandwidth = tuple(draw(st.floats(min_value=0.25, max_value=64)) for _ in range(3))
    return draw(st.integers(min_value=1, max_value=400)), reads, writes, bandwidth  # type: ignore[return-value]


@settings(max_examples=200, deadline=None)
@given(case=schedules())
def test_fold_schedule_kernel_matches_reference(
    case: tuple[int, list[list[float]], list[float], tuple[float, float, float]],
) -> None:
    fold_cycles, reads, writes, bandwidth = case
    got = fold_schedule(fold_cycles, np.array(reads), np.array(writes), bandwidth)
    expected = fold_schedule_reference(fold_cycles, reads, writes, bandwidth)
    assert got == max(len(reads) * fold_cycles, math.ceil(expected - 1e-9))


def test_fold_schedule_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="fold_cycles"):
        fold_schedule(0, np.ones((2, 3)), np.ones(2), (1.0, 1.0, 1.0))
    with pytest.raises(ValueError, match="reads must be"):
        fold_schedule(5, np.ones((2, 2)), np.ones(2), (1.0, 1.0, 1.0))
    with pytest.raises(ValueError, match="positive"):
        fold_schedule(5, np.ones((2, 3)), np.ones(2), (1.0, 0.0, 1.0))
    assert fold_schedule(5, np.zeros((0, 3)), np.zeros(0), (1.0, 1.0, 1.0)) == 0


@settings(max_examples=150, deadline=None)
@given(sr=small, sc=small, t=small, rows=small, cols=small, dataflow=dataflows)
def test_fold_cycles_equal_scalesim_demand_matrices(
    sr: int, sc: int, t: int, rows: int, cols: int, dataflow: Dataflow
) -> None:
    """``folds * fold_cycles - 1`` is the last row of SCALE-Sim's ofmap demand matrix."""
    if dataflow is Dataflow.OUTPUT_STATIONARY:
        layer = MatrixLayer.gemm(sr, sc, t)
    elif dataflow is Dataflow.WEIGHT_STATIONARY:
        layer = MatrixLayer.gemm(t, sc, sr)
    else:
        layer = MatrixLayer.gemm(sc, t, sr)
    grid = fold_grid(layer, rows, cols, dataflow)
    assert (grid.sr, grid.sc, grid.t) == (sr, sc, t)
    assert grid.compute_cycles - 1 == scalesim_cycles_reference(sr, sc, t, rows, cols, dataflow)


@settings(max_examples=100, deadline=None)
@given(
    sr=small,
    sc=small,
    t=st.integers(min_value=1, max_value=40),
    rows=small,
    cols=small,
    dataflow=dataflows,
    extra=st.integers(min_value=0, max_value=300),
)
def test_scalesim_calc_write_buffer_never_stalls(
    sr: int, sc: int, t: int, rows: int, cols: int, dataflow: Dataflow, extra: int
) -> None:
    """In CALC mode SCALE-Sim drains ``cols`` words per cycle and no demand row writes more."""
    demand = scalesim_ofmap_demand(sr, sc, t, rows, cols, dataflow)
    assert max(sum(1 for x in row if x != -1) for row in demand) <= cols
    assert scalesim_write_stalls(demand, 2 * cols + extra, cols) == 0


def test_scalesim_write_buffer_stalls_when_drain_is_short() -> None:
    """The twin does stall when the drain is narrower than the array (USER-mode ofmap bandwidth)."""
    demand = scalesim_ofmap_demand(64, 8, 200, 8, 8, Dataflow.WEIGHT_STATIONARY)
    assert scalesim_write_stalls(demand, 64, 2) > 0


@st.composite
def layers_and_arrays(draw: st.DrawFn) -> tuple[MatrixLayer, ArrayConfig]:
    m, n, k = (draw(st.integers(min_value=1, max_value=300)) for _ in range(3))
    layer = MatrixLayer.gemm(m, n, k)
    if draw(st.booleans()):
        # a stride-1 convolution with an r x r filter whose output rows hold q pixels
        r = draw(st.sampled_from([1, 3]))
        q = draw(st.integers(min_value=1, max_value=20))
        p = math.ceil(m / q)
        channels = draw(st.integers(min_value=1, max_value=16))
        window = ConvWindow(1, p + r - 1, q + r - 1, channels, r, r, 1, p, q)
        unique = min((p + r - 1) * (q + r - 1) * channels, p * q * r * r * channels)
        layer = MatrixLayer(p * q, n, r * r * channels, unique, r * r * channels * n, p * q * n, window)
    sizes = [draw(st.integers(min_value=0, max_value=20000)) for _ in range(3)]
    array = ArrayConfig(
        draw(st.integers(min_value=1, max_value=16)),
        draw(st.integers(min_value=1, max_value=16)),
        draw(dataflows),
        *sizes,
    )
    return layer, array


@settings(max_examples=150, deadline=None)
@given(case=layers_and_arrays())
def test_traffic_over_fold_classes_equals_every_fold(case: tuple[MatrixLayer, ArrayConfig]) -> None:
    layer, array = case
    model = TrafficModel(layer, array)
    fast, slow = model.total(), traffic_reference(model)
    for name in ("ifmap_reads", "filter_reads", "ofmap_reads", "ofmap_writes"):
        assert getattr(fast, name) == pytest.approx(getattr(slow, name), rel=1e-9, abs=1e-6), name
    reads, writes = fold_arrays(model)
    assert reads.shape == (model.grid.folds, 3)
    assert reads[:, 0].sum() == pytest.approx(slow.ifmap_reads, rel=1e-9, abs=1e-6)
    assert writes.sum() == pytest.approx(slow.ofmap_writes, rel=1e-9, abs=1e-6)


@settings(max_examples=150, deadline=None)
@given(case=layers_and_arrays(), fed=st.integers(min_value=1, max_value=8))
def test_arrays_fed_together_read_the_per_pass_operand_once_per_group(
    case: tuple[MatrixLayer, ArrayConfig], fed: int
) -> None:
    layer, alone = case
    together = ArrayConfig(
        alone.rows,
        alone.cols,
        alone.dataflow,
        alone.ifmap_sram_words,
        alone.filter_sram_words,
        alone.ofmap_sram_words,
        fed,
    )
    model = TrafficModel(layer, together)
    one, shared = TrafficModel(layer, alone).total(), model.total()
    streamed = "filter_reads" if alone.dataflow is Dataflow.INPUT_STATIONARY else "ifmap_reads"
    resident = model.filter_resident if streamed == "filter_reads" else model.ifmap_resident
    passes = model.grid.col_folds
    share = 1.0 if resident else math.ceil(passes / fed) / passes
    for name in ("ifmap_reads", "filter_reads", "ofmap_reads", "ofmap_writes"):
        expected = getattr(one, name) * (share if name == streamed else 1.0)
        assert getattr(shared, name) == pytest.approx(expected, rel=1e-12), name
    if fed > 1:
        with pytest.raises(ValueError, match="one array"):
            simulate_layer("x", layer, together)


@settings(max_examples=150, deadline=None)
@given(case=layers_and_arrays(), which=st.integers(min_value=0, max_value=2))
def test_more_sram_never_moves_more_words(case: tuple[MatrixLayer, ArrayConfig], which: int) -> None:
    layer, array = case
    sizes = [array.ifmap_sram_words, array.filter_sram_words, array.ofmap_sram_words]
    sizes[which] = 2 * sizes[which] + 64
    bigger = ArrayConfig(array.rows, array.cols, array.dataflow, *sizes)
    small_total, big_total = TrafficModel(layer, array).total(), TrafficModel(layer, bigger).total()
    for name in ("ifmap_reads", "filter_reads", "ofmap_reads", "ofmap_writes"):
        assert getattr(big_total, name) <= getattr(small_total, name) * (1 + 1e-12) + 1e-9, name


@settings(max_examples=80, deadline=None)
@given(case=layers_and_arrays(), bandwidth=st.floats(min_value=0.5, max_value=40), which=st.integers(0, 3))
def test_layer_invariants_and_monotonicity(case: tuple[MatrixLayer, ArrayConfig], bandwidth: float, which: int) -> None:
    layer, array = case
    ports = (bandwidth, bandwidth, bandwidth)
    stats = simulate_layer("x", layer, array, ports, StallModel.ARCHSIM)
    pes = array.rows * array.cols
    assert stats.stall_cycles >= 0
    assert stats.cycles >= layer.macs / pes
    assert 0 < stats.overall_utilization <= 1
    assert 0 < stats.compute_utilization <= 1
    assert 0 < stats.mapping_efficiency <= 1
    # more SRAM or more bandwidth is never slower
    if which == 3:
        faster = simulate_layer("x", layer, array, (2 * bandwidth,) * 3, StallModel.ARCHSIM)
    else:
        sizes = [array.ifmap_sram_words, array.filter_sram_words, array.ofmap_sram_words]
        sizes[which] = 2 * sizes[which] + 64
        bigger = ArrayConfig(array.rows, array.cols, array.dataflow, *sizes)
        faster = simulate_layer("x", layer, bigger, ports, StallModel.ARCHSIM)
    assert faster.cycles <= stats.cycles
