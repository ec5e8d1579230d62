"""The power limit's DVFS throttle (archsim.models.dvfs): the voltage rule, the solved clock, and its runs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from archsim import simulate
from archsim.cli import main
from archsim.errors import SpecError
from archsim.models.dvfs import VoltageRule, throttle
from archsim.results.power import CORE_PARTS
from archsim.spec.library import Library, builtin_roots
from archsim.sweep import run_sweep
from tests.cli import chip_file, run_cli

ENERGY_FILE = next(r for r in builtin_roots() if r.name == "energy") / "cmos.yaml"
RULE = VoltageRule(slope=1.5, floor=0.7)
"""A rule with round numbers: the line reaches its floor at 0.8 of the clock."""


def test_the_rule_runs_through_the_published_curve(library: Library) -> None:
    curve = library.energy().dvfs  # TechPowerUp's RTX 2060 FE: 1620-1920 MHz at 0.862-1.068 V, 0.718 V at idle
    rule = VoltageRule.of(curve)
    assert rule.slope == pytest.approx((1 - 0.862 / 1.068) / (1 - 1620 / 1920))
    assert rule.floor == pytest.approx(0.718 / 1.068)
    assert rule.voltage_scale(1.0) == 1.0
    assert rule.voltage_scale(1620 / 1920) == pytest.approx(0.862 / 1.068)
    assert rule.voltage_scale(0.3) == rule.voltage_scale(rule.knee) == pytest.approx(rule.floor)
    assert 0.7 < rule.knee < 0.75  # the line reaches 0.718 V near 1410 MHz
    scales = [rule.voltage_scale(s / 100) for s in range(1, 101)]
    assert scales == sorted(scales)


def test_within_the_limit_or_without_one_nothing_throttles() -> None:
    for limit in (None, 20.0):
        held = throttle(6.0, 4.0, 5.0, 1.0, limit, RULE)
        assert (held.clock_scale, held.voltage_scale, held.step_time_s) == (1.0, 1.0, 1.0)
    with pytest.raises(SpecError, match="static power"):
        throttle(20.0, 10.0, 25.0, 1.0, 20.0, RULE)


def test_the_throttled_step_draws_the_limit_at_the_lower_voltage() -> None:
    held = throttle(20.0, 10.0, 5.0, 1.0, 20.0, RULE)  # 35 W at nominal clock, 15 W of budget
    s, v = held.clock_scale, held.voltage_scale
    assert v == pytest.approx(RULE.voltage_scale(s)) and held.core_energy_scale == pytest.approx(v**2)
    assert held.step_time_s == pytest.approx(1.0 / s)
    assert (20.0 * v**2 + 10.0) / held.step_time_s + 5.0 == pytest.approx(20.0, rel=1e-12)
    assert s > 15.0 / 30.0  # the fixed-voltage answer: the lower voltage costs less clock


def test_on_the_floor_the_clock_is_found_in_closed_form() -> None:
    held = throttle(20.0, 10.0, 5.0, 1.0, 10.0, RULE)  # 5 W of budget: below the knee
    assert held.voltage_scale == RULE.floor and held.clock_scale < RULE.knee
    assert held.clock_scale == pytest.approx(5.0 / (20.0 * 0.49 + 10.0))


def test_energy_off_the_chips_supply_throttles_as_at_fixed_voltage() -> None:
    # main memory and links keep their energy per bit: with nothing else, the clock falls in proportion
    assert throttle(0.0, 30.0, 5.0, 1.0, 20.0, RULE).clock_scale == pytest.approx(0.5)


def test_a_lower_limit_never_gives_a_faster_clock() -> None:
    scales = [throttle(40.0, 10.0, 5.0, 1.0, limit, RULE).clock_scale for limit in range(6, 60, 3)]
    assert scales == sorted(scales) and scales[-1] == 1.0 and scales[0] < RULE.knee
    assert throttle(40.0, 10.0, 5.0, 1.0, 30.0, RULE) == throttle(40.0, 10.0, 5.0, 1.0, 30.0, RULE)


def test_a_throttled_gpu_spends_the_lower_voltages_energy(library: Library) -> None:
    run = simulate("h100", "gemm:8192x8192x8192", library=library)
    entry = library.find(["chip"], "h100")
    unlimited = library.with_specs({entry: library.chip("h100").model_copy(update={"tdp": None})})
    nominal = simulate("h100", "gemm:8192x8192x8192", library=unlimited)
    assert nominal.clock_scale == 1.0 and nominal.power_w > 700.0
    assert 0.0 < run.clock_scale < 1.0 and run.power_w == pytest.approx(700.0)
    volts = VoltageRule.of(library.energy().dvfs).voltage_scale(run.clock_scale) ** 2
    for part, joules in nominal.energy_breakdown_j.items():
        if part != "static":
            expected = joules * (volts if part in CORE_PARTS else 1.0)
            assert run.energy_breakdown_j[part] == pytest.approx(expected), part
    dynamic = sum(joules for part, joules in run.energy_breakdown_j.items() if part != "static")
    assert sum(layer.energy_j for layer in run.layers) == pytest.approx(dynamic)
    assert run.step_time_s == pytest.approx(nominal.step_time_s / run.clock_scale)
    assert run.throughput == pytest.approx(nominal.throughput * run.clock_scale)
    # every layer stretches with the step over the same cycles: the timeline ends where the step does
    for slow, fast in zip(run.layers, nominal.layers, strict=True):
        assert slow.start_s == pytest.approx(fast.start_s / run.clock_scale)
        assert slow.end_s == pytest.approx(fast.end_s / run.clock_scale)
        assert slow.cycles == fast.cycles and slow.roofline_s == fast.roofline_s
    assert max(layer.end_s for layer in run.layers) == pytest.approx(run.ops_time_s)


def test_a_throttled_system_stretches_its_communication_and_its_timeline(
    library: Library, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 8 B200s training GPT-3 1.3B pass their 1000 W: every time of the step stretches together
    args = ("dgx-b200", "gpt3-1.3b")
    run = simulate(*args, mode="train", batch=8, library=library)
    entry = library.find(["chip"], "b200")
    unlimited = library.with_specs({entry: library.chip("b200").model_copy(update={"tdp": None})})
    nominal = simulate(*args, mode="train", batch=8, library=unlimited)
    slower = 1 / run.clock_scale
    assert slower > 1.0 and nominal.clock_scale == 1.0
    for name in ("comm_s", "exposed_comm_s", "bubble_s", "input_wait_s"):
        assert getattr(run, name) == pytest.approx(getattr(nominal, name) * slower), name
    assert run.collectives and len(run.collectives) == len(nominal.collectives)
    for slow, fast in zip(run.collectives, nominal.collectives, strict=True):
        assert (slow.start_s, slow.end_s) == pytest.approx((fast.start_s * slower, fast.end_s * slower))
    path = tmp_path / "step.json"
    assert main(["run", *args, "--mode", "train", "--batch", "8", "--timeline", str(path)]) == 0
    capsys.readouterr()
    spans = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    last_us = max(e["ts"] + e["dur"] for e in spans)
    assert last_us == pytest.approx(1e6 * max(layer.end_s for layer in run.layers), rel=1e-6)


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("low_voltage", "1.2 V", "dvfs.low_voltage: must be below nominal_voltage"),
        ("low_clock", "2 GHz", "dvfs.low_clock: must be below nominal_clock"),
        ("floor_voltage", "0.9 V", "dvfs.floor_voltage: must be at or below low_voltage"),
        ("floor_voltage", "0.718", "dvfs.floor_voltage: '0.718' has no unit"),
        ("nominal_voltage", "1.068 GHz", "dvfs.nominal_voltage: "),
    ],
)
def test_a_bad_voltage_curve_is_one_line_error(
    field: str, value: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = yaml.safe_load(ENERGY_FILE.read_text())
    data["dvfs"][field] = value
    (tmp_path / "cmos.yaml").write_text(yaml.safe_dump(data))
    code = main(["run", "--lib", str(tmp_path), "v100", "gemm:64x64x64", "--json"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.startswith("archsim: error: ") and f"cmos.yaml: {problem}" in captured.err
    assert captured.err.count("\n") == 1


def test_a_user_curve_moves_the_throttled_clock(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", "--lib", str(tmp_path), "h100", "gemm:8192x8192x8192", "--json"]
    assert main(args) == 0
    published = json.loads(capsys.readouterr().out)
    data = yaml.safe_load(ENERGY_FILE.read_text())
    data["dvfs"]["low_voltage"] = "1.06 V"  # a nearly flat curve: the voltage barely follows the clock
    (tmp_path / "cmos.yaml").write_text(yaml.safe_dump(data))
    assert main(args) == 0
    flat = json.loads(capsys.readouterr().out)
    assert flat["clock_scale"] < published["clock_scale"] < 1.0
    assert flat["power_w"] == pytest.approx(published["power_w"]) == pytest.approx(700.0)


def test_the_batch_path_throttles_as_the_event_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("archsim.sweep.batch.MIN_GROUP", 1)  # price even a small group on the batch path
    sweep = {
        "schema_version": 1,
        "kind": "sweep",
        "name": "dvfs-both-paths",
        "target": "h100",
        "workloads": ["gemm:4096x4096x4096", "resnet50"],
        "grid": {"chip.tdp": ["150 W", "400 W", "600 W", "700 W"]},  # on the floor, on the line, unthrottled
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    batch = run_sweep(path, jobs=1, progress=False, path="batch")
    event = run_sweep(path, jobs=1, progress=False, path="event")
    pd.testing.assert_frame_equal(batch, event, check_exact=True)
    scales = batch["clock_scale"]
    assert (scales < 1.0).sum() >= 3 and (scales == 1.0).any()


def test_an_input_capped_step_throttles_alike_on_both_paths_and_its_wait_stretches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a stack whose input pipeline binds the step, on an H100 held at 150 W: the wait stretches too
    monkeypatch.setattr("archsim.sweep.batch.MIN_GROUP", 1)
    lib = tmp_path / "lib"
    (lib / "software").mkdir(parents=True)
    stack = yaml.safe_load((next(r for r in builtin_roots() if r.name == "software") / "cublas.yaml").read_text())
    stack.update(name="slow-input", input_pipeline="10000 samples/s")
    stack["sources"]["input_pipeline"] = "a test's cap"
    (lib / "software" / "slow-input.yaml").write_text(yaml.safe_dump(stack))
    sweep = {
        "schema_version": 1,
        "kind": "sweep",
        "name": "dvfs-input-wait",
        "target": "h100",
        "workloads": ["resnet50"],
        "settings": {"software": "slow-input"},
        "grid": {"chip.tdp": ["150 W", "700 W"]},
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    batch = run_sweep(path, jobs=1, progress=False, path="batch", search_path=[str(lib)])
    event = run_sweep(path, jobs=1, progress=False, path="event", search_path=[str(lib)])
    pd.testing.assert_frame_equal(batch, event, check_exact=True)
    assert (batch["clock_scale"] < 1.0).any()
    # the wait stretches with the rest of the step
    library = Library([str(lib)])
    run = simulate("h100", "resnet50", software="slow-input", library=library)
    entry = library.find(["chip"], "h100")
    capped = library.with_specs({entry: library.chip("h100").model_copy(update={"tdp": 150.0})})
    slow = simulate("h100", "resnet50", software="slow-input", library=capped)
    assert run.clock_scale == 1.0 and run.input_wait_s > 0.0 and slow.clock_scale < 1.0
    assert slow.input_wait_s == pytest.approx(run.input_wait_s / slow.clock_scale)


def test_issue35_23_a_power_limit_below_static_power_names_the_chip_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = chip_file(tmp_path, tdp="30 W", sources__tdp="a test's own limit")
    code, out, err = run_cli(capsys, "run", path, "gemm:1024x1024x1024")
    assert (code, out) == (2, "")
    assert err.startswith(f"archsim: error: {path}: tdp: 30 W is at or below the modelled static power ")
