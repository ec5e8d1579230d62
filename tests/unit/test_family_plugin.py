"""A chip family plugged in from outside archsim: its module and YAML in a folder of their own.

The toy family (``tests/data/toy_family``: ``toyfam.py``, which declares its efficiency values and
software stack in code, and one chip file) is copied to a temporary package directory, put on ``PYTHONPATH`` and
registered the two documented ways: the ``ARCHSIM_FAMILIES`` variable and an ``archsim.families``
entry point of an installed distribution. Each run is a fresh ``archsim`` process, as a user's is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from archsim.errors import PluginError, SpecError
from archsim.spec.efficiency import Efficiency
from archsim.spec.registry import (
    FamilyDefinition,
    FamilyEfficiency,
    FamilySection,
    Mechanism,
    family_names,
    register_family,
)


class ToySection(FamilySection):
    """A section with no fields (for the refusals of :func:`register_family`)."""

    def macs_per_clock(self, precision: object) -> int | None:
        return 1

    def onchip_bytes(self) -> int:
        return 0


@dataclass(frozen=True, slots=True)
class WarpEfficiency(FamilyEfficiency):
    """A record with a field no family file, software or chip can set."""

    warp_factor: float


TOY = Path(__file__).resolve().parents[1] / "data" / "toy_family"
TOY_PEAK = 64 * 256 * 2 * 1e9
"""The toy chip's fp16 peak: 64 units x 256 MACs x 2 FLOP x 1 GHz."""


def package(tmp_path: Path) -> Path:
    """A copy of the toy family's package directory (module and library folder)."""
    target = tmp_path / "toy_family"
    shutil.copytree(TOY, target)
    return target


def archsim(*argv: str, path: Path, families: str | None) -> subprocess.CompletedProcess[str]:
    """``archsim ARGV`` in a new process with ``path`` first on PYTHONPATH and ``ARCHSIM_FAMILIES`` set or not."""
    env = {k: v for k, v in os.environ.items() if k not in ("ARCHSIM_FAMILIES", "ARCHSIM_PATH")}
    env["PYTHONPATH"] = os.pathsep.join([str(path), *filter(None, [os.environ.get("PYTHONPATH")])])
    if families is not None:
        env["ARCHSIM_FAMILIES"] = families
    command = [sys.executable, "-m", "archsim.cli", *argv]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)


def test_a_family_module_on_the_path_runs_resnet50_through_the_cli(tmp_path: Path) -> None:
    root = package(tmp_path)
    lib = str(root / "library")
    done = archsim("run", "toy-chip", "resnet50", "--lib", lib, "--batch", "8", "--json", path=root, families="toyfam")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["target"], result["workload"], result["software"]) == ("toy-chip", "resnet50", "toy-runtime")
    step_s, flops = result["step_time_s"], result["flops"]
    assert step_s > 0 and flops > 0
    assert step_s >= flops / TOY_PEAK  # never faster than the peak
    assert 0 < result["utilization"] <= 1
    assert result["utilization"] == pytest.approx(flops / step_s / TOY_PEAK)
    assert result["throughput"] == pytest.approx(8 / step_s)


def test_the_family_is_its_module_and_one_chip_file() -> None:
    files = sorted(str(p.relative_to(TOY)) for p in TOY.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert files == ["library/toy-chip.yaml", "toyfam.py"]


def test_a_family_file_on_the_search_path_wins_over_the_module_s_values(tmp_path: Path) -> None:
    root = package(tmp_path)
    lib = root / "library"
    argv = ("run", "toy-chip", "gemm:4096x4096x4096", "--lib", str(lib), "--json")
    declared = json.loads(archsim(*argv, path=root, families="toyfam").stdout)
    (lib / "toy.yaml").write_text(
        "schema_version: 1\nkind: family\nname: toy\ndescription: toy, half the matrix efficiency\n"
        "efficiency: {compute: 0.4, memory_bandwidth: 0.8, vector: 0.5}\n"
        "software: toy-runtime\nkernel_software: toy-runtime\nsources: {efficiency: a test's values}\n"
    )
    done = archsim(*argv, path=root, families="toyfam")
    assert done.returncode == 0, done.stderr
    halved = json.loads(done.stdout)
    assert declared["time_by_bound"]["compute"] > 0  # a compute-bound product: twice as long at half the efficiency
    assert halved["step_time_s"] > 1.9 * declared["step_time_s"]
    assert halved["software"] == declared["software"] == "toy-runtime"


def test_a_bad_declared_value_is_refused_in_one_line_naming_the_module(tmp_path: Path) -> None:
    root = package(tmp_path)
    module = root / "toyfam.py"
    module.write_text(module.read_text().replace('"vector": 0.5', '"vectr": 0.5'))
    done = archsim("run", "toy-chip", "resnet50", "--lib", str(root / "library"), path=root, families="toyfam")
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"archsim: error: {module}#toy: efficiency")
    assert "vectr" in done.stderr


