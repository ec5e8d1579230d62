"""Each family's batch model (:mod:`archsim.models.batch`) gives the event path's table on a sample sweep.

One small sweep per family, run both ways (``--path batch`` and ``--path event``): training and
inference, a matrix product, and axes that move the fields the family's model reads, including a
value the family's model refuses (its rows carry the event path's error). The tables must be
identical, bit for bit. The systolic family's sample is in ``tests/unit/test_sweep_batch.py``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

import archsim.sweep.batch
from archsim.errors import UsageError
from archsim.spec.registry import family_definition, register_family
from archsim.sweep import run_sweep


@pytest.fixture
def priced(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Price groups of any size together, and count the rows the batch path priced itself."""
    monkeypatch.setattr("archsim.sweep.batch.MIN_GROUP", 1)
    counts: list[int] = []
    evaluate = archsim.sweep.batch.evaluate

    def counted(group: Any) -> Any:
        results = evaluate(group)
        counts.append(sum(r is not None for r in results))
        return results

    monkeypatch.setattr("archsim.sweep.batch.evaluate", counted)
    return counts


def both_paths(tmp_path: Path, data: dict[str, object]) -> tuple[pd.DataFrame, pd.DataFrame]:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"schema_version": 1, "kind": "sweep", "name": "family-sample", **data}))
    batch = run_sweep(str(path), jobs=1, progress=False, path="batch")
    event = run_sweep(str(path), jobs=1, progress=False, path="event")
    return batch, event


TENSORCORE = {
    "target": ["v100", "p100"],  # Volta (tensor cores), Pascal (CUDA cores only)
    "workloads": [
        {"name": "resnet50", "batch": 4},
        {"name": "resnet50", "mode": "train", "batch": 2},  # dgrad and split-K wgrad, batch statistics
        {"name": "gemm:1000x3000x700"},
    ],
    "settings": {"mode": "infer"},
    # 8 KiB of shared memory holds no tile: the model refuses the chip, on both paths in its words
    "grid": {"chip.tensorcore.shared_memory_per_sm": ["8 KiB", "64 KiB"]},
    "zip": [
        {
            "chip.tensorcore.sm_count": [20, 80],
            "chip.tensorcore.l2_cache": ["1 MiB", "40 MiB"],
            "chip.clock": ["0.9 GHz", "1.4 GHz"],
        }
    ],
}


def test_tensorcore_batch_equals_event(tmp_path: Path, priced: list[int]) -> None:
    batch, event = both_paths(tmp_path, TENSORCORE)
    assert len(batch) == 2 * 3 * 2 * 2
    assert batch["error"].str.contains("no thread-block tile fits").sum() == len(batch) // 2
    assert sum(priced) == len(batch) // 2  # every other row priced on the batch path
    pd.testing.assert_frame_equal(batch, event, check_exact=True)


CUBE = {
    "target": ["ascend910", "ascend910b"],
    "workloads": [
        {"name": "resnet50", "batch": 4},
        {"name": "resnet50", "mode": "train", "batch": 2},
        {"name": "gemm:1000x3000x700"},
    ],
    "settings": {"mode": "infer"},
    # a small L0C leaves only small tiles; 16 AI cores against 32 moves the busiest core's share
    "grid": {"chip.cube.l0c": ["16 KiB", "256 KiB"]},
    "zip": [{"chip.cube.ai_cores": [16, 32], "chip.cube.l1": ["256 KiB", "1 MiB"], "chip.clock": ["0.8 GHz", "1 GHz"]}],
}


def test_cube_batch_equals_event(tmp_path: Path, priced: list[int]) -> None:
    batch, event = both_paths(tmp_path, CUBE)
    assert len(batch) == 2 * 3 * 2 * 2
    assert batch["error"].isna().all()
    assert sum(priced) == len(batch)
    pd.testing.assert_frame_equal(batch, event, check_exact=True)


DATAFLOW = {
    "target": ["sambanova-sn10", "cerebras-wse2"],
    "workloads": [
        {"name": "resnet50", "batch": 4},
        {"name": "resnet50", "mode": "train", "batch": 2},
        {"name": "gemm:1000x3000x700"},
    ],
    "settings": {"mode": "infer"},
    "grid": {"chip.dataflow.fabric_bandwidth": ["1 TB/s", "150 TB/s"]},
    # 64 MB holds no footprint of ResNet-50 here: its weights stream from main memory
    "zip": [
        {
            "chip.dataflow.onchip_memory": ["64 MB", "40 GB"],
            "chip.memory.onchip.capacity": ["64 MB", "40 GB"],
            "chip.dataflow.processing_elements": [320, 640],
            "chip.memory.main.bandwidth": ["100 GB/s", "150 GB/s"],
        }
    ],
}


def test_dataflow_batch_equals_event(tmp_path: Path, priced: list[int]) -> None:
    batch, event = both_paths(tmp_path, DATAFLOW)
    assert len(batch) == 2 * 3 * 2 * 2
    assert batch["error"].isna().all()
    assert sum(priced) == len(batch)
    pd.testing.assert_frame_equal(batch, event, check_exact=True)


IPU = {
    "target": ["gc200", "gc2"],
    "workloads": [
        {"name": "resnet50", "batch": 4},
        {"name": "resnet50", "mode": "train", "batch": 2},  # the optimizer update's state, streamed or not
        {"name": "gemm:1000x3000x700"},
    ],
    # what does not fit the In-Processor Memory lives in streaming memory
    "settings": {"mode": "infer", "streaming_memory": "all"},
    "grid": {"chip.ipu.exchange_bandwidth": ["2 TB/s", "8 TB/s"]},
    # a quarter of the SRAM: the training footprint overflows, partitions spill to streaming memory
    "zip": [
        {
            "chip.ipu.tile_sram": ["156 KiB", "624 KiB"],
            "chip.ipu.tiles": [1472, 1472],
            "chip.memory.onchip.capacity": ["224.25 MiB", "897 MiB"],
            "chip.clock": ["1 GHz", "1.33 GHz"],
        }
    ],
}


def test_ipu_batch_equals_event(tmp_path: Path, priced: list[int]) -> None:
    batch, event = both_paths(tmp_path, IPU)
    assert len(batch) == 2 * 3 * 2 * 2
    pd.testing.assert_frame_equal(batch, event, check_exact=True)
    assert batch["error"].isna().all()
    assert sum(priced) == len(batch)
    assert (batch["memory_bound_s"] > 0).any()  # streaming memory set some op's time


def test_a_family_without_a_batch_model_takes_the_event_path(tmp_path: Path) -> None:
    """A family registered without ``batch`` (a plug-in's, say) is refused by ``--path batch``, in one line."""
    definition = family_definition("tensorcore")
    register_family(dataclasses.replace(definition, batch=None))
    try:
        data = {**TENSORCORE, "target": "v100", "workloads": [{"name": "gemm:512x512x512"}], "zip": []}
        path = tmp_path / "sweep.yaml"
        path.write_text(yaml.safe_dump({"schema_version": 1, "kind": "sweep", "name": "plain", **data}))
        with pytest.raises(UsageError, match="tensorcore chip"):
            run_sweep(str(path), jobs=1, progress=False, path="batch")
        auto = run_sweep(str(path), jobs=1, progress=False)
        event = run_sweep(str(path), jobs=1, progress=False, path="event")
        pd.testing.assert_frame_equal(auto, event, check_exact=True)
    finally:
        register_family(definition)
