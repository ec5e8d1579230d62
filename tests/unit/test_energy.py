"""The energy model (archsim.models.energy) and the energy fields of a run (archsim.results.power)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from archsim import simulate
from archsim.cli import main
from archsim.models.dvfs import VoltageRule
from archsim.models.energy import (
    chip_energy,
    energy_scale,
    gate_pitch_nm,
    modelled_area_mm2,
    operand_bits_per_mac,
    supply_scale,
    transistor_area_mm2,
)
from archsim.models.systolic import SystolicSection
from archsim.models.tensorcore import TensorCoreSection
from archsim.results.power import CORE_PARTS
from archsim.results.records import RunResult
from archsim.spec.chip import Dataflow
from archsim.spec.common import Precision, replace_path
from archsim.spec.library import Library, builtin_roots
from archsim.sweep import run_sweep

ENERGY_FILE = next(r for r in builtin_roots() if r.name == "energy") / "cmos.yaml"


def test_every_builtin_memory_and_link_has_a_sourced_energy(library: Library) -> None:
    for entry in library.entries("chip"):
        memory = library.find(["memory"], library.chip(entry.name).memory.main.technology)
        assert library.spec(memory).energy_per_bit > 0, entry.name
        assert "energy_per_bit" in memory.data["sources"], memory.source
    for entry in library.entries("link"):
        assert library.link(entry.name).energy_per_bit > 0, entry.name
        assert "energy_per_bit" in entry.data["sources"], entry.source
    data = yaml.safe_load(ENERGY_FILE.read_text())
    paths = [
        key for key, value in data.items() if isinstance(value, str) and key not in ("name", "kind", "description")
    ]
    paths += [f"{key}.{sub}" for key, value in data.items() if isinstance(value, dict) for sub in value]
    for path in paths:
        if not path.startswith("sources."):
            assert path in data["sources"], f"{path} has no source"


def test_energies_scale_with_the_node_and_memory_energy_does_not(library: Library) -> None:
    tech = library.energy()
    hbm2 = library.memory("hbm2").energy_per_bit
    assert hbm2 is not None
    v100 = chip_energy(library.chip("v100"), tech, Precision.FP16, hbm2)
    h100 = chip_energy(library.chip("h100"), tech, Precision.FP16, hbm2)
    # by contacted gate pitch, not by the node's name: TSMC 12 nm has a 90 nm pitch, 4N (N5) 51 nm, 45 nm 160 nm
    # and GPUs at the supply of their boost clock (supply_scale), above the table's 0.9 V
    boost = supply_scale(tech)
    assert boost == pytest.approx((1.068 / 0.9) ** 2)
    assert v100.mac_j == pytest.approx(tech.mac[Precision.FP16] * 90 / 160 * boost)
    assert h100.mac_j == pytest.approx(tech.mac[Precision.FP16] * 51 / 160 * boost)
    tpu = chip_energy(library.chip("tpu-v4"), tech, Precision.BF16, hbm2)  # a fixed clock: the reference supply
    assert tpu.mac_j == pytest.approx(tech.mac[Precision.BF16] * energy_scale(library.chip("tpu-v4"), tech))
    assert v100.dram_bit_j == h100.dram_bit_j == hbm2
    # a published die area is used as published, and static power follows it
    assert (v100.area_mm2, v100.area_source) == (815.0, "published")
    assert v100.static_w == pytest.approx(815.0 * tech.static_power_density)


def test_register_traffic_per_mac_follows_the_matrix_units_shape(library: Library) -> None:
    # 4x4x4: (16 + 16) fp16 operands + 16 fp32 accumulators read and written, over 64 MACs
    assert operand_bits_per_mac(library.chip("v100"), Precision.FP16) == (32 * 16 + 2 * 16 * 32) / 64 == 24
    assert operand_bits_per_mac(library.chip("a100-40gb"), Precision.FP16) == 14  # 8x4x8
    assert operand_bits_per_mac(library.chip("ascend910"), Precision.FP16) == 6  # 16x16x16
    systolic = library.chip("systolic-32x32")
    assert operand_bits_per_mac(systolic, Precision.FP16) == 32  # os: two fp16 operands latched per MAC
    ws = replace_path(systolic, "systolic.dataflow", Dataflow.WEIGHT_STATIONARY)
    assert operand_bits_per_mac(ws, Precision.FP16) == 48


def test_modelled_area_grows_with_the_array_and_the_sram(library: Library) -> None:
    tech = library.energy()
    chip = library.chip("systolic-32x32")
    assert chip_energy(chip, tech, Precision.FP16, 0.0).area_source == "modelled"
    areas = []
    for side in (32, 64, 128, 256):
        square = replace_path(replace_path(chip, "systolic.array_rows", side), "systolic.array_cols", side)
        areas.append(modelled_area_mm2(square, tech))
    assert areas == sorted(areas) and len(set(areas)) == 4
    sram = chip.section_of(SystolicSection).ifmap_sram
    assert modelled_area_mm2(replace_path(chip, "systolic.ifmap_sram", 2 * sram), tech) > areas[0]


def test_a_run_reports_energy_power_and_area_that_add_up(library: Library) -> None:
    # a product small enough to stay within the V100's 300 W (the 4096 cube throttles at a GPU's boost supply)
    run = simulate("v100", "gemm:1024x1024x1024", library=library)
    assert run.energy_j == pytest.approx(sum(run.energy_breakdown_j.values()))
    assert run.power_w == pytest.approx(run.energy_j / run.step_time_s)
    assert run.static_power_w < run.power_w <= run.peak_power_w
    dynamic = sum(layer.energy_j for layer in run.layers)
    parts = ("compute", "register", "sram", "l2", "dram", "activation", "instruction")
    assert dynamic == pytest.approx(sum(run.energy_breakdown_j[p] for p in parts))
    assert set(run.energy_breakdown_j) == {*parts, "link", "static"}
    assert run.normalized.per_watt == pytest.approx(run.throughput / run.power_w)
    assert run.normalized.per_watt_tdp == pytest.approx(run.throughput / 300.0)
    assert run.normalized.per_mm2 == pytest.approx(run.throughput / 815.0)
    assert (run.area_source, run.clock_scale) == ("published", 1.0)


def test_a_chip_over_its_tdp_throttles_its_clock(library: Library) -> None:
    nominal = simulate("v100", "gemm:1024x1024x1024", library=library)  # within 300 W: not throttled
    assert nominal.clock_scale == 1.0
    entry = library.find(["chip"], "v100")
    capped = library.with_specs({entry: library.chip("v100").model_copy(update={"tdp": 50.0})})
    run = simulate("v100", "gemm:1024x1024x1024", library=capped)
    assert run.clock_scale < 1.0
    assert run.power_w == pytest.approx(50.0)
    assert run.step_time_s == pytest.approx(nominal.step_time_s / run.clock_scale)
    for bound, seconds in nominal.time_by_bound.items():  # the time by bound follows the clock too
        assert run.time_by_bound[bound] == pytest.approx(seconds / run.clock_scale), bound
    assert run.throughput < nominal.throughput
    # the voltage falls with the clock (models/dvfs.py): every action on the chip's supply spends (V/V0)^2
    # of its energy; at 50 W the V100 is on the curve's floor. Main memory keeps its energy per bit.
    rule = VoltageRule.of(library.energy().dvfs)
    assert rule.voltage_scale(run.clock_scale) == rule.floor
    assert run.energy_breakdown_j["compute"] == pytest.approx(nominal.energy_breakdown_j["compute"] * rule.floor**2)
    assert run.energy_breakdown_j["dram"] == pytest.approx(nominal.energy_breakdown_j["dram"])


def test_multichip_energy_counts_every_chip_and_the_links(multichip_run: RunResult) -> None:
    run = multichip_run
    assert run.energy_breakdown_j["link"] > 0
    assert run.power_w == pytest.approx(run.energy_j / run.num_chips / run.step_time_s)
    assert run.energy_per_sample_j == pytest.approx(run.energy_j / run.global_batch)


@pytest.mark.parametrize(("kind", "name", "target"), [("memory", "hbm2", "v100"), ("interconnect", "nvlink2", "dgx1")])
def test_a_memory_or_link_without_an_energy_is_one_line_error(
    kind: str, name: str, target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    builtin = next(r for r in builtin_roots() if r.name == kind) / f"{name}.yaml"
    data = yaml.safe_load(builtin.read_text())
    del data["energy_per_bit"]
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(data))
    code = main(["run", "--lib", str(tmp_path), target, "resnet50", "--mode", "train", "--batch", "8", "--json"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.startswith("archsim: error: ") and f"{name}.yaml: energy_per_bit: needed" in captured.err
    assert captured.err.count("\n") == 1


@pytest.mark.parametrize("value", ["3.9", "3.9 GB/s", "-1 pJ/bit"])
def test_a_bad_energy_per_bit_is_one_line_error(value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    builtin = next(r for r in builtin_roots() if r.name == "memory") / "hbm2.yaml"
    data = yaml.safe_load(builtin.read_text())
    data["energy_per_bit"] = value
    (tmp_path / "hbm2.yaml").write_text(yaml.safe_dump(data))
    code = main(["run", "--lib", str(tmp_path), "v100", "gemm:64x64x64", "--json"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.startswith("archsim: error: ") and "hbm2.yaml: energy_per_bit: " in captured.err
    assert captured.err.count("\n") == 1


def test_cli_json_has_the_energy_fields(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "systolic-32x32", "gemm:256x256x256", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["area_source"] == "modelled" and result["area_mm2"] > 0
    assert result["normalized"]["per_watt_tdp"] is None and result["normalized"]["per_watt"] > 0
    assert sum(layer["energy_j"] for layer in result["layers"]) > 0


def test_systolic_sweep_area_static_power_and_per_watt_follow_the_array(tmp_path: Path) -> None:
    sweep = {
        "schema_version": 1,
        "kind": "sweep",
        "name": "energy-array-sweep",
        "target": "systolic-32x32",
        "workloads": ["gemm:1024x1024x1024"],
        "zip": [{"chip.systolic.array_rows": [32, 64, 128, 256], "chip.systolic.array_cols": [32, 64, 128, 256]}],
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    table = run_sweep(path, jobs=1, progress=False)
    assert table["error"].isna().all()
    for column in ("area_mm2", "static_power_w"):
        assert table[column].is_monotonic_increasing and table[column].is_unique, column
    assert (table["area_source"] == "modelled").all()
    assert table["throughput_per_watt"].notna().all() and table["throughput_per_watt"].is_unique
    assert table["energy_j"].notna().all() and table["power_w"].is_monotonic_increasing


def test_a_process_axis_moves_energy_and_modelled_area_with_the_node(tmp_path: Path) -> None:
    sweep = {
        "schema_version": 1,
        "kind": "sweep",
        "name": "energy-node-sweep",
        "target": "systolic-32x32",
        "workloads": ["gemm:512x512x512"],
        "grid": {"chip.process": ["45 nm", "16 nm", "7 nm"]},
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    table = run_sweep(path, jobs=1, progress=False)
    assert table["chip.process"].tolist() == [45.0, 16.0, 7.0]
    for column in ("area_mm2", "energy_j", "static_power_w"):
        assert table[column].is_monotonic_decreasing and table[column].is_unique, column
    assert table["throughput"].nunique() == 1  # the node changes energy and area, not the clock


def test_a_sweep_that_grows_a_published_chip_grows_its_published_area(tmp_path: Path) -> None:
    sweep = {
        "schema_version": 1,
        "kind": "sweep",
        "name": "energy-sm-sweep",
        "target": "v100",
        "workloads": ["gemm:512x512x512"],
        "grid": {"chip.tensorcore.sm_count": [40, 80, 160]},
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    table = run_sweep(path, jobs=1, progress=False)
    assert table["area_source"].tolist() == ["published, resized", "published", "published, resized"]
    assert table["area_mm2"][1] == 815.0
    assert table["area_mm2"].is_monotonic_increasing and table["area_mm2"].is_unique
    assert table["static_power_w"].is_monotonic_increasing


def test_energy_per_token_divides_a_sequence_by_its_length(library: Library) -> None:
    run = simulate("v100", "bert-base", batch=2, seq_len=64, library=library)
    assert run.energy_per_token_j == pytest.approx(run.energy_per_sample_j / 64)
    assert simulate("v100", "gemm:64x64x64", library=library).energy_per_token_j is None


def test_every_gpu_on_a_dense_gemm_stays_within_its_tdp(library: Library) -> None:
    # the physical bound: a GPU's modelled average power never passes its TDP, throttled or not
    gpus = [e.name for e in library.entries("chip") if e.data["family"] == "tensorcore"]
    assert len(gpus) >= 10
    for name in gpus:
        tdp = library.chip(name).tdp_w
        run = simulate(name, "gemm:8192x8192x8192", library=library)
        if tdp is None:  # a TDP its maker does not publish (h800): no limit to throttle to
            assert library.chip(name).tdp == "not published", name
            assert run.clock_scale == 1.0 and run.power_w <= run.peak_power_w, name
            continue
        assert run.static_power_w < run.power_w <= tdp * (1 + 1e-9), name
        assert run.power_w <= run.peak_power_w, name
        assert run.energy_j == pytest.approx(run.power_w * run.step_time_s), name
        assert 0.0 < run.clock_scale <= 1.0, name
        if run.clock_scale < 1.0:
            assert run.power_w == pytest.approx(tdp), name


def test_cli_json_reports_power_energy_and_a_throttled_clock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    builtin = next(r for r in builtin_roots() if r.name == "chips") / "v100-16gb.yaml"
    data = yaml.safe_load(builtin.read_text())
    args = ["run", "--lib", str(tmp_path), "v100", "gemm:1024x1024x1024"]
    assert main([*args, "--json"]) == 0
    nominal = json.loads(capsys.readouterr().out)
    assert nominal["clock_scale"] == 1.0 and nominal["power_w"] < 300.0
    data["tdp"] = "100 W"  # below the modelled power: the clock must give way
    (tmp_path / "v100-16gb.yaml").write_text(yaml.safe_dump(data))
    assert main([*args, "--json"]) == 0
    capped = json.loads(capsys.readouterr().out)
    assert capped["power_w"] == pytest.approx(100.0)
    # DVFS: the voltage falls with the clock, so the actions on the chip's supply spend (V/V0)^2 of their
    # energy and the dynamic power falls faster than the clock: less clock is lost than at fixed voltage
    static, scale = nominal["static_power_w"], capped["clock_scale"]
    volts = VoltageRule.of(Library().energy().dvfs).voltage_scale(scale) ** 2
    assert (100.0 - static) / (nominal["power_w"] - static) < scale < 1.0
    core = sum(nominal["energy_breakdown_j"][part] for part in CORE_PARTS)
    other = nominal["energy_breakdown_j"]["dram"] + nominal["energy_breakdown_j"]["link"]
    assert scale * (core * volts + other) / nominal["step_time_s"] + static == pytest.approx(100.0)
    assert capped["energy_j"] == pytest.approx(capped["power_w"] * capped["step_time_s"])
    assert capped["step_time_s"] == pytest.approx(nominal["step_time_s"] / capped["clock_scale"])
    for part in ("compute", "register", "dram"):
        expected = nominal["energy_breakdown_j"][part] * (volts if part in CORE_PARTS else 1.0)
        assert capped["energy_breakdown_j"][part] == pytest.approx(expected), part
    assert main(args) == 0
    assert capped["voltage_scale"] == pytest.approx(volts**0.5) and capped["voltage_scale"] < 1.0
    throttled = f"clock throttled to {100 * scale:.1f}% (voltage {100 * capped['voltage_scale']:.1f}%) by the TDP"
    assert throttled in capsys.readouterr().out


def test_a_die_without_a_published_area_is_estimated_from_its_transistors(library: Library) -> None:
    tech = library.energy()
    b200 = library.chip("b200")
    energy = chip_energy(b200, tech, Precision.FP16, 0.0)
    assert energy.area_source == "from transistors"
    assert energy.area_mm2 == pytest.approx(208e9 * tech.transistor_area[4.0])
    assert energy.static_w == pytest.approx(energy.area_mm2 * tech.static_power_density)
    assert transistor_area_mm2(library.chip("h100"), tech) == pytest.approx(814.0, rel=1e-3)
    mi300x = library.chip("mi300x")  # 5 nm: between the 4 nm and 7 nm figures
    per_transistor = (transistor_area_mm2(mi300x, tech) or 0.0) / 153e9
    assert tech.transistor_area[4.0] < per_transistor < tech.transistor_area[7.0]
    assert chip_energy(library.chip("tpu-v4"), tech, Precision.FP16, 0.0).area_source == "modelled"
    doubled = replace_path(b200, "tensorcore.sm_count", 2 * b200.section_of(TensorCoreSection).sm_count)
    bigger = chip_energy(doubled, tech, Precision.FP16, 0.0, b200)
    assert bigger.area_source == "from transistors, resized" and bigger.area_mm2 > energy.area_mm2


def test_logic_energy_scales_with_the_gate_pitch_of_the_node(library: Library) -> None:
    tech = library.energy()
    assert gate_pitch_nm(45.0, tech) == 160.0 and gate_pitch_nm(12.0, tech) == gate_pitch_nm(16.0, tech) == 90.0
    # between two nodes on log scales, above the table with the name, below it held at the smallest node's pitch
    assert gate_pitch_nm(10.0, tech) == pytest.approx(57.0 * (90.0 / 57.0) ** (math.log(10 / 7) / math.log(12 / 7)))
    assert gate_pitch_nm(90.0, tech) == pytest.approx(320.0)
    assert gate_pitch_nm(3.0, tech) == gate_pitch_nm(4.0, tech) == 51.0
    pitches = [gate_pitch_nm(node, tech) for node in (3.0, 4.0, 5.0, 6.0, 7.0, 10.0, 12.0, 16.0, 28.0, 45.0, 65.0)]
    assert pitches == sorted(pitches)
    example = library.chip("systolic-32x32")  # process not published: priced at the reference node itself
    assert energy_scale(example, tech) == 1.0
    assert energy_scale(library.chip("a100-40gb"), tech) == pytest.approx(57.0 / 160.0)


def at_1447(library: Library) -> float:
    """``(V/V0)^2`` of a V100 at AccelWattch's locked 1447 MHz: its lane figures were measured at that voltage."""
    return VoltageRule.of(library.energy().dvfs).voltage_scale(1.447e9 / library.chip("v100").clock) ** 2


