"""Finding names: ``archsim list``, ``archsim --version``, case-insensitive names and suggestions."""

from __future__ import annotations

import pytest

from archsim import __version__
from archsim.cli import main
from archsim.errors import LookupFailed
from archsim.spec.library import Library, suggest
from tests.cli import run_cli


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"archsim {__version__}"


def test_list_shows_every_kind_on_the_search_path(capsys: pytest.CaptureFixture[str], library: Library) -> None:
    code, out, err = run_cli(capsys, "list")
    assert code == 0, err
    titles = [line[:-1] for line in out.splitlines() if not line.startswith(" ")]
    assert titles[:6] == ["chips", "systems", "workloads", "memory", "links", "sweeps"]
    names = {line.split()[0] for line in out.splitlines() if line.startswith(" ")}
    for kind in library.kinds():  # every description of every kind, whatever kinds exist
        assert {e.name for e in library.entries(kind)} <= names, kind


@pytest.mark.parametrize(
    ("kind", "present", "absent"),
    [
        ("systems", ["dgx1", "ipu-pod16", "tpu-v3-pod"], ["v100-16gb", "resnet50"]),
        ("sweeps", ["systolic-shape-sweep", "scaling-sweep"], ["dgx1"]),
        ("chips", ["v100-16gb", "gc200"], ["dgx1"]),
        ("Workloads", ["resnet50", "gemm:MxNxK"], ["v100-16gb"]),
        ("chip", ["tpu-v3"], ["nvlink2"]),  # a kind's own name works too
    ],
)
def test_list_one_kind_one_line_each(
    capsys: pytest.CaptureFixture[str], kind: str, present: list[str], absent: list[str]
) -> None:
    code, out, err = run_cli(capsys, "list", kind)
    assert code == 0, err
    lines = out.splitlines()
    assert len([line for line in lines if not line.startswith(" ")]) == 1
    names = [line.split()[0] for line in lines[1:]]
    assert len(names) == len(set(names))  # one line per description, aliases on it
    assert set(present) <= set(names)
    assert not set(absent) & set(names)


def test_list_unknown_kind_suggests(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "list", "sytems")
    assert code == 2
    assert out == ""
    assert err == "archsim: error: list: unknown kind 'sytems'; did you mean systems?\n"


def test_names_are_case_insensitive(library: Library) -> None:
    assert library.find(["chip", "system"], "V100").name == "v100-16gb"
    assert library.find(["chip", "system"], "DGX1").name == "dgx1"
    assert library.find(["model", "trace"], "ResNet50").name == "resnet50"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["run", "a100-40", "resnet50"], "a100-40: unknown chip or system; did you mean a100-40gb"),
        (["run", "v100", "resnet5"], "resnet5: unknown model or trace; did you mean resnet50"),
        (["run", "dgx-a10", "resnet50"], "did you mean dgx-a100"),
    ],
)
def test_a_typo_gets_the_closest_names(capsys: pytest.CaptureFixture[str], argv: list[str], expected: str) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.startswith("archsim: error: ")
    assert expected in err
    assert err.count("\n") == 1
    assert len(err) < 200  # a suggestion, not a dump of every name


def test_suggest_without_close_names() -> None:
    assert suggest("zz", ["a", "b"]) == "known: a, b"
    assert suggest("zz", [f"name{i}" for i in range(40)]) == "`archsim list` shows the known names"
    assert suggest("V10", ["v100", "v100-32gb", "a100"]).startswith("did you mean v100")


def test_unknown_name_error_from_python(library: Library) -> None:
    with pytest.raises(LookupFailed, match="did you mean tpu-v3"):
        library.find(["chip"], "tpu-v33")


def test_argument_errors_say_archsim_once(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "run", "v100", "resnet50", "--batch", "x")
    assert code == 2
    assert err == "archsim: error: argument --batch: expected a positive integer, got 'x'\n"


def test_list_a_usual_kind_with_no_file(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from archsim.commands import listing

    monkeypatch.setitem(listing.TITLES, "widgets", ("widget",))  # a kind no file on the search path has
    code, out, _ = run_cli(capsys, "list", "widgets")
    assert code == 0
    assert out == "widgets: none on the search path\n"
