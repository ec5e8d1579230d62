"""Baseline files: exact round trip, deterministic text, atomic writes, and malformed files refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsim.baseline import baseline_path
from archsim.baseline.fileio import Baseline, dump_baseline, read_baseline, write_baseline
from archsim.baseline.runs import RunRecord
from archsim.errors import SpecError, UsageError

RUN = ("v100-16gb", "resnet50", "infer", 2, "fp16", None, 1, 0.0016, 1250.0, 0.02, 123, 456, 2)
LAYERS = (
    (0, "conv1", "conv2d", "fwd", "matrix", "compute", 1e-05, 15300, 118013952, 1234),
    (1, "relu", "elementwise", "fwd", "vector", "memory", 2.5e-06, 3825, 100, 400),
)


def sample() -> Baseline:
    return Baseline(
        (
            RunRecord("v100:resnet50:mode=infer,batch=2", RUN, LAYERS),
            RunRecord("v999:resnet50:mode=infer,batch=2", error="v999: unknown chip"),
        ),
        default_set=True,
    )


def test_round_trip_and_layout(tmp_path: Path) -> None:
    path = tmp_path / "b.tsv"
    write_baseline(sample(), path)
    assert read_baseline(path) == sample()
    lines = path.read_text().splitlines()
    assert "schema_version\t1" in lines
    assert "set\tdefault" in lines
    assert lines[-4].startswith("run\tv100:resnet50:mode=infer,batch=2\tv100-16gb\tresnet50\tinfer\t2\tfp16\t\\N\t1\t")
    assert lines[-3].startswith("layer\tv100:resnet50:mode=infer,batch=2\t0\tconv1\t")
    assert lines[-1] == "error\tv999:resnet50:mode=infer,batch=2\tv999: unknown chip"


texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)


@settings(max_examples=100, deadline=None)
@given(
    name=texts,
    run=texts.filter(bool),
    time_s=st.floats(min_value=0, max_value=1e20, allow_nan=False),
    big=st.integers(min_value=0, max_value=2**63),
)
def test_any_names_and_numbers_round_trip(
    tmp_path_factory: pytest.TempPathFactory, name: str, run: str, time_s: float, big: int
) -> None:
    layer = (0, name, "k\tind", "p\\hase", "u\nnit", "b\round", time_s, big, big, big)
    baseline = Baseline((RunRecord(run, (*RUN[:-1], 1), (layer,)),))
    path = tmp_path_factory.mktemp("rt") / "b.tsv"
    write_baseline(baseline, path)
    assert read_baseline(path) == baseline


def test_same_baseline_same_bytes() -> None:
    assert dump_baseline(sample()) == dump_baseline(sample())


def test_write_is_atomic_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "folder" / "b.tsv"
    write_baseline(sample(), path)
    write_baseline(Baseline(()), path)
    assert read_baseline(path) == Baseline(())
    assert sorted(p.name for p in path.parent.iterdir()) == ["b.tsv"]


def test_unwritable_place_is_a_usage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UsageError, match="cannot write"):
        write_baseline(sample(), blocker / "b.tsv")


def test_names_and_paths(tmp_path: Path) -> None:
    assert baseline_path("default") == Path("baselines/default.tsv")
    assert baseline_path("gpu.v2") == Path("baselines/gpu.v2.tsv")
    assert baseline_path("out/x.tsv") == Path("out/x.tsv")
    assert baseline_path("x.tsv") == Path("x.tsv")
    for bad in ("", "-x", "a b", "..", "x" * 200):
        with pytest.raises(UsageError, match="NAME"):
            baseline_path(bad)


GOOD = dump_baseline(sample())


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "schema_version: missing"),
        ("# only a comment\n", "schema_version: missing"),
        ("schema_version\t2\n", "unsupported version '2'"),
        ("run\tx\n", "line 1: expected 'schema_version<TAB>1'"),
        (GOOD.replace("set\tdefault", "set\tall"), "set: expected default or explicit"),
        (GOOD + "schema_version\t1\n", "must appear once"),
        (GOOD.replace("\tfp16\t", "\tfp16\textra\t", 1), "tab-separated fields"),
        (GOOD.replace("\t0.0016\t", "\tfast\t"), "step_time_s: expected a number"),
        (GOOD.replace("\t0.0016\t", "\tnan\t"), "step_time_s: expected a finite number"),
        (GOOD.replace("\t0.0016\t", "\tinf\t"), "step_time_s: expected a finite number"),
        (GOOD.replace("\t15300\t", "\t1.5\t"), "cycles: expected an integer"),
        (GOOD.replace("\t15300\t", "\t" + "9" * 5000 + "\t"), "cycles: expected an integer"),
        (GOOD.replace("\tconv1\t", "\t\\q\t"), "unknown escape"),
        (GOOD.replace("\t\\N\t", "\t\\N\t", 1).replace("\tfp16\t", "\t\\N\t", 1), "precision: missing value"),
        (GOOD.replace("layer\tv100:resnet50:mode=infer,batch=2\t1\t", "layer\tother\t1\t"), "does not follow its run"),
        (GOOD.replace("\t1\trelu", "\t5\trelu"), "index: expected 1, got 5"),
        (GOOD.replace("\t456\t2\n", "\t456\t3\n"), "declares 3 layers, the file has 2"),
        (GOOD + GOOD.split("\n", 8)[-1], "appears twice"),
        (GOOD + "frob\tx\ty\n", "expected a run, layer or error line"),
        (GOOD + "error\tz\n", "expected a run, layer or error line"),
        (GOOD + "error\tz\tmsg\textra\n", "an error line is"),
    ],
)
def test_malformed_files_name_file_line_and_problem(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "b.tsv"
    path.write_text(text)
    with pytest.raises(SpecError, match=fragment.replace("(", r"\(").replace("<", "<")) as info:
        read_baseline(path)
    assert info.value.line().startswith(str(path))
    assert "\n" not in info.value.line()


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such baseline"):
        read_baseline(tmp_path / "absent.tsv")
    (tmp_path / "bin.tsv").write_bytes(b"\xff\xfe")
    with pytest.raises(SpecError, match="invalid UTF-8"):
        read_baseline(tmp_path / "bin.tsv")
    with pytest.raises(SpecError, match="is a directory"):
        read_baseline(tmp_path)
    big = tmp_path / "big.tsv"
    with big.open("wb") as handle:
        handle.truncate(100 * 2**20)
    with pytest.raises(SpecError, match="larger than"):
        read_baseline(big)
