"""The command line: outputs, and the one-line error with exit status 2 for every bad input."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from archsim.spec.cache import CACHE_ENV
from tests.cli import chip_file, run_cli


def test_list_names_chips_and_workloads(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "list")
    assert code == 0
    assert "v100-16gb" in out
    assert "resnet50" in out
    assert "bert-large" in out


def test_run_json_has_the_documented_fields(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "run", "v100", "resnet50", "--batch", "8", "--json")
    assert code == 0, err
    result = json.loads(out)
    for key in (
        "target",
        "workload",
        "mode",
        "batch",
        "precision",
        "num_chips",
        "step_time_s",
        "throughput",
        "flops",
        "utilization",
        "normalized",
        "layers",
    ):
        assert key in result
    assert set(result["normalized"]) == {"per_chip", "per_watt", "per_watt_tdp", "per_billion_transistors", "per_mm2"}
    for key in ("energy_j", "power_w", "area_mm2", "energy_per_sample_j", "peak_power_w", "clock_scale"):
        assert result[key] > 0, key
    assert result["normalized"]["per_watt"] == pytest.approx(result["throughput"] / result["power_w"])
    layer = result["layers"][0]
    for key in ("name", "kind", "start_s", "end_s", "cycles", "flops", "bytes", "bound", "energy_j"):
        assert key in layer
    assert result["batch"] == 8
    assert result["mode"] == "infer"
    assert result["precision"] == "fp16"
    assert result["throughput"] == pytest.approx(8 / result["step_time_s"])


def test_run_human_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "run", "v100", "gemm:1024x1024x1024")
    assert code == 0
    assert "throughput" in out
    assert "bound" in out


def test_json_is_deterministic(capsys: pytest.CaptureFixture[str]) -> None:
    first = run_cli(capsys, "run", "v100", "bert-base", "--mode", "train", "--batch", "4", "--json")[1]
    second = run_cli(capsys, "run", "v100", "bert-base", "--mode", "train", "--batch", "4", "--json")[1]
    assert first == second


BAD_INPUTS = [
    (lambda t: ["run", str(t / "absent.yaml"), "resnet50"], "absent.yaml: no such file"),
    (lambda t: ["run", "v999", "resnet50"], "v999: unknown chip"),
    (lambda t: ["run", "v100", "resnet99"], "resnet99: unknown model"),
    (lambda t: ["run", "v100", "resnet50", "--batch", "0"], "--batch"),
    (lambda t: ["run", "v100", "resnet50", "--batch", "lots"], "--batch"),
    (lambda t: ["run", "v100", "resnet50", "--precision", "tf32"], "--precision: tf32 is not supported"),
    (lambda t: ["run", "v100", "resnet50", "--mode", "train", "--batch", "100000"], "--batch: batch 100000 needs"),
    (lambda t: ["run", "v100", "resnet50", "--seq-len", "128"], "--seq-len"),
    (lambda t: ["run", "v100", "bert-base", "--seq-len", "4096"], "--seq-len"),
    (lambda t: ["run", "v100", "gemm:12xab"], "gemm"),
    (lambda t: ["frobnicate"], "invalid choice"),
]


@pytest.mark.parametrize(("argv", "fragment"), BAD_INPUTS)
def test_bad_arguments_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: object, fragment: str
) -> None:
    code, out, err = run_cli(capsys, *argv(tmp_path))  # type: ignore[operator]
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("archsim: error: ")
    assert fragment in err


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "chip.yaml: file is empty"),
        ("kind: chip\n  name: [\n", "chip.yaml: line"),
        ("just a string\n", "expected a mapping"),
        ("schema_version: 1\nkind: link\nname: x\n", "chip.yaml: kind: is 'link', expected chip"),
    ],
)
def test_bad_files_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, fragment: str
) -> None:
    path = tmp_path / "chip.yaml"
    path.write_text(text)
    code, out, err = run_cli(capsys, "run", str(path), "resnet50")
    assert (code, out) == (2, "")
    assert fragment in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"tensorcore__sm_count": None}, "tensorcore.sm_count: missing required field"),
        ({"tensorcore__warp_size": 32}, "tensorcore.warp_size: unknown field"),
        ({"tensorcore__sm_count": -4}, "tensorcore.sm_count: input should be greater than 0, got -4"),
        ({"memory__main__bandwidth": "-900 GB/s"}, "memory.main.bandwidth: '-900 GB/s' must be a positive"),
        ({"memory__main__bandwidth": "0 GB/s"}, "memory.main.bandwidth"),
        ({"memory__main__bandwidth": "lots"}, "memory.main.bandwidth: not a quantity"),
        ({"memory__main__bandwidth": "900 GB/fortnight"}, "memory.main.bandwidth: unknown unit"),
        ({"clock": 1530}, "clock: expected a quantity string"),
        ({"tensorcore__sm_count": "eighty"}, "tensorcore.sm_count"),
    ],
)
def test_bad_fields_name_file_and_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, changes: dict[str, object], fragment: str
) -> None:
    path = chip_file(tmp_path, **changes)
    code, out, err = run_cli(capsys, "run", path, "resnet50")
    assert (code, out) == (2, "")
    assert err.startswith(f"archsim: error: {path}: ")
    assert fragment in err and err.count("\n") == 1


def test_console_script_prints_no_traceback(tmp_path: Path) -> None:
    path = tmp_path / "chip.yaml"
    path.write_text("a: 1\na: 2\n")
    proc = subprocess.run(
        [sys.executable, "-m", "archsim.cli", "run", str(path), "resnet50"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"archsim: error: {path}: line 2: not valid YAML: duplicate key 'a'"


def _modules_after(code: str, cache: Path) -> set[str]:
    """The modules a fresh interpreter has loaded after running ``code`` (with its own cache folder)."""
    script = f"import sys\n{code}\nprint(' '.join(sorted(sys.modules)))"
    env = {**os.environ, CACHE_ENV: str(cache)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    return set(done.stdout.splitlines()[-1].split())


HEAVY = {"numpy", "pandas", "plotly", "numba", "torch", "onnx", "hypothesis", "optuna", "pyarrow"}
"""Packages no run of a built-in chip and model needs."""


def test_import_archsim_loads_nothing_else(tmp_path: Path) -> None:
    loaded = _modules_after("import archsim", tmp_path)
    assert {m for m in loaded if m.startswith("archsim.")} == set()
    assert not {"pydantic", "yaml", "simpy"} & loaded


def test_list_loads_neither_pydantic_nor_the_engine(tmp_path: Path) -> None:
    listing = "from archsim.cli import main\nmain(['list', 'chips'])"
    cold = _modules_after(listing, tmp_path)
    warm = _modules_after(listing, tmp_path)
    for loaded in (cold, warm):
        assert not {"pydantic", "simpy", "archsim.engine", "archsim.commands.run"} & loaded
        assert not HEAVY & loaded
    assert "yaml" not in warm  # every header came from the cache


def test_run_loads_only_what_it_uses(tmp_path: Path) -> None:
    run = "from archsim.cli import main\nmain(['run', 'v100', 'resnet50', '--json'])"
    _modules_after(run, tmp_path)
    warm = _modules_after(run, tmp_path)
    assert not HEAVY & warm
    assert not {"yaml", "archsim.commands.listing", "archsim.commands.sweep"} & warm
    assert not OTHER_WORKLOADS & warm
    assert "archsim.results.training" not in warm  # input pipeline and time to train: simulate_training's


OTHER_WORKLOADS = {
    "archsim.workloads.onnx_import",
    "archsim.workloads.chakra",
    "archsim.workloads.bert",
    "archsim.workloads.decoder",
    "archsim.workloads.tensor_parallel",
    "archsim.workloads.expert_parallel",
}
"""What a run of a ResNet does not build with: the ONNX and Chakra readers, the BERT and decoder graphs and
the decoders' parallel transforms."""


