"""The library's caches (:mod:`archsim.spec.cache`): what is kept, when it is thrown away, and that
nothing archsim prints depends on it."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

import archsim
from archsim.errors import LookupFailed, SpecError
from archsim.results.records import to_json
from archsim.spec import cache as cache_module
from archsim.spec import yamlio
from archsim.spec.cache import CACHE_ENV, cache_dir
from archsim.spec.library import SPEC_CLASSES, Library, builtin_roots
from tests.cli import run_cli


def _settle(path: Path, age_s: float = 60.0) -> None:
    """Date ``path`` ``age_s`` seconds back: old enough to be recorded (``SETTLE_NS``)."""
    then = time.time() - age_s
    os.utime(path, (then, then))


def _chip(folder: Path, name: str, clock: str = "1.53 GHz", age_s: float = 60.0) -> Path:
    """A copy of the V100 named ``name`` (no aliases) with ``clock``, written to ``folder``."""
    chips = next(r for r in builtin_roots() if r.name == "chips")
    data = yaml.safe_load((chips / "v100-16gb.yaml").read_text())
    data.update(name=name, aliases=[])
    data["clock"] = clock
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    _settle(path, age_s)
    return path


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache folder of this test's own."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(folder))
    return folder


def _no_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on, parsing a description's YAML or validating it fails the test: all must be cached."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"read although cached: {args[:1]}")

    monkeypatch.setattr(cache_module, "_read_header", refuse)
    monkeypatch.setattr(yamlio, "validate", refuse)


def test_cache_folder_follows_the_variable_then_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "archsim"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # ignored, as the XDG rule says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "archsim"


def test_a_second_library_reads_no_file_it_does_not_use(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lib = tmp_path / "lib"
    _chip(lib, "cached-chip")
    first = Library([lib], use_env=False).chip("cached-chip")
    (index,) = cache.glob("library-*.json")
    assert str(lib / "cached-chip.yaml") in json.loads(index.read_text())["files"]
    _no_reading(monkeypatch)
    second = Library([lib], use_env=False)
    assert second.chip("cached-chip") == first
    assert [e.name for e in second.entries("chip")] == [e.name for e in Library([lib], use_env=False).entries("chip")]


def test_a_changed_added_or_removed_file_is_seen(cache: Path, tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    path = _chip(lib, "first", clock="1.53 GHz")
    assert Library([lib], use_env=False).chip("first").clock == 1.53e9
    # the same size and the same name, another clock and another modification time
    path.write_text(path.read_text().replace("1.53 GHz", "1.38 GHz"))
    _settle(path, 30.0)
    assert Library([lib], use_env=False).chip("first").clock == 1.38e9
    # renamed inside the file
    path.write_text(path.read_text().replace("name: first", "name: other"))
    _settle(path, 20.0)
    library = Library([lib], use_env=False)
    assert library.chip("other").clock == 1.38e9
    with pytest.raises(LookupFailed):
        library.chip("first")
    _chip(lib, "added")
    assert Library([lib], use_env=False).chip("added").clock == 1.53e9
    path.unlink()
    with pytest.raises(LookupFailed):
        Library([lib], use_env=False).chip("other")


def test_a_file_changed_moments_ago_is_not_recorded(cache: Path, tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    _chip(lib, "fresh", age_s=0.0)  # a second change within the clock's granularity would go unseen
    Library([lib], use_env=False).chip("fresh")
    (index,) = cache.glob("library-*.json")
    files = json.loads(index.read_text())["files"]
    assert str(lib / "fresh.yaml") not in files
    assert str(builtin_roots()[0] / "v100-16gb.yaml") in files
    spec_files = len(list((cache / "specs").glob("*.pickle")))
    _settle(lib / "fresh.yaml")
    Library([lib], use_env=False).chip("fresh")
    assert len(list((cache / "specs").glob("*.pickle"))) == spec_files + 1


def test_a_bad_file_is_reported_on_every_run(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    bad = lib / "bad.yaml"
    bad.write_text("schema_version: 1\nkind: chip\nname: bad\n  x: [\n")
    _settle(bad)
    with pytest.raises(SpecError) as cold:
        Library([lib], use_env=False).chip("v100")
    _no_reading(monkeypatch)
    with pytest.raises(SpecError) as warm:
        Library([lib], use_env=False).chip("v100")
    assert warm.value.line() == cold.value.line()
    assert warm.value.source.endswith("bad.yaml")


def test_an_unwritable_cache_folder_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(CACHE_ENV, str(blocker / "cache"))
    library = Library(use_env=False)
    assert library.chip("v100").name == "v100-16gb"
    assert blocker.read_text() == "not a folder"


def test_a_damaged_cache_is_ignored_and_rewritten(cache: Path) -> None:
    expected = Library(use_env=False).chip("v100")
    for path in [*cache.glob("library-*.json"), *(cache / "specs").glob("*.pickle")]:
        path.write_bytes(b"\x80\x04 not what was written")
    assert Library(use_env=False).chip("v100") == expected
    (index,) = cache.glob("library-*.json")
    assert json.loads(index.read_text())["files"]


def test_another_archsim_version_does_not_read_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    stamp = cache_module._code_stamp()
    monkeypatch.setattr(archsim, "__version__", "0.0.0-other")
    assert cache_module._code_stamp() != stamp


def test_results_are_the_same_without_a_cache_cold_and_warm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outputs = []
    for folder in (tmp_path / "a-file" / "none", tmp_path / "cache", tmp_path / "cache"):
        (tmp_path / "a-file").touch()
        monkeypatch.setenv(CACHE_ENV, str(folder))
        result = archsim.simulate("v100", "resnet50", mode="train", batch=32, library=Library(use_env=False))
        outputs.append(to_json(result))
    assert outputs[0] == outputs[1] == outputs[2]


def test_every_cached_spec_equals_the_validated_one(cache: Path) -> None:
    library = Library(use_env=False)
    entries = [e for kind in sorted(library.kinds() & set(SPEC_CLASSES)) for e in library.entries(kind)]
    validated = {(e.kind, e.name): library.file_spec(e) for e in entries}  # validated, then written
    warm = Library(use_env=False)
    for e in entries:
        spec = cache_module.load_spec(e.path, e.kind)
        assert spec is not None, e.source
        assert spec == validated[(e.kind, e.name)], e.source
        assert repr(spec) == repr(validated[(e.kind, e.name)]), e.source
        assert warm.file_spec(warm.find([e.kind], e.name)) == spec


def test_list_prints_the_same_with_and_without_a_cache(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a-file").touch()
    outputs = []
    for folder in (tmp_path / "a-file" / "none", tmp_path / "cache", tmp_path / "cache"):
        monkeypatch.setenv(CACHE_ENV, str(folder))
        code, out, err = run_cli(capsys, "list")
        assert code == 0, err
        outputs.append(out)
    assert outputs[0] == outputs[1] == outputs[2]
    assert "v100-16gb" in outputs[0]


def test_a_plug_in_family_s_chip_is_not_recorded(cache: Path, tmp_path: Path) -> None:
    class ForeignSection:  # a section class whose code lies outside archsim (the cache's key covers archsim only)
        pass

    ForeignSection.__module__ = "toyfam"
    foreign = type("Spec", (), {"section": ForeignSection()})()
    builtin = Library(use_env=False).chip("v100")
    before = len(list((cache / "specs").glob("*.pickle")))
    for name, spec in (("plugin", foreign), ("own", builtin)):
        path = tmp_path / f"{name}.yaml"
        path.write_text("kind: chip\n")
        _settle(path)
        cache_module.store_spec(path, "chip", spec)
    stored = list((cache / "specs").glob("*.pickle"))
    assert len(stored) == before + 1  # the chip of a built-in family only
    assert cache_module.load_spec(tmp_path / "plugin.yaml", "chip") is None


def _distribution(folder: Path, name: str, entry_points: str) -> None:
    """What installing a package with these entry points leaves in ``folder`` (a dist-info folder)."""
    info = folder / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)


def _settle_distributions(folder: Path) -> None:
    """Date the distributions' metadata folders in ``folder`` back, as an install long ago left them."""
    for info in folder.glob("*.dist-info"):
        _settle(info)


