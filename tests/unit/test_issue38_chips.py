"""The chips and systems of issue 38 (TPU v6e, MI325X, MI355X, H800, A800, A100 PCIe, first-generation
Gaudi, Trainium2; their servers and pods; GB200 NVL72 racks over InfiniBand): each loads with its
published peaks, runs from the CLI with the JSON contract and the physical bounds holding, and its
links say what the sources say (capped NVLink below the uncapped part's)."""

from __future__ import annotations

from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsim import simulate
from archsim.cli import main
from archsim.spec.common import Precision
from archsim.spec.library import Library
from tests.unit.test_todays_chips import check_bounds, run_json

PUBLISHED_PEAKS: dict[str, dict[str, float]] = {
    "tpu-v6e": {"bf16": 918, "int8": 1836},
    "mi325x": {"fp16": 1307.4, "bf16": 1307.4, "tf32": 653.7, "fp32": 163.4, "fp8": 2614.9, "int8": 2614.9},
    "mi355x": {"fp16": 2516.6, "bf16": 2516.6, "fp32": 157.3, "fp8": 5033.2, "int8": 5033.2, "mxfp4": 10066.3},
    "h800": {"fp16": 989.4, "bf16": 989.4, "tf32": 494.7, "fp32": 67, "fp8": 1978.9, "int8": 1978.9},
    "a800": {"fp16": 312, "bf16": 312, "tf32": 156, "fp32": 19.5, "int8": 624, "int4": 1248},
    "a100-pcie": {"fp16": 312, "bf16": 312, "tf32": 156, "fp32": 19.5, "int8": 624, "int4": 1248},
    "gaudi": {"bf16": 60},
    "trainium2": {"bf16": 667, "fp16": 667, "tf32": 667, "fp8": 1299},
}
"""Dense peaks in TFLOPS (TOPS for integers) as the sources cited in each chip file give them."""
MEMORY: dict[str, tuple[float, float]] = {
    "tpu-v6e": (32e9, 1640e9),
    "mi325x": (256e9, 6e12),
    "mi355x": (288e9, 8e12),
    "h800": (80 * 2**30, 3.35e12),
    "a800": (80 * 2**30, 2039e9),
    "a100-pcie": (80 * 2**30, 1935e9),
    "gaudi": (32e9, 900e9),
    "trainium2": (96 * 2**30, 2.9e12),
}
"""Main memory (bytes, bytes/s) as published."""
FAMILIES = {
    "tpu-v6e": "systolic",
    "mi325x": "tensorcore",
    "mi355x": "tensorcore",
    "h800": "tensorcore",
    "a800": "tensorcore",
    "a100-pcie": "tensorcore",
    "gaudi": "systolic",
    "trainium2": "systolic",
}
SYSTEMS = {
    "tpu-v6e-256": ("tpu-v6e", 256),
    "mi325x-8": ("mi325x", 8),
    "mi355x-8": ("mi355x", 8),
    "hgx-h800": ("h800", 8),
    "hgx-a800": ("a800", 8),
    "r750xa-a100": ("a100-pcie", 4),
    "gaudi-8": ("gaudi", 8),
    "trn2-48xlarge": ("trainium2", 16),
}
LIBRARY = Library(use_env=False)


@pytest.mark.parametrize("name", sorted(PUBLISHED_PEAKS))
def test_chip_loads_with_its_published_peaks_and_memory(name: str) -> None:
    chip = LIBRARY.chip(name)
    assert chip.family == FAMILIES[name]
    assert {p.value: round(v / 1e12, 1) for p, v in chip.peak.items()} == PUBLISHED_PEAKS[name]
    for precision, published in chip.peak.items():
        # the rate the models run at is the units' and the clock's, within the loader's 10 % of the sources
        assert chip.peak_flops(precision) == pytest.approx(published, rel=0.10)
    assert (chip.memory.main.capacity, chip.memory.main.bandwidth) == MEMORY[name]
    assert all(figure in chip.sources for figure in chip.not_published())


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_system_loads_with_its_chip_and_size(name: str) -> None:
    system = LIBRARY.system(name)
    assert (system.chip, system.num_chips) == SYSTEMS[name]
    assert system.missing_sources() == []


def test_list_shows_every_new_chip_and_system(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "chips"]) == 0
    chips = capsys.readouterr().out.split()
    assert main(["list", "systems"]) == 0
    systems = capsys.readouterr().out.split()
    assert all(name in chips for name in PUBLISHED_PEAKS)
    assert all(name in systems for name in SYSTEMS)


