"""The Python API on every chip of the library with both built-in networks, in both modes."""

from __future__ import annotations

import pytest

from archsim import Library, simulate
from archsim.api import preferred_capacity_bytes
from archsim.errors import CapacityError

CHIPS = [e.name for e in Library(use_env=False).entries("chip")]


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("workload", ["resnet50", "bert-large"])
@pytest.mark.parametrize("mode", ["train", "infer"])
def test_every_chip_runs_both_networks_in_both_modes(chip: str, workload: str, mode: str) -> None:
    refusal = None
    try:
        result = simulate(chip, workload, mode=mode, search_path=())
    except CapacityError as err:
        refusal = err.line()
    if refusal is not None:
        # an IPU refuses a step beyond its In-Processor Memory, as Poplar does; asked to stream, it runs
        assert "of In-Processor Memory" in refusal and "--streaming-memory all" in refusal
        result = simulate(chip, workload, mode=mode, search_path=(), streaming_memory="all")
    assert result.step_time_s > 0
    assert result.throughput == pytest.approx(result.batch / result.step_time_s)
    assert 0 < result.utilization <= 1
    assert result.layers and all(layer.end_s >= layer.start_s for layer in result.layers)
    assert result.step_time_s >= max(layer.end_s for layer in result.layers)
    # every op takes at least its roofline time
    assert all(layer.end_s - layer.start_s >= layer.roofline_s * (1 - 1e-12) for layer in result.layers)


def test_default_batch_halves_until_it_fits_ipu_sram(library: Library) -> None:
    result = simulate("ipu", "resnet50", mode="train", search_path=())
    chip = library.chip("ipu")
    assert result.batch < 256
    assert result.memory_bytes <= preferred_capacity_bytes(chip)
    assert result.streaming_memory_bytes == 0
    # the default batch recomputes as Poplar does (16 since software stacks; 8 without recomputation)
    assert result.batch == 16
    with pytest.raises(CapacityError, match=r"batch 32 needs .* In-Processor Memory; the largest batch that fits is"):
        simulate("ipu", "resnet50", mode="train", batch=result.batch * 2, search_path=())
    bigger = simulate("ipu", "resnet50", mode="train", batch=result.batch * 2, search_path=(), streaming_memory="all")
    assert bigger.memory_bytes + bigger.streaming_memory_bytes > preferred_capacity_bytes(chip)


def test_v100_resnet50_training_close_to_published() -> None:
    """Issue acceptance: within 25% of calibration.csv's 1,376 img/s (batch 192 there, 256 here)."""
    result = simulate("v100", "resnet50", mode="train", batch=256, search_path=())
    assert abs(result.throughput / 1376 - 1) <= 0.25


def test_training_is_slower_per_sample_than_inference() -> None:
    train = simulate("a100", "bert-base", mode="train", batch=8, search_path=())
    infer = simulate("a100", "bert-base", mode="infer", batch=8, search_path=())
    assert train.step_time_s > 2 * infer.step_time_s
    assert train.flops == pytest.approx(3 * infer.flops, rel=0.15)
