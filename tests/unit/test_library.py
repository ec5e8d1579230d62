"""The built-in description library: every file loads, every number cites a source, names are unique."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from archsim.cli import main
from archsim.errors import SpecError
from archsim.spec.library import Library, builtin_roots, display_path
from archsim.spec.registry import family_names
from archsim.spec.yamlio import read_yaml

LIBRARY_FOLDERS = ("chips", "memory", "interconnect")

NOT_DATA = frozenset(
    {
        "name",
        "kind",
        "description",
        "aliases",
        "schema_version",
        "family",
        "default_precision",
        "dataflow",
        "technology",
        "sources",
    }
)
"""Keys whose values are identifiers or prose, not published numbers, at any depth."""

NUMBER_LIKE = re.compile(r"^\s*[-+]?(\d|\.\d)")
"""A quantity string ("900 GB/s") or a shape ("16x16x16") starts with a digit."""

REQUIRED_CHIPS = (
    "v100-16gb",
    "v100-32gb",
    "a100-40gb",
    "a100-80gb",
    "h100",
    "gc2",
    "gc200",
    "ascend910",
    "tpu-v2",
    "tpu-v3",
    "tpu-v4",
    "systolic-32x32",
)
REQUIRED_ALIASES = {"v100": "v100-16gb", "a100": "a100-80gb", "ipu": "gc200"}
REQUIRED_MEMORIES = ("hbm2", "hbm2e", "hbm3", "ipu-in-processor-memory", "ipu-streaming-ddr4", "sram")
REQUIRED_LINKS = (
    "nvlink2",
    "nvlink3",
    "nvlink4",
    "nvswitch",
    "ipu-link",
    "gw-link",
    "hccs",
    "roce",
    "pcie3",
    "pcie4",
    "pcie5",
    "tpu-ici-v2",
    "tpu-ici-v3",
    "tpu-ici-v4",
)


def library_files() -> list[Path]:
    """Every YAML file of the built-in chip, memory and interconnect folders."""
    roots = [r for r in builtin_roots() if r.name in LIBRARY_FOLDERS]
    return sorted(path for root in roots for path in root.rglob("*.yaml"))


FILES = library_files()


def file_id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def leaves(data: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, value) of every leaf of a mapping, skipping the keys in NOT_DATA."""
    if isinstance(data, dict):
        for key, value in data.items():
            if str(key) in NOT_DATA:
                continue
            yield from leaves(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from leaves(value, f"{prefix}[{index}]")
    else:
        yield prefix, data


def field_paths(data: Any, prefix: str = "") -> Iterator[str]:
    """The dotted path of every mapping entry, inner ones included (``memory``, ``memory.main``, ...)."""
    if isinstance(data, dict):
        for key, value in data.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            yield path
            yield from field_paths(value, path)


def is_published_number(value: Any) -> bool:
    """A number, or a string holding one with its unit; booleans are switches, not numbers."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    return isinstance(value, str) and NUMBER_LIKE.match(value) is not None


def covered(path: str, keys: set[str]) -> bool:
    """True if a sources key equals ``path`` or is a dotted prefix of it."""
    parts = path.split(".")
    return any(".".join(parts[:n]) in keys for n in range(1, len(parts) + 1))


def test_library_is_not_empty() -> None:
    folders = {path.parent.name for path in FILES}
    assert {"chips", "families", "memory", "interconnect"} <= folders


@pytest.mark.parametrize("path", FILES, ids=file_id)
def test_file_loads(library: Library, path: Path) -> None:
    data = read_yaml(path)
    kind, name = data["kind"], data["name"]
    assert name == path.stem, "a description's name is its file name"
    if kind == "chip":
        chip = library.chip(name)
        assert library.find(["chip"], name).path == path, "another chip file shadows this name"
        assert library.chip(str(path)) == chip
    elif kind == "family":
        spec = library.family(name)
        assert library.find(["family"], name).path == path
        assert spec.name == name
    elif kind == "memory":
        library.memory(name)
        assert library.find(["memory"], name).path == path
    elif kind == "link":
        library.link(name)
        assert library.find(["link"], name).path == path
    elif kind == "system":
        library.system(name)
        assert library.find(["system"], name).path == path
    else:
        pytest.fail(f"{file_id(path)}: unexpected kind {kind!r} in a library folder")


@pytest.mark.parametrize("path", FILES, ids=file_id)
def test_every_number_has_a_source(path: Path) -> None:
    data = read_yaml(path)
    sources = data.get("sources")
    assert isinstance(sources, dict) and sources, "sources: a non-empty mapping is required"
    keys = {str(k) for k in sources}
    missing = [p for p, value in leaves(data) if is_published_number(value) and not covered(p, keys)]
    assert not missing, f"no sources entry for {', '.join(missing)}"


@pytest.mark.parametrize("path", FILES, ids=file_id)
def test_every_source_names_a_field(path: Path) -> None:
    data = read_yaml(path)
    described = {key: value for key, value in data.items() if key != "sources"}
    fields = set(field_paths(described))
    stray = [k for k in data["sources"] if k not in fields]
    assert not stray, f"sources entries that name no field: {', '.join(map(str, stray))}"
    empty = [k for k, text in data["sources"].items() if not (isinstance(text, str) and text.strip())]
    assert not empty, f"sources entries without text: {', '.join(map(str, empty))}"


def test_chip_names_and_aliases_are_unique(library: Library) -> None:
    seen: dict[str, str] = {}
    for entry in library.entries("chip"):
        for name in (entry.name, *entry.aliases):
            assert name not in seen, f"{name!r} names both {seen[name]} and {entry.path}"
            seen[name] = str(entry.path)


@pytest.mark.parametrize("name", REQUIRED_CHIPS)
def test_required_chip_exists(library: Library, name: str) -> None:
    assert library.chip(name).name == name


@pytest.mark.parametrize(("alias", "name"), sorted(REQUIRED_ALIASES.items()))
def test_required_alias_exists(library: Library, alias: str, name: str) -> None:
    assert library.chip(alias).name == name


@pytest.mark.parametrize("name", REQUIRED_MEMORIES)
def test_required_memory_exists(library: Library, name: str) -> None:
    assert library.memory(name).name == name


@pytest.mark.parametrize("name", REQUIRED_LINKS)
def test_required_link_exists(library: Library, name: str) -> None:
    assert library.link(name).name == name


@pytest.mark.parametrize("family", family_names())
def test_every_family_has_a_file(library: Library, family: str) -> None:
    assert library.family(family).name == family


def test_coverage_rule_sees_nested_numbers() -> None:
    data = {
        "name": "x",
        "clock": "1 GHz",
        "memory": {"main": {"technology": "hbm2", "capacity": "16 GiB", "stacks": 4}},
        "tensorcore": {"mma_shape": "4x4x4", "tensor_fma_per_clock": {"fp16": 64}},
        "full_duplex": True,
    }
    numbers = {p for p, v in leaves(data) if is_published_number(v)}
    assert numbers == {
        "clock",
        "memory.main.capacity",
        "memory.main.stacks",
        "tensorcore.mma_shape",
        "tensorcore.tensor_fma_per_clock.fp16",
    }
    assert covered("tensorcore.tensor_fma_per_clock.fp16", {"tensorcore.tensor_fma_per_clock"})
    assert covered("efficiency.compute", {"efficiency"})
    assert not covered("memory.main.capacity", {"memory.main.cap"})


def test_messages_name_builtin_files_from_the_library(library: Library) -> None:
    chips = next(r for r in builtin_roots() if r.name == "chips")
    assert display_path(chips / "v100-16gb.yaml") == "chips/v100-16gb.yaml"
    assert library.find(["chip"], "v100").source == "chips/v100-16gb.yaml"
    assert display_path(Path("mine/chip.yaml")) == "mine/chip.yaml"  # as given


def test_a_variant_refused_in_a_sweep_names_the_library_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "schema_version: 1\nkind: sweep\nname: s\ntarget: v100\nworkloads: [resnet50]\n"
        'grid: {chip.memory.main.bandwidth: ["9 TB/s"]}\n'
    )
    monkeypatch.chdir("/")  # no working directory to be relative to
    assert main(["sweep", str(spec), "--out", str(tmp_path / "out"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"{spec}: chip.memory.main.bandwidth=9 TB/s: chips/v100-16gb.yaml: memory.main.bandwidth: " in err
    assert str(builtin_roots()[0]) not in err


def test_messages_name_files_under_the_working_directory_from_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "bad.yaml").write_text("schema_version: 1\nkind: chip\nname: bad\n  x: [\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError) as info:
        Library([tmp_path / "lib"], use_env=False).chip("v100")
    assert info.value.source == "lib/bad.yaml"
