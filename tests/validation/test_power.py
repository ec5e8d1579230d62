"""The power validation table (validation/power.yaml): measured average power against the energy model.

Each row is also a case of tests/validation/test_published.py (held to its tolerance, or a strict
expected failure where the table says it is known outside). Here: what holds for every row whatever
its error -- the modelled power is a lower bound of the measured one (the energy model counts a subset
of the actions, each at a cited figure) and above the chip's static power -- and the table is reachable
from the CLI.
"""

from __future__ import annotations

import pytest

from archsim import simulate
from archsim.cli import main
from archsim.models.dvfs import VoltageRule
from archsim.models.energy import chip_energy
from archsim.results.power import CORE_PARTS
from archsim.results.records import RunResult
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.validation import prepare
from archsim.validation.run import report_for

LIBRARY = Library(use_env=False)


def volts_at(chip: str, clock_hz: float) -> float:
    """``(V/V0)^2`` of ``chip``'s supply at ``clock_hz``, by the energy model's voltage-frequency rule."""
    return VoltageRule.of(LIBRARY.energy().dvfs).voltage_scale(clock_hz / LIBRARY.chip(chip).clock) ** 2


def dynamic_j_at(run: RunResult, chip: str, clock_hz: float) -> float:
    """The run's dynamic energy (all but static power, lane activation and links) at ``clock_hz``'s voltage.

    The chip's own supply follows the energy model's voltage-frequency rule below its nominal clock;
    whatever the power limit did to ``run`` is undone first. Main memory keeps its energy per bit.
    """
    volts = volts_at(chip, clock_hz) / run.voltage_scale**2
    parts = run.energy_breakdown_j
    core = sum(joules for part, joules in parts.items() if part in CORE_PARTS and part != "activation")
    return core * volts + parts["dram"]


@pytest.mark.validation
def test_modelled_power_is_a_lower_bound_of_the_measured_and_above_static() -> None:
    spec = LIBRARY.validation("power")
    report = report_for(spec, [prepare(row, LIBRARY) for row in spec.rows], LIBRARY, None)
    assert {r.row.target for r in report.rows} == {"v100-pcie", "p100-pcie"}
    for result in report.rows:
        chip = LIBRARY.chip(result.row.target)
        assert chip.tdp_w is not None and result.row.published <= chip.tdp_w, result.row.id
        assert result.predicted < result.row.published, result.row.id
        static_w = LIBRARY.energy().static_power_density * chip.die_area if isinstance(chip.die_area, float) else 0.0
        assert result.predicted > static_w, result.row.id


@pytest.mark.validation
def test_the_power_table_runs_from_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--table", "power"]) == 0
    out = capsys.readouterr().out
    assert "p100-pcie-rn50-train-fp32-b128" in out and " W " in out


GV100_TENSOR_GEMM = {
    "measured_w": 181.992,  # hw_power_validation_volta.csv, cudaTensorCoreGemm_k1: mean of 5 NVML readings
    "cycles": 3_871_172,  # hw_perf.csv, cudaTensorCoreGemm: Elapsed_Cycles at the locked clock
    "clock_hz": 1.447e9,  # AccelWattch's Quadro GV100 runs locked at 1447 MHz (gpgpusim.config)
    "idle_sms": 1.264,  # hw_perf.csv: Num_Idle_SMs
    "constant_w": 32.32522272,  # accelwattch_sass_hw.xml constant_power
    "tensor_activation_w": 48.94875596,  # accelwattch_sass_hw.xml static_cat6_flane (all 80 SMs active)
    "idle_sm_w": 0.28279166,  # accelwattch_sass_hw.xml idle_core_power, per idle SM
}


