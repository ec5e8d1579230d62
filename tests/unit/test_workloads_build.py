"""build_trace: name, alias, path and gemm lookups, defaults, and errors that name the argument."""

from __future__ import annotations

from pathlib import Path

import pytest

from archsim.errors import LookupFailed, SpecError, UsageError
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.workloads import build_trace, write_trace
from archsim.workloads.trace import Mode

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def library() -> Library:
    return Library(use_env=False)


@pytest.mark.parametrize(
    ("workload", "mode", "batch", "seq"),
    [
        ("resnet50", Mode.TRAIN, 256, None),
        ("resnet50", Mode.INFER, 128, None),
        ("bert-base", Mode.TRAIN, 32, 128),
        ("bert-base", Mode.INFER, 8, 128),
        ("bert-large", Mode.TRAIN, 64, 128),
        ("bert-large", Mode.INFER, 8, 128),
    ],
)
def test_defaults(library: Library, workload: str, mode: Mode, batch: int, seq: int | None) -> None:
    trace = build_trace(workload, library, mode, None, Precision.FP16, None)
    assert (trace.batch, trace.seq_len, trace.mode, trace.precision) == (batch, seq, mode, Precision.FP16)
    assert trace.name == workload
    assert trace.meta["model"] == workload
    trace.check()


def test_aliases_and_paths_give_the_same_trace(library: Library) -> None:
    by_name = build_trace("resnet50", library, Mode.INFER, 4, Precision.FP16, None)
    assert build_trace("rn50", library, Mode.INFER, 4, Precision.FP16, None) == by_name
    path = str(ROOT / "workloads" / "resnet50.yaml")
    assert build_trace(path, library, Mode.INFER, 4, Precision.FP16, None) == by_name


def test_deterministic(library: Library) -> None:
    first = build_trace("bert-base", library, Mode.TRAIN, 2, Precision.BF16, 40)
    assert build_trace("bert-base", library, Mode.TRAIN, 2, Precision.BF16, 40) == first


def test_trace_file_by_path_and_by_name(library: Library, tmp_path: Path) -> None:
    trace = build_trace("bert-base", library, Mode.INFER, 2, Precision.FP16, 16)
    folder = tmp_path / "lib"
    folder.mkdir()
    path = folder / "mine.yaml"
    write_trace(trace, path)
    assert build_trace(str(path), library, Mode.INFER, None, Precision.FP16, None) == trace
    assert build_trace(str(path), library, Mode.INFER, 2, Precision.FP16, 16) == trace
    text = path.read_text(encoding="utf-8").replace('name: "bert-base"', 'name: "my-trace"')
    path.write_text(text, encoding="utf-8")
    own = Library([folder], use_env=False)
    assert build_trace("my-trace", own, Mode.INFER, None, Precision.FP16, None).ops == trace.ops


@pytest.mark.parametrize(
    ("mode", "batch", "precision", "seq", "field"),
    [
        (Mode.TRAIN, None, Precision.FP16, None, "--mode"),
        (Mode.INFER, 4, Precision.FP16, None, "--batch"),
        (Mode.INFER, None, Precision.FP32, None, "--precision"),
        (Mode.INFER, None, Precision.FP16, 32, "--seq-len"),
    ],
)
def test_trace_file_must_match_what_is_asked(
    library: Library, tmp_path: Path, mode: Mode, batch: int | None, precision: Precision, seq: int | None, field: str
) -> None:
    path = tmp_path / "t.yaml"
    write_trace(build_trace("bert-base", library, Mode.INFER, 2, Precision.FP16, 16), path)
    with pytest.raises(UsageError) as err:
        build_trace(str(path), library, mode, batch, precision, seq)
    assert err.value.field == field


def test_seq_len_errors(library: Library) -> None:
    with pytest.raises(UsageError, match="not a sequence model") as err:
        build_trace("resnet50", library, Mode.TRAIN, None, Precision.FP16, 128)
    assert err.value.field == "--seq-len"
    with pytest.raises(UsageError, match="max_position") as err:
        build_trace("bert-base", library, Mode.TRAIN, None, Precision.FP16, 513)
    assert err.value.field == "--seq-len"
    assert build_trace("bert-base", library, Mode.INFER, 1, Precision.FP16, 512).seq_len == 512


@pytest.mark.parametrize("value", [0, -3, True, 2.0])
def test_batch_and_seq_len_must_be_positive_integers(library: Library, value: object) -> None:
    with pytest.raises(UsageError) as err:
        build_trace("bert-base", library, Mode.TRAIN, value, Precision.FP16, None)  # type: ignore[arg-type]
    assert err.value.field == "--batch"
    with pytest.raises(UsageError) as err:
        build_trace("bert-base", library, Mode.TRAIN, None, Precision.FP16, value)  # type: ignore[arg-type]
    assert err.value.field == "--seq-len"


def test_mode_and_precision_strings(library: Library) -> None:
    trace = build_trace("gemm:8x8x8", library, "train", None, "bf16", None)  # type: ignore[arg-type]
    assert trace.mode is Mode.TRAIN
    assert trace.precision is Precision.BF16
    with pytest.raises(UsageError) as err:
        build_trace("gemm:8x8x8", library, "serve", None, Precision.FP16, None)  # type: ignore[arg-type]
    assert err.value.field == "--mode"
    with pytest.raises(UsageError) as err:
        build_trace("gemm:8x8x8", library, Mode.TRAIN, None, "fp4", None)  # type: ignore[arg-type]
    assert err.value.field == "--precision"


def test_unknown_names_and_files(library: Library, tmp_path: Path) -> None:
    with pytest.raises(LookupFailed, match="resnet50"):
        build_trace("resnet51", library, Mode.TRAIN, None, Precision.FP16, None)
    with pytest.raises(SpecError, match="no such file"):
        build_trace(str(tmp_path / "none.yaml"), library, Mode.TRAIN, None, Precision.FP16, None)
    chip = ROOT / "chips" / "v100-16gb.yaml"
    if chip.exists():
        with pytest.raises(SpecError, match="expected model or trace"):
            build_trace(str(chip), library, Mode.TRAIN, None, Precision.FP16, None)
    bad = tmp_path / "bad-model.yaml"
    bad.write_text((ROOT / "workloads" / "bert-base.yaml").read_text(encoding="utf-8").replace("heads: 12", "heads: 7"))
    with pytest.raises(SpecError, match="multiple of heads") as err:
        build_trace(str(bad), library, Mode.TRAIN, None, Precision.FP16, None)
    assert err.value.field == "bert"