def test_the_program_freezes_what_its_imports_made_and_a_call_leaves_the_collector_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # as the program (no argv): the imports' objects are frozen, and the collector is on for the run
    program = "import gc, sys\nsys.argv = ['archsim', 'list', 'chips']\nfrom archsim.cli import main\nmain()\n"
    script = program + "print(gc.isenabled(), gc.get_freeze_count())"
    env = {**os.environ, CACHE_ENV: str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    enabled, frozen = done.stdout.splitlines()[-1].split()
    assert enabled == "True"
    assert int(frozen) > 10_000
    # called with argv (a test, a notebook): the host's collector is left as it was
    before = gc.get_freeze_count()
    code, out, _ = run_cli(capsys, "list", "chips")
    assert code == 0 and "v100-16gb" in out
    assert gc.isenabled()
    assert gc.get_freeze_count() == before


MULTI_CHIP = {
    "simpy",
    "archsim.engine.parallel",
    "archsim.engine.collectives",
    "archsim.engine.network",
    "archsim.run.system",
    "archsim.models.interconnect",
    "archsim.models.placement",
    "archsim.spec.system",
    "archsim.engine.records",
    "archsim.run.tensor_parallel",
}
"""What only a multi-chip system's run needs: SimPy, the collective engine and its records, the fabric and its
description, the parallel groups' calls."""

OTHER_FAMILIES = {
    "archsim.models.ipu",
    "archsim.models.cube",
    "archsim.models.systolic",
    "archsim.models.systolic_layer",
    "archsim.models.dataflow",
}
"""The built-in families a V100 (a tensor-core chip) does not use, imported when every family is listed,
and the systolic array model, which ``archsim run`` imports for SCALE-Sim files only."""


def test_a_one_chip_run_loads_neither_simpy_nor_the_multi_chip_engine(tmp_path: Path) -> None:
    run = "from archsim.cli import main\nmain(['run', 'v100', 'resnet50'])"
    cold = _modules_after(run, tmp_path)
    warm = _modules_after(run, tmp_path)
    for loaded in (cold, warm):
        assert not MULTI_CHIP & loaded
    # the cold run validates the chip file, which names every family; the warm one reads it from the cache
    assert not OTHER_FAMILIES & warm
    assert "archsim.models.tensorcore" in warm
    system = _modules_after("from archsim.cli import main\nmain(['run', 'dgx1', 'resnet50'])", tmp_path)
    assert system >= MULTI_CHIP  # what the check looks for is loaded where it is used


def test_help_lists_every_subcommand_as_the_full_parser_does(capsys: pytest.CaptureFixture[str]) -> None:
    from archsim.cli import COMMANDS, build_parser

    full = build_parser().format_help()
    assert build_parser([]).format_help() == full
    for name, (_, text) in COMMANDS.items():
        assert name in full
        assert " ".join(text.split()[:3]) in " ".join(full.split())