@pytest.mark.parametrize("chip", sorted(PUBLISHED_PEAKS))
def test_resnet50_trains_on_every_new_chip(capsys: pytest.CaptureFixture[str], chip: str) -> None:
    result = run_json(capsys, "run", chip, "resnet50", "--mode", "train", "--batch", "32")
    assert (result["target"], result["mode"], result["batch"]) == (chip, "train", 32)
    assert "chip" in result["extrapolation"]  # type: ignore[operator]  # no calibration row covers them
    check_bounds(result)


@given(
    chip=st.sampled_from(sorted(PUBLISHED_PEAKS)),
    shape=st.tuples(*(st.sampled_from((64, 256, 1000, 4096)) for _ in range(3))),
)
@settings(max_examples=12, deadline=None)
def test_no_product_on_a_new_chip_passes_its_peak(chip: str, shape: tuple[int, int, int]) -> None:
    m, n, k = shape
    spec = LIBRARY.chip(chip)
    run = simulate(chip, f"gemm:{m}x{n}x{k}", library=LIBRARY)
    peak = spec.peak_flops(spec.default_precision)
    assert 0.0 < run.utilization <= 1.0
    assert run.flops / run.step_time_s <= peak * (1 + 1e-9)
    assert run.memory_bytes <= spec.memory.main.capacity


@pytest.mark.parametrize(
    ("target", "extra"),
    [
        ("tpu-v6e-256:4x4", []),
        ("mi325x-8", []),
        ("mi355x-8", []),
        ("hgx-h800", ["--nodes", "2"]),
        ("hgx-a800", ["--nodes", "2"]),
        ("r750xa-a100", ["--nodes", "2"]),
        ("gaudi-8", ["--nodes", "2"]),
        ("trn2-48xlarge", ["--nodes", "2"]),
    ],
)
def test_every_new_system_trains_bert(capsys: pytest.CaptureFixture[str], target: str, extra: list[str]) -> None:
    result = run_json(capsys, "run", target, "bert-large", "--mode", "train", "--batch", "4", *extra)
    assert result["collectives"], target
    check_bounds(result, SYSTEMS[target.split(":")[0]][0])  # a slice's name is no library entry


def test_gb200_racks_scale_out_over_infiniband(capsys: pytest.CaptureFixture[str]) -> None:
    """Eight NVL72 racks: the gradients' all-reduce crosses the 72 NDR ports of each rack."""
    one = run_json(capsys, "run", "gb200-nvl72", "bert-large", "--mode", "train", "--batch", "32")
    eight = run_json(capsys, "run", "gb200-nvl72", "bert-large", "--mode", "train", "--nodes", "8", "--batch", "32")
    assert (eight["nodes"], eight["num_chips"], eight["global_batch"]) == (8, 576, 576 * 32)
    check_bounds(eight)

    def links(result: dict[str, object]) -> set[str]:
        return {str(link["link"]) for link in cast(list[dict[str, object]], result["links"])}

    assert "ib-ndr" in links(eight) and "ib-ndr" not in links(one)
    assert float(str(eight["comm_s"])) > float(str(one["comm_s"]))


def test_a_server_without_scale_out_still_refuses_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "mi355x-8", "resnet50", "--nodes", "2"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "declares no scale-out fabric" in err


@pytest.mark.parametrize(("capped", "full"), [("hgx-h800", "dgx-h100"), ("hgx-a800", "dgx-a100")])
def test_capped_nvlink_carries_less_than_the_uncapped_part(capped: str, full: str) -> None:
    """400 GB/s both ways per GPU against 900 (H100) and 600 (A100): the same all-reduce takes longer."""
    per_gpu = {}
    for name in (capped, full):
        system = LIBRARY.system(name)
        level = next(iter(system.levels.values()))
        assert level.links is not None
        per_gpu[name] = 2 * level.links * LIBRARY.link(level.link).bandwidth
    assert per_gpu[capped] == pytest.approx(400e9)
    assert per_gpu[full] > per_gpu[capped]
    runs = {name: simulate(name, "bert-large", mode="train", batch=4, library=LIBRARY) for name in (capped, full)}
    assert runs[capped].comm_s > runs[full].comm_s
    assert runs[capped].flops == runs[full].flops


def test_pcie_server_has_no_nvlink() -> None:
    system = LIBRARY.system("r750xa-a100")
    assert [level.link for level in system.levels.values()] == ["pcie4"]
    assert LIBRARY.chip("a100-pcie").tdp_w == 300.0


def test_trainium2_refuses_fp32_naming_what_it_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """Its fp32 rate (a quarter of bf16) is no whole number of MACs per PE per clock: left out, refused."""
    code = main(["run", "trainium2", "resnet50", "--precision", "fp32"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "fp32 is not supported (supported: tf32, fp16, bf16, fp8)" in err
    assert Precision.FP32 not in LIBRARY.chip("trainium2").peak