def test_lane_activation_is_paid_by_instruction_issued_matrix_units_while_they_run(library: Library) -> None:
    tech = library.energy()
    v100 = library.chip("v100")
    energy = chip_energy(v100, tech, Precision.FP16, 0.0)
    lanes = 80 * 8 * 64  # SMs x tensor cores x fp16 MACs per clock
    boost = supply_scale(tech)
    assert energy.matrix_active_w == pytest.approx(lanes * v100.clock * tech.matrix_lane_cycle * 90 / 160 * boost)
    # AccelWattch's 48.95 W at its 1447 MHz, at the V100's own 1530 MHz clock and the voltage there
    assert energy.matrix_active_w == pytest.approx(48.95 * v100.clock / 1.447e9 / at_1447(library), rel=1e-3)
    assert energy.op_energy(True, 0, 0, 2.0).activation_j == pytest.approx(2.0 * energy.matrix_active_w)
    # an element-wise op runs on the CUDA cores: their lanes' activation, not the tensor cores'
    assert energy.op_energy(False, 10**9, 0, 2.0).activation_j == pytest.approx(2.0 * energy.vector_active_w)
    for systolic in ("tpu-v4", "systolic-32x32", "gc200"):  # no published lane-activation figure
        other = chip_energy(library.chip(systolic), tech, Precision.FP16, 0.0)
        assert other.matrix_active_w == other.vector_active_w == 0.0
        assert other.op_energy(False, 10**9, 0, 2.0).activation_j == 0.0
    run = simulate("v100", "gemm:4096x4096x4096", library=library)
    # the layers' times are at the throttled clock; the lanes are active over the same cycles, which
    # take ``clock_scale`` of that time at the nominal clock that ``matrix_active_w`` is priced at
    busy = sum(layer.end_s - layer.start_s for layer in run.layers if layer.unit == "matrix") * run.clock_scale
    # (the 4096 cube passes the V100's 300 W: at the throttled voltage, (V/V0)^2 of it)
    expected = busy * energy.matrix_active_w * run.voltage_scale**2
    assert run.energy_breakdown_j["activation"] == pytest.approx(expected)


