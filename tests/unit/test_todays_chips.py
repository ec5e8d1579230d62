"""Today's chips and systems (issue 18): each runs ResNet-50 and BERT-Large, training and inference,
through the CLI with the JSON contract and physical bounds holding (the Gaudi and Ascend 910B parts
also gpt2 and Llama-2 7B); fp8 where the chip has it and a one-line refusal where it does not; bad
descriptions of the new fields refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from archsim.cli import main
from archsim.spec.common import Precision
from archsim.spec.library import Library
from tests.cli import chip_file

CHIPS = [
    "p100",
    "p100-pcie",
    "v100-pcie",
    "h100-pcie",
    "h200",
    "b200",
    "mi250x",
    "mi300x",
    "tpu-v5e",
    "tpu-v5p",
    "bow",
    "gaudi2",
    "gaudi3",
    "ascend910b",
    "cerebras-wse2",
    "sambanova-sn10",
]
SYSTEMS = [
    "dgx-h200",
    "dgx-b200",
    "gb200-nvl72",
    "mi300x-8",
    "tpu-v5e-256",
    "tpu-v5p-pod",
    "bow-pod16",
    "bow-pod64",
    "gaudi2-8",
    "gaudi3-8",
    "atlas-800t-a2",
]
# the parts added after the decoder language models landed also run one (gpt2) in both modes
DECODER_TARGETS = [
    "gaudi2",
    "gaudi3",
    "ascend910b",
    "gaudi2-8",
    "gaudi3-8",
    "atlas-800t-a2",
    "cerebras-wse2",
    "sambanova-sn10",
]
FP8_CHIPS = ["h100", "h100-pcie", "h200", "b200", "mi300x"]
IPU_TRAIN_OPTIONS = {
    # BERT-Large training does not fit one IPU's In-Processor Memory: on one chip everything that does
    # not fit is streamed; on a pod it is pipelined over 4 IPUs with the optimizer state offloaded,
    # as Graphcore runs it
    "bow": ["--streaming-memory", "all"],
    "bow-pod16": ["--pipeline-stages", "4", "--streaming-memory", "optimizer-state"],
    "bow-pod64": ["--pipeline-stages", "4", "--streaming-memory", "optimizer-state"],
}
LIBRARY = Library(use_env=False)


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    result: dict[str, object] = json.loads(out)
    return result


def check_bounds(result: dict[str, object], chip_path: str | None = None) -> None:
    """Utilization and scaling within (0, 1], throughput under the peak, memory within capacity."""
    system = result["system"]
    chip = LIBRARY.chip(chip_path or (LIBRARY.system(str(system)).chip if system else str(result["target"])))
    peak = chip.peak[Precision(str(result["precision"]))]
    utilization = float(str(result["utilization"]))
    assert 0.0 < utilization <= 1.0
    if result["scaling_efficiency"] is not None:
        assert 0.0 < float(str(result["scaling_efficiency"])) <= 1.0
    flops_per_sample = float(str(result["flops"])) / float(str(result["global_batch"]))
    assert 0.0 < float(str(result["throughput"])) <= int(str(result["num_chips"])) * peak / flops_per_sample
    assert int(str(result["memory_bytes"])) <= int(str(result["memory_capacity_bytes"]))


def test_list_shows_every_new_chip_and_system(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in CHIPS + SYSTEMS:
        assert name in out.split(), name


@pytest.mark.parametrize("mode", ["train", "infer"])
@pytest.mark.parametrize("workload", ["resnet50", "bert-large"])
@pytest.mark.parametrize("target", CHIPS + SYSTEMS)
def test_runs_both_models_in_both_modes(
    capsys: pytest.CaptureFixture[str], target: str, workload: str, mode: str
) -> None:
    extra = IPU_TRAIN_OPTIONS.get(target, []) if (workload, mode) == ("bert-large", "train") else []
    result = run_json(capsys, "run", target, workload, "--mode", mode, *extra)
    assert result["target"] == target
    assert result["workload"] == workload
    assert result["mode"] == mode
    assert result["layers"]
    check_bounds(result)


@pytest.mark.parametrize("mode", ["train", "infer"])
@pytest.mark.parametrize("target", DECODER_TARGETS)
def test_runs_a_decoder_language_model_in_both_modes(
    capsys: pytest.CaptureFixture[str], target: str, mode: str
) -> None:
    result = run_json(capsys, "run", target, "gpt2", "--mode", mode)
    assert (result["target"], result["workload"], result["mode"]) == (target, "gpt2", mode)
    assert result["layers"]
    check_bounds(result)


LLAMA_RUNS = [
    # a 7B model's training state does not fit one chip: the servers train it over 4 pipeline stages
    *((chip, mode, []) for chip in ["gaudi2", "gaudi3", "ascend910b"] for mode in ["infer", "decode"]),
    *((system, "train", ["--pipeline-stages", "4"]) for system in ["gaudi2-8", "gaudi3-8", "atlas-800t-a2"]),
    *((system, "infer", []) for system in ["gaudi2-8", "gaudi3-8", "atlas-800t-a2"]),
]


@pytest.mark.parametrize(("target", "mode", "extra"), LLAMA_RUNS)
def test_runs_llama2_7b(capsys: pytest.CaptureFixture[str], target: str, mode: str, extra: list[str]) -> None:
    result = run_json(capsys, "run", target, "llama2-7b", "--mode", mode, *extra)
    assert (result["target"], result["workload"], result["mode"]) == (target, "llama2-7b", mode)
    assert result["layers"]
    check_bounds(result)


@pytest.mark.parametrize("chip", ["gaudi2", "gaudi3", "ascend910b"])
def test_uncalibrated_chips_carry_the_extrapolation_flag(capsys: pytest.CaptureFixture[str], chip: str) -> None:
    result = run_json(capsys, "run", chip, "resnet50")
    assert result["extrapolation"] == ["chip"]


@pytest.mark.parametrize("chip", ["cerebras-wse2", "sambanova-sn10"])
def test_dataflow_chips_have_no_calibration_row(capsys: pytest.CaptureFixture[str], chip: str) -> None:
    """No calibration row covers the dataflow family: the chip is an extrapolation and no error bar is claimed."""
    result = run_json(capsys, "run", chip, "resnet50")
    assert "chip" in result["extrapolation"]  # type: ignore[operator]
    assert result["uncertainty"] is None


@pytest.mark.parametrize("chip", FP8_CHIPS)
def test_fp8_runs_at_its_own_peak_and_beats_fp16_on_a_large_product(
    capsys: pytest.CaptureFixture[str], chip: str
) -> None:
    gemm = "gemm:8192x8192x8192"
    fp8 = run_json(capsys, "run", chip, gemm, "--precision", "fp8")
    fp16 = run_json(capsys, "run", chip, gemm, "--precision", "fp16")
    assert fp8["precision"] == "fp8"
    check_bounds(fp8)
    # twice the matrix rate and half the bytes: a compute-bound product finishes sooner, never more
    # than twice as fast
    ratio = float(str(fp16["step_time_s"])) / float(str(fp8["step_time_s"]))
    assert 1.0 < ratio <= 2.0


@pytest.mark.parametrize("chip", ["gaudi2", "gaudi3"])
def test_gaudi_fp8_runs_at_its_own_peak_and_beats_bf16(capsys: pytest.CaptureFixture[str], chip: str) -> None:
    """Gaudi has no fp16 matrix rate: its fp8 is compared with bf16. Not bounded by 2x as above: the
    per-array SRAMs hold twice as many fp8 elements, so a memory-bound bf16 product may re-read less."""
    gemm = "gemm:8192x8192x8192"
    fp8 = run_json(capsys, "run", chip, gemm, "--precision", "fp8")
    bf16 = run_json(capsys, "run", chip, gemm, "--precision", "bf16")
    check_bounds(fp8)
    check_bounds(bf16)
    assert float(str(fp8["step_time_s"])) < float(str(bf16["step_time_s"]))


@pytest.mark.parametrize("chip", ["p100", "mi250x", "tpu-v5e", "tpu-v5p", "bow", "a100-80gb"])
def test_chips_without_fp8_refuse_it_in_one_line(capsys: pytest.CaptureFixture[str], chip: str) -> None:
    code = main(["run", chip, "resnet50", "--precision", "fp8"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert err.startswith("archsim: error: ")
    assert "fp8 is not supported (supported: " in err


@pytest.mark.parametrize(
    ("base", "changes", "fragment"),
    [
        ("p100", {"tensorcore__mma_shape": "8x4x16"}, "describe the tensor cores together"),
        ("p100", {"tensorcore__tensor_cores_per_sm": 4}, "describe the tensor cores together"),
        ("h200", {"tensorcore__tensor_cores_per_sm": None}, "describe the tensor cores together"),
        ("p100", {"peak__fp8": "40 TFLOPS"}, "peak.fp8: no unit of this chip runs fp8"),
        ("h200", {"peak__fp8": "900 TFLOPS"}, "peak.fp8: published 900.0"),
        ("h200", {"peak__fp8": 1979}, "peak.fp8"),
        ("mi300x", {"tensorcore__tensor_fma_per_clock": {"fp8": "512"}}, "tensorcore.tensor_fma_per_clock"),
        ("b200", {"memory__main__technology": "hbm4"}, "memory.main.technology"),
        ("b200", {"memory__main__bandwidth": "10 TB/s"}, "exceeds 8 stacks"),
        ("tpu-v5p", {"systolic__mac_per_pe_per_clock": {"fp8": 2}}, "peak.bf16: no unit of this chip runs bf16"),
        ("bow", {"memory__onchip__capacity": "1 GiB"}, "disagrees with memory.onchip.capacity"),
        ("gaudi3", {"peak__fp8": "3670 TFLOPS"}, "peak.fp8: published 3670.0"),
        ("gaudi2", {"systolic__mac_per_pe_per_clock": {"bf16": 1}}, "peak.fp8: no unit of this chip runs fp8"),
        ("ascend910b", {"cube__l0c": 131072}, "cube.l0c"),
        ("cerebras-wse2", {"dataflow__processing_elements": -4}, "dataflow.processing_elements"),
        ("cerebras-wse2", {"dataflow__fabric_bandwidth": 27}, "dataflow.fabric_bandwidth"),
        ("cerebras-wse2", {"dataflow__pcus": 640}, "dataflow.pcus"),
        ("sambanova-sn10", {"dataflow__onchip_memory": "1 GiB"}, "disagrees with memory.onchip.capacity"),
        ("sambanova-sn10", {"dataflow__macs_per_pe_per_clock": {"bf16": 100}}, "peak.bf16: published"),
    ],
)
def test_bad_new_fields_are_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, base: str, changes: dict[str, object], fragment: str
) -> None:
    path = chip_file(tmp_path, base, **changes)
    code = main(["run", path, "resnet50"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1, err
    assert err.startswith(f"archsim: error: {path}"), err
    assert fragment in err, err


@pytest.mark.parametrize(
    ("base", "changes"),
    [
        ("tpu-v5p", {"systolic__mac_per_pe_per_clock": {"bf16": 1, "int8": 2, "fp8": 2}, "peak__fp8": "918 TFLOPS"}),
        ("bow", {"ipu__amp_mac_per_clock": {"fp16": 64, "fp32": 16, "fp8": 128}, "peak__fp8": "700 TFLOPS"}),
        (
            "ascend910",
            {"cube__cube_mac_per_clock": {"fp16": 4096, "int8": 8192, "fp8": 8192}, "peak__fp8": "512 TFLOPS"},
        ),
        (
            "p100",
            {"tensorcore__cuda_core_fma_per_clock": {"fp32": 64, "fp16": 128, "fp8": 256}, "peak__fp8": "42.4 TFLOPS"},
        ),
    ],
)
def test_every_family_rate_table_takes_fp8(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, base: str, changes: dict[str, object]
) -> None:
    """A hypothetical fp8 rate in any family's table runs (none of these chips has one in reality)."""
    path = chip_file(tmp_path, base, **changes)
    result = run_json(capsys, "run", path, "gemm:4096x4096x4096", "--precision", "fp8")
    assert result["precision"] == "fp8"
    check_bounds(result, path)


def test_unknown_precision_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "h100", "resnet50", "--precision", "fp6"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "invalid choice: 'fp6'" in err
    assert "'fp8'" in err