def test_the_same_family_through_an_entry_point_of_an_installed_package(tmp_path: Path) -> None:
    root = package(tmp_path)
    info = root / "toyfam-1.0.dist-info"  # what installing a package with this entry point leaves on the path
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toyfam\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[archsim.families]\ntoy = toyfam\n")
    lib = str(root / "library")
    done = archsim("run", "toy-chip", "resnet50", "--lib", lib, "--mode", "train", "--json", path=root, families=None)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["mode"] == "train" and 0 < result["utilization"] <= 1
    assert result["step_time_s"] >= result["flops"] / TOY_PEAK


def test_an_unregistered_family_is_refused_in_one_line(tmp_path: Path) -> None:
    root = package(tmp_path)
    done = archsim("run", "toy-chip", "resnet50", "--lib", str(root / "library"), path=root, families=None)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("archsim: error: ")
    assert "family: unknown family 'toy' (known: tensorcore, ipu, cube, systolic, dataflow; " in done.stderr
    assert "ARCHSIM_FAMILIES" in done.stderr


def test_a_family_module_that_cannot_be_imported_is_refused_in_one_line(tmp_path: Path) -> None:
    done = archsim("run", "v100", "gemm:64x64x64", path=tmp_path, families="no_such_family_module")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        "archsim: error: ARCHSIM_FAMILIES: family module: cannot import no_such_family_module: "
        "ModuleNotFoundError: No module named 'no_such_family_module'\n"
    )


def test_the_built_in_families_are_registered_in_order() -> None:
    assert family_names()[:4] == ("tensorcore", "ipu", "cube", "systolic")


def test_register_family_refuses_what_is_not_a_definition() -> None:
    with pytest.raises(PluginError, match="takes a FamilyDefinition"):
        register_family("toy")  # type: ignore[arg-type]
    bad = FamilyDefinition("bad", dict, FamilyEfficiency, Mechanism.KERNEL_LAUNCH, lambda *a: None)  # type: ignore[arg-type]
    with pytest.raises(PluginError, match="section: must be a FamilySection subclass"):
        register_family(bad)
    wrong = FamilyDefinition("bad", ToySection, FamilyEfficiency, "warp-drive", lambda *a: None)  # type: ignore[arg-type]
    with pytest.raises(PluginError, match="dispatch: 'warp-drive' is not one of kernel-launch, superstep"):
        register_family(wrong)
    loose = FamilyDefinition("bad", ToySection, FamilyEfficiency, Mechanism.KERNEL_LAUNCH, lambda *a: None, "", {})  # type: ignore[arg-type]
    with pytest.raises(PluginError, match="defaults: must be a FamilyDefaults"):
        register_family(loose)
    unsettable = FamilyDefinition("bad", ToySection, WarpEfficiency, Mechanism.KERNEL_LAUNCH, lambda *a: None)
    with pytest.raises(PluginError, match="efficiency: warp_factor: not a field a description can set"):
        register_family(unsettable)
    assert "bad" not in family_names()


def test_an_efficiency_record_is_complete_or_refused() -> None:
    merged = Efficiency(
        compute=0.5, memory_bandwidth=0.8, vector=0.4, op_overhead="1 us", host_overhead="0 s", step_overhead="0 s"
    )
    record = FamilyEfficiency.resolve(merged, "chip")
    assert record.framework_overhead == 0.0  # a bare kernel library sets none
    assert (record.compute, record.op_overhead) == (0.5, 1e-6)
    assert FamilyEfficiency.required() == ("compute", "memory_bandwidth", "vector")
    with pytest.raises(SpecError, match=r"efficiency\.vector"):
        FamilyEfficiency.resolve(merged.model_copy(update={"vector": None}), "chip")