def test_entry_points_are_scanned_again_only_when_a_distribution_comes_or_goes(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.metadata

    from archsim.spec import registry

    site = tmp_path / "site"
    points = "[archsim.cost_models]\nsoftmax = toy_models:slow\n[console_scripts]\ntoy = x:y\n"
    _distribution(site, "toy_models", points)
    _settle_distributions(site)
    monkeypatch.setattr(sys, "path", [str(site)])  # the one folder of installed distributions
    scans: list[int] = []
    scan = importlib.metadata.entry_points

    def counted() -> Any:
        scans.append(1)
        return scan()

    monkeypatch.setattr(importlib.metadata, "entry_points", counted)

    def found() -> list[tuple[str, str, str]]:
        registry.installed_entry_points.cache_clear()  # a new process
        return [(p.group, p.name, p.value) for p in registry.installed_entry_points()]

    try:
        assert found() == [("archsim.cost_models", "softmax", "toy_models:slow")]  # archsim's groups only
        assert found() == [("archsim.cost_models", "softmax", "toy_models:slow")] and len(scans) == 1
        _distribution(site, "toy_families", "[archsim.families]\ntoy = toy_families\n")  # installed since
        assert ("archsim.families", "toy", "toy_families") in found() and len(scans) == 2
        found()
        assert len(scans) == 3  # the distribution changed moments ago: not recorded yet (SETTLE_NS)
        _settle_distributions(site)
        found()
        assert found() == [
            ("archsim.cost_models", "softmax", "toy_models:slow"),
            ("archsim.families", "toy", "toy_families"),
        ]
        assert len(scans) == 4
        (site / "results.json").write_text("{}")  # not a distribution: a run's output, say
        found()
        assert len(scans) == 4
    finally:
        registry.installed_entry_points.cache_clear()