@pytest.mark.validation
def test_tensor_core_gemm_dynamic_energy_per_flop_matches_a_measured_gv100() -> None:
    """AccelWattch's hardware measurement of a tensor-core GEMM on a GV100, against the V100's model.

    Kandiah et al., AccelWattch (MICRO 2021): github accel-sim/accel-sim-framework
    util/accelwattch/accelwattch_hw_profiler/hw_power_validation_volta.csv@2260456 (board power, NVML)
    and github gpgpu-sim/gpgpu-sim_distribution configs/tested-cfgs/SM7_QV100/{hw_perf.csv,
    accelwattch_sass_hw.xml}@dev: the CUDA sample cudaTensorCoreGemm (its default 4096 x 4096 x 4096
    fp16 product, fp32 accumulate) on a Quadro GV100 (the V100's die, 80 SMs). Less AccelWattch's own
    constant power, its tensor category's lane activation (over the active SMs) and its idle-SM power,
    the rest is the dynamic energy: about 1.97 pJ per FLOP at the board. The V100's model prices the
    same product's MACs, register, shared-memory, L2 and HBM traffic from Horowitz's table and the
    memory's interface figure, priced at the supply voltage the model's voltage-frequency rule gives
    a V100 at 1447 MHz (0.946 of its nominal clock: 0.996 V, against the 1.068 V of its nominal
    clock); nothing is fitted to this measurement.
    """
    m = GV100_TENSOR_GEMM
    sms = 80
    active = (sms - m["idle_sms"]) / sms
    dynamic_w = m["measured_w"] - m["constant_w"] - m["tensor_activation_w"] * active - m["idle_sms"] * m["idle_sm_w"]
    measured_j_per_flop = dynamic_w * m["cycles"] / m["clock_hz"] / (2 * 4096**3)
    run = simulate("v100", "gemm:4096x4096x4096", library=LIBRARY)
    modelled_j = dynamic_j_at(run, "v100", m["clock_hz"])
    assert modelled_j / run.flops == pytest.approx(measured_j_per_flop, rel=0.15)


GV100_SGEMM = {
    "measured_w": 217.4926,  # hw_power_validation_volta.csv, parboil_sgemm_k1: mean of 5 NVML readings
    "cycles": 358_744.025,  # hw_perf.csv, parboil-sgemm mysgemmNT: Elapsed_Cycles at the locked clock
    "shared_accesses": 8_642_304,  # hw_perf.csv, parboil-sgemm: SHRD_ACC (warp-level shared-memory instructions)
    "clock_hz": 1.447e9,
    "idle_sms": 1.88,  # hw_perf.csv: Num_Idle_SMs
    "constant_w": 32.32522272,  # accelwattch_sass_hw.xml constant_power
    "simt_activation_w": 18.618 + 31 * 0.6452,  # static_cat2_flane + 31 x static_cat2_addlane (full warps)
    "idle_sm_w": 0.28279166,  # accelwattch_sass_hw.xml idle_core_power, per idle SM
}
SGEMM_SHAPE = (1024, 1056, 992)
"""Parboil's sgemm 'medium' product (C = A B^T): m x n x k = 1.0727e9 MACs, as its counters confirm
(one 128-bit shared load per 4 FMAs and a store per 8 k steps give SHRD_ACC = m n k / 128 + m n k / 4096)."""


@pytest.mark.validation
def test_cuda_core_sgemm_dynamic_energy_per_flop_matches_a_measured_gv100() -> None:
    """AccelWattch's hardware measurement of an fp32 GEMM on the CUDA cores of a GV100, against the V100's model.

    The same sources as the tensor-core check above: Parboil's ``sgemm`` (its 'medium' input) on a
    Quadro GV100 locked at 1447 MHz reads 217.5 W. Less AccelWattch's constant power, its INT+FP
    category's lane activation over the active SMs (what ``simt_lane_cycle`` is derived from) and its
    idle-SM power, 146.9 W remain: 17.0 pJ per FLOP. Parboil's kernel issues a 128-bit shared-memory
    load per four FMAs (its counters), which the model's register-tiled kernel does not; those
    instructions, counted from the measurement at ``simt_instruction`` each, are added to the model's
    dynamic energy before the comparison, so the check is of the energies per action, not of which
    kernel runs. Priced at 1447 MHz's voltage, as the tensor-core check is.
    """
    m = GV100_SGEMM
    sms = 80
    active = (sms - m["idle_sms"]) / sms
    dynamic_w = m["measured_w"] - m["constant_w"] - m["simt_activation_w"] * active - m["idle_sms"] * m["idle_sm_w"]
    flops = 2 * SGEMM_SHAPE[0] * SGEMM_SHAPE[1] * SGEMM_SHAPE[2]
    measured_j_per_flop = dynamic_w * m["cycles"] / m["clock_hz"] / flops
    run = simulate("v100", "gemm:{}x{}x{}".format(*SGEMM_SHAPE), precision="fp32", library=LIBRARY)
    modelled_j = dynamic_j_at(run, "v100", m["clock_hz"])
    # one fp32 lane instruction on the V100's CUDA cores, as the model prices it, at 1447 MHz's voltage
    issue_j = chip_energy(LIBRARY.chip("v100"), LIBRARY.energy(), Precision.FP32, 0.0).matrix_instruction_j
    shared_loads_j = m["shared_accesses"] * 32 * issue_j * volts_at("v100", m["clock_hz"])
    assert (modelled_j + shared_loads_j) / flops == pytest.approx(measured_j_per_flop, rel=0.15)
