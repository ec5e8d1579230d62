"""Run texts of baselines: parsing, the canonical form, and the default set."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsim.baseline.runs import DEFAULT_BATCH, RunSpec, default_runs, parse_run, parse_runs
from archsim.errors import UsageError
from archsim.spec.common import is_shape
from archsim.spec.library import Library
from tests.cli import run_cli


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("v100:resnet50", RunSpec("v100", "resnet50")),
        ("v100:resnet50:batch=8", RunSpec("v100", "resnet50", batch=8)),
        (
            "a100:bert-base:mode=train,batch=8,seq_len=128,precision=bf16",
            RunSpec("a100", "bert-base", "train", 8, "bf16", 128),
        ),
        ("tpu-v3:gemm:2048x2048x2048", RunSpec("tpu-v3", "gemm:2048x2048x2048")),
        ("tpu-v3:gemm:2x64x64x64:mode=train", RunSpec("tpu-v3", "gemm:2x64x64x64", "train")),
        ("v100:conv:16,64,56,56,256,1,1", RunSpec("v100", "conv:16,64,56,56,256,1,1")),
        ("chips/my.yaml:traces/t.yaml:seq-len=64", RunSpec("chips/my.yaml", "traces/t.yaml", seq_len=64)),
        ("v100:resnet50:fusion=norm-act", RunSpec("v100", "resnet50", fusion="norm-act")),
        ("v100:resnet50:mode=train,recompute=true", RunSpec("v100", "resnet50", "train", recompute=True)),
        # explicit since software stacks: none and false override what the stack does
        ("v100:resnet50:fusion=none,recompute=false", RunSpec("v100", "resnet50", fusion="none", recompute=False)),
        ("a100:resnet50:software=tensorrt", RunSpec("a100", "resnet50", software="tensorrt")),
        (
            "ipu-m2000:bert-base:mode=train,streaming_memory=optimizer-state",
            RunSpec("ipu-m2000", "bert-base", "train", streaming_memory="optimizer-state"),
        ),
        ("gc200:resnet50:streaming-memory=none", RunSpec("gc200", "resnet50")),
    ],
)
def test_parse(text: str, expected: RunSpec) -> None:
    assert parse_run(text) == expected
    assert parse_run(expected.id) == expected


def test_canonical_text_gives_mode_then_the_options_set() -> None:
    assert RunSpec("a100", "bert-base", "train", 8, None, 128).id == "a100:bert-base:mode=train,batch=8,seq_len=128"
    assert RunSpec("v100", "gemm:8x8x8").id == "v100:gemm:8x8x8:mode=infer"
    spec = RunSpec("v100", "resnet50", "train", 8, fusion="norm-act", recompute=True)
    assert spec.id == "v100:resnet50:mode=train,batch=8,fusion=norm-act,recompute=true"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("v100", "expected TARGET:WORKLOAD"),
        (":resnet50", "expected TARGET:WORKLOAD"),
        ("v100:", "expected TARGET:WORKLOAD"),
        ("v100:resnet50:size=3", "unknown option 'size=3'"),
        ("v100:resnet50:batch=0", "batch: expected a positive integer"),
        ("v100:resnet50:batch=-2", "batch: expected a positive integer"),
        ("v100:resnet50:batch=\u00b2", "batch: expected a positive integer"),
        ("v100:resnet50:batch=" + "9" * 5000, "batch: expected a positive integer"),
        ("v100:resnet50:batch=99999999999", "batch: expected a positive integer"),
        ("v100:resnet50:mode=fly", "mode: 'fly' is not one of"),
        ("v100:resnet50:precision=fp6", "precision: 'fp6' is not one of"),
        ("v100:resnet50:batch=2,batch=3", "batch: given twice"),
        ("v100::batch=2", "the workload is missing"),
        ("v100:resnet50:fusion=all", "fusion: 'all' is not one of none, norm-act"),
        ("v100:resnet50:recompute=yes", "recompute: expected true or false"),
        ("gc200:resnet50:streaming_memory=some", "streaming_memory: 'some' is not one of none, optimizer-state"),
    ],
)
def test_malformed_runs_are_usage_errors(text: str, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment.replace("(", r"\(")) as info:
        parse_run(text)
    assert "\n" not in info.value.line()


def test_the_same_run_twice_is_an_error() -> None:
    with pytest.raises(UsageError, match="given twice"):
        parse_runs(["v100:resnet50", "v100:resnet50:mode=infer"])


names = st.text(st.characters(blacklist_characters=":,=", blacklist_categories=("Cs",)), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(
    target=names,
    workload=st.one_of(names.filter(lambda w: not is_shape(w.strip())), st.just("gemm:1x2x3")),  # a shape: a slice
    mode=st.sampled_from(["infer", "train"]),
    batch=st.none() | st.integers(1, 10**6),
    precision=st.none() | st.sampled_from(["fp16", "bf16", "fp32"]),
    seq_len=st.none() | st.integers(1, 4096),
)
def test_canonical_text_round_trips(
    target: str, workload: str, mode: str, batch: int | None, precision: str | None, seq_len: int | None
) -> None:
    spec = RunSpec(target.strip() or "t", workload.strip() or "w", mode, batch, precision, seq_len)
    assert parse_run(spec.id) == spec


def test_default_set_covers_every_chip_and_system(library: Library) -> None:
    runs = default_runs(library)
    chips = {e.name for e in library.entries("chip")}
    systems = {e.name for e in library.entries("system")}
    # of the decoder language models, only the first by name (gpt2) runs by default
    models = {e.name for e in library.entries("model") if library.model(e.name).architecture.value != "decoder"}
    models.add("gpt2")
    assert {r.target for r in runs} == chips | systems
    for chip in chips:
        assert {(r.workload, r.mode) for r in runs if r.target == chip} == {
            (m, mode) for m in models for mode in ("infer", "train")
        }
    for system in systems:
        assert {r.mode for r in runs if r.target == system} == {"train"}
        assert {r.workload for r in runs if r.target == system} == {"bert-base", "gpt2", "resnet50"}
    assert all(r.batch == DEFAULT_BATCH for r in runs)
    assert len({r.id for r in runs}) == len(runs)
    assert runs == default_runs(library)  # a stable order


def test_issue35_24_a_run_may_name_a_pods_slice(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    spec = parse_run("tpu-v4-pod:2x2x4:resnet50:mode=train,batch=8")
    assert spec == RunSpec("tpu-v4-pod:2x2x4", "resnet50", "train", 8)
    assert parse_run(spec.id) == spec
    assert parse_run("tpu-v4-pod:2x2x1:gemm:64x64x64") == RunSpec("tpu-v4-pod:2x2x1", "gemm:64x64x64")
    path = tmp_path / "slice.tsv"
    assert run_cli(capsys, "baseline", "save", str(path), "tpu-v4-pod:2x2x1:resnet50:mode=train")[0] == 0
    code, out, err = run_cli(capsys, "baseline", "check", str(path))
    assert (code, err) == (0, "") and "1 runs unchanged" in out
