"""System descriptions: the built-in systems load and validate; malformed ones fail naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from archsim.errors import SpecError
from archsim.spec.library import Library
from archsim.spec.system import SystemSpec, Topology

SYSTEMS = [
    "dgx1",
    "dgx2",
    "dgx-a100",
    "dgx-h100",
    "ipu-m2000",
    "ipu-pod16",
    "ipu-pod64",
    "ipu-pod128",
    "ipu-pod256",
    "atlas-800",
    "tpu-v3-8",
    "tpu-v3-pod",
    "tpu-v4-pod",
    "tpu-v4-64",
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
    "tpu-v6e-256",
    "mi325x-8",
    "mi355x-8",
    "hgx-h800",
    "hgx-a800",
    "r750xa-a100",
    "gaudi-8",
    "trn2-48xlarge",
]
CHIPS = {
    "dgx1": 8,
    "dgx2": 16,
    "dgx-a100": 8,
    "dgx-h100": 8,
    "ipu-m2000": 4,
    "ipu-pod16": 16,
    "ipu-pod64": 64,
    "ipu-pod128": 128,
    "ipu-pod256": 256,
    "atlas-800": 8,
    "tpu-v3-8": 4,
    "tpu-v3-pod": 1024,
    "tpu-v4-pod": 4096,
    "tpu-v4-64": 64,
    "dgx-h200": 8,
    "dgx-b200": 8,
    "gb200-nvl72": 72,
    "mi300x-8": 8,
    "tpu-v5e-256": 256,
    "tpu-v5p-pod": 6144,
    "bow-pod16": 16,
    "bow-pod64": 64,
    "gaudi2-8": 8,
    "gaudi3-8": 8,
    "atlas-800t-a2": 8,
    "tpu-v6e-256": 256,
    "mi325x-8": 8,
    "mi355x-8": 8,
    "hgx-h800": 8,
    "hgx-a800": 8,
    "r750xa-a100": 4,
    "gaudi-8": 8,
    "trn2-48xlarge": 16,
}


def base() -> dict[str, Any]:
    return {
        "schema_version": 1,
        "kind": "system",
        "name": "test-system",
        "description": "a test",
        "chip": "v100",
        "levels": {"node": {"size": 4, "topology": "switch", "link": "nvswitch", "links": 6}},
        "sources": {"chip": "x", "levels.node": "y"},
    }


def load(tmp_path: Path, data: dict[str, Any]) -> SystemSpec:
    path = tmp_path / "system.yaml"
    path.write_text(yaml.safe_dump(data))
    return Library([tmp_path], use_env=False).system(str(path))


def test_every_built_in_system_is_listed(library: Library) -> None:
    assert sorted(SYSTEMS) == sorted(e.name for e in library.entries("system"))


@pytest.mark.parametrize("name", SYSTEMS)
def test_built_in_system_validates(library: Library, name: str) -> None:
    system = library.system(name)
    assert system.num_chips == CHIPS[name]
    assert system.missing_sources() == []
    for level in system.levels.values():
        library.link(level.link)


def test_a_valid_test_system_loads(tmp_path: Path) -> None:
    system = load(tmp_path, base())
    assert system.levels["node"].topology is Topology.SWITCH
    assert system.num_chips == 4


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        (lambda d: d["levels"]["node"].update(colour="red"), "levels.node.colour", "unknown field"),
        (lambda d: d.update(speed="fast"), "speed", "unknown field"),
        (
            lambda d: d["levels"]["node"].update(wraparound_multiple=4),
            "levels.node",
            "wraparound_multiple is only for torus levels",
        ),
        (lambda d: d["levels"]["node"].update(links="6 links"), "levels.node.links", "valid integer"),
        (lambda d: d["levels"]["node"].update(size=0), "levels.node.size", "greater than 0"),
        (lambda d: d["levels"]["node"].update(topology="hypercube"), "levels.node.topology", "input should be"),
        (lambda d: d["levels"]["node"].pop("links"), "levels.node", "needs links"),
        (lambda d: d["levels"]["node"].update(topology="torus", shape=[3, 3]), "levels.node", "size is 4"),
        (lambda d: d["levels"]["node"].update(topology="torus"), "levels.node", "needs shape"),
        (
            lambda d: d["levels"]["node"].update(topology="graph", links=None, connections=[[0, 4, 1]]),
            "levels.node",
            "",
        ),
        (
            lambda d: (
                d["levels"]["node"].pop("links"),
                d["levels"]["node"].update(topology="graph", connections=[[0, 9, 1]]),
            ),
            "levels.node",
            "two different members",
        ),
        (lambda d: d.update(levels={}), "levels", "at least 1"),
        (lambda d: d.update(sources={"chip": "x"}), "sources", "no source for levels.node"),
        (lambda d: d["levels"]["node"].update(link="nvlink9"), "levels.node.link", "unknown link"),
        (lambda d: d.update(chip="v999"), "chip", "unknown chip"),
        (lambda d: d.update(schema_version=2), "schema_version", "unsupported version"),
        (lambda d: d.update(collective="auto"), "", "name an algorithm"),
        (lambda d: d.update(scale_out={"link": "roce", "links": 0}), "scale_out.links", "greater than 0"),
        # the fuzz test's find: 10^8 parallel links made the collective engine build lanes for ever
        (lambda d: d["levels"]["node"].update(links=10**8), "levels.node", "more than the 1024 links allowed"),
        (lambda d: d.update(scale_out={"link": "roce", "links": 10**5}), "scale_out", "more than the 1024"),
        (
            lambda d: (
                d["levels"]["node"].pop("links"),
                d["levels"]["node"].update(topology="graph", connections=[[0, 1, 5000]]),
            ),
            "levels.node",
            "needs 1 to 1024 links",
        ),
    ],
)
def test_malformed_system_names_the_field(tmp_path: Path, change: Any, field: str, problem: str) -> None:
    data = base()
    change(data)
    data["levels"] = {n: {k: v for k, v in level.items() if v is not None} for n, level in data["levels"].items()}
    with pytest.raises(SpecError) as raised:
        load(tmp_path, data)
    assert raised.value.source.endswith("system.yaml")
    assert raised.value.field == field
    assert problem in raised.value.problem


def test_duplicate_key_in_a_system_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("schema_version: 1\nkind: system\nname: a\nname: b\n")
    with pytest.raises(SpecError, match="duplicate key"):
        Library([tmp_path], use_env=False).system(str(path))


def test_a_quantity_where_a_count_is_expected_is_refused(tmp_path: Path) -> None:
    data = base()
    data["levels"]["node"]["size"] = "8 chips"
    with pytest.raises(SpecError, match="valid integer"):
        load(tmp_path, data)


def test_levels_keep_their_file_order(tmp_path: Path) -> None:
    data = base()
    data["levels"]["rack"] = {"size": 2, "topology": "ring", "link": "roce", "links": 1}
    data["sources"]["levels.rack"] = "z"
    system = load(tmp_path, data)
    assert list(system.levels) == ["node", "rack"]
    assert system.num_chips == 8