def test_a_dense_gemm_draws_the_tdp_of_the_tensor_core_gpus(library: Library) -> None:
    # the acceptance of issue 17: within 15% of the TDP, or held at it by the DVFS throttle; the p100
    # (63%: fp16 on CUDA cores, no tensor cores) falls short (README, "Energy, power and area")
    for name in (
        "v100",
        "v100-32gb",
        "a100-40gb",
        "a100-80gb",
        "h100",
        "h100-pcie",
        "h200",
        "b200",
        "mi250x",
        "mi300x",
    ):
        run = simulate(name, "gemm:8192x8192x8192", library=library)
        tdp = library.chip(name).tdp_w
        assert tdp is not None and 0.85 * tdp <= run.power_w <= tdp * (1 + 1e-9), name


def test_simt_cores_pay_instruction_issue_and_their_own_lane_activation(library: Library) -> None:
    tech = library.energy()
    p100 = library.chip("p100")  # fp16 on CUDA cores as packed half2: two FMAs per lane instruction
    energy = chip_energy(p100, tech, Precision.FP16, 0.0)
    boost = supply_scale(tech)
    assert energy.matrix_instruction_j == pytest.approx(tech.simt_instruction * 90 / 160 / 2 * boost)
    assert energy.register_mac_j == 0.0  # operand fetch is part of the instruction's overhead
    assert energy.matrix_active_w == pytest.approx(56 * 64 * p100.clock * tech.simt_lane_cycle * 90 / 160 * boost)
    # AccelWattch's 38.62 W (INT+FP kernels, 5120 lanes at a V100's 1447 MHz), per lane at the P100's clock
    assert energy.matrix_active_w == pytest.approx(38.62 * 56 / 80 * p100.clock / 1.447e9 / at_1447(library), rel=1e-3)
    v100 = library.chip("v100")
    tensor = chip_energy(v100, tech, Precision.FP16, 0.0)  # tensor cores amortize issue over MxNxK MACs
    assert tensor.matrix_instruction_j == 0.0 and tensor.register_mac_j > 0.0
    assert tensor.vector_instruction_j == pytest.approx(tech.simt_instruction * 90 / 160 / 2 * boost)
    fp32 = chip_energy(v100, tech, Precision.FP32, 0.0)  # no fp32 tensor cores on Volta: CUDA cores run it
    assert fp32.matrix_instruction_j == pytest.approx(tech.simt_instruction * 90 / 160 * boost)
    assert fp32.matrix_active_w < tensor.matrix_active_w
    for other in ("tpu-v4", "gc200", "ascend910"):  # no SIMT cores: no instruction issue priced
        chip = chip_energy(library.chip(other), tech, Precision.FP16, 0.0)
        assert chip.matrix_instruction_j == chip.vector_instruction_j == 0.0
    op = energy.op_energy(True, 2 * 10**9, 0, 1e-3)
    assert op.instruction_j == pytest.approx(10**9 * energy.matrix_instruction_j)
    assert op.total_j == pytest.approx(op.compute_j + op.sram_j + op.dram_j + op.activation_j + op.instruction_j)
    run = simulate("p100", "gemm:4096x4096x4096", library=library)
    assert run.energy_breakdown_j["instruction"] == pytest.approx(4096**3 * energy.matrix_instruction_j)


def test_element_wise_ops_on_simt_cores_pay_their_lane_activation(
    library: Library, capsys: pytest.CaptureFixture[str]
) -> None:
    # AccelWattch's static model charges every sample whose warps use the INT and FP units the INT+FP
    # category's lane activation (static_cat2: 38.62 W over 5120 lanes at 1447 MHz on its GV100)
    tech = library.energy()
    v100 = library.chip("v100")
    energy = chip_energy(v100, tech, Precision.FP16, 0.0)
    assert energy.vector_active_w == pytest.approx(
        80 * 64 * v100.clock * tech.simt_lane_cycle * 90 / 160 * supply_scale(tech)
    )
    assert energy.vector_active_w == pytest.approx(38.62 * v100.clock / 1.447e9 / at_1447(library), rel=1e-3)
    # fp32 matrix work on the same CUDA cores pays the same lanes' activation
    assert chip_energy(v100, tech, Precision.FP32, 0.0).matrix_active_w == pytest.approx(energy.vector_active_w)
    run = simulate("v100", "resnet50", mode="train", batch=32, library=library)
    matrix_s = sum(layer.end_s - layer.start_s for layer in run.layers if layer.unit == "matrix")
    vector_s = sum(layer.end_s - layer.start_s for layer in run.layers if layer.unit != "matrix")
    assert vector_s > 0.0
    expected = matrix_s * energy.matrix_active_w + vector_s * energy.vector_active_w
    assert run.energy_breakdown_j["activation"] == pytest.approx(expected, rel=1e-9)
    # the same breakdown from the CLI's JSON
    assert main(["run", "v100", "resnet50", "--mode", "train", "--batch", "32", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["energy_breakdown_j"]["activation"] == pytest.approx(expected, rel=1e-9)


def test_element_wise_ops_on_a_gpu_move_their_memory_bytes_through_the_l2(library: Library) -> None:
    tech = library.energy()
    v100 = chip_energy(library.chip("v100"), tech, Precision.FP16, 0.0)
    assert v100.vector_l2_bit_j == pytest.approx(2 * tech.l2_read * 90 / 160 * supply_scale(tech))  # in and out
    vector = v100.op_energy(False, 10**6, 10**6, 1e-6)
    assert vector.l2_j == pytest.approx(10**6 * 8 * v100.vector_l2_bit_j)
    # a matrix op's L2 reads are the panels it stages (onchip_bytes), not its main-memory bytes again
    assert v100.op_energy(True, 10**6, 10**6, 1e-6, onchip_bytes=0).l2_j == 0.0
    for other in ("tpu-v4", "gc200", "ascend910"):  # no SIMT cores behind an L2: no pass-through priced
        chip = chip_energy(library.chip(other), tech, Precision.FP16, 0.0)
        assert chip.vector_l2_bit_j == 0.0 and chip.op_energy(False, 10**6, 10**6, 1e-6).l2_j == 0.0


def test_tiled_matrix_kernels_pay_the_l2_and_shared_memory_for_the_panels_they_stage(library: Library) -> None:
    tech = library.energy()
    run = simulate("v100", "gemm:4096x4096x4096", library=library)
    (layer,) = run.layers
    # each output tile column re-reads all of A and each tile row all of B: (N / tile_n x M + M / tile_m
    # x N) x K fp16 elements, never less than the compulsory 2 x 4096 x 4096 of the two operands
    assert layer.onchip_bytes >= 2 * 4096 * 4096 * 2
    shapes = [(m, n) for m, n in ((256, 128), (128, 256), (128, 128), (128, 64), (64, 128), (64, 64))]
    staged = {(4096 // n * 4096 + 4096 // m * 4096) * 4096 * 2 for m, n in shapes}
    assert layer.onchip_bytes in staged  # one of the cost model's tile shapes
    scale = 90 / 160 * supply_scale(tech) * run.voltage_scale**2  # the node, the boost supply, the throttle
    assert run.energy_breakdown_j["l2"] == pytest.approx(layer.onchip_bytes * 8 * tech.l2_read * scale)
    sram = 2 * (layer.bytes + layer.onchip_bytes) * 8 * tech.sram_read * scale
    assert run.energy_breakdown_j["sram"] == pytest.approx(sram)
    energy = chip_energy(library.chip("v100"), tech, Precision.FP16, 0.0)
    fewer = energy.op_energy(True, 2 * 10**9, 10**6, 1e-3, onchip_bytes=10**6)
    more = energy.op_energy(True, 2 * 10**9, 10**6, 1e-3, onchip_bytes=10**7)
    assert more.total_j > fewer.total_j and more.l2_j == pytest.approx(10 * fewer.l2_j)
    for vector in simulate("v100", "resnet50", library=library).layers:
        if vector.unit == "vector":
            assert vector.onchip_bytes == 0
    # a decode step's matrix-vector products stage about what they read from memory, not padded tiles
    decode = simulate("a100-80gb", "gpt2", mode="decode", batch=4, library=library)
    matrix = [layer for layer in decode.layers if layer.unit == "matrix"]
    assert sum(m.onchip_bytes for m in matrix) <= 2 * sum(m.bytes for m in matrix)
