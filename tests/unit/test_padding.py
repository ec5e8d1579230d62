"""Padding left out of BERT training: each sequence at the data set's mean real tokens, or packed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from archsim import simulate, simulate_training
from archsim.cli import main
from archsim.errors import SpecError
from archsim.spec.common import Precision
from archsim.spec.library import Library, builtin_roots
from archsim.spec.software import Rewrite
from archsim.sweep import run_sweep
from archsim.workloads import build_trace
from archsim.workloads.options import TraceOptions
from archsim.workloads.padding import Unpadded, unpadded
from archsim.workloads.trace import Mode

UNPADDED = "pytorch-mlperf-21.05"
PADDED = "pytorch-21.11"  # the same dispatch costs, no rewrite
CONVERGENCE = next(root for root in builtin_roots() if root.name == "convergence")


def options(library: Library, software: str, mode: Mode) -> TraceOptions:
    from archsim.stack import stack_options

    return stack_options(library.software(software), mode, Precision.FP16, None, None)


def test_the_unpadded_stack_computes_the_data_sets_mean_tokens_at_its_length_only() -> None:
    library = Library(builtin_roots())
    bert = library.model("bert-large")
    mean = library.convergence("bert-large").dataset.mean_tokens
    assert mean == 256
    train = options(library, UNPADDED, Mode.TRAIN)
    assert unpadded(library, bert, Mode.TRAIN, 512, train) == Unpadded(256, packed=False)
    # no published mean at another length, nor for inference, nor from a stack that keeps the padding
    assert unpadded(library, bert, Mode.TRAIN, 128, train) is None
    assert unpadded(library, bert, Mode.INFER, 512, options(library, UNPADDED, Mode.INFER)) is None
    assert unpadded(library, bert, Mode.TRAIN, 512, options(library, PADDED, Mode.TRAIN)) is None
    assert unpadded(library, bert, Mode.TRAIN, 512, options(library, "poplar", Mode.TRAIN)) == Unpadded(256, True)
    built = build_trace("bert-large", library, Mode.TRAIN, 4, Precision.FP16, 512, train)
    padded = options(library, PADDED, Mode.TRAIN)
    shorter = build_trace("bert-large", library, Mode.TRAIN, 4, Precision.FP16, 256, padded)
    assert built.seq_len == 512 and built.meta["tokens_per_sequence"] == "256"
    assert built.meta["padding"] == "removed"
    assert [(o.name, o.flops, o.bytes) for o in built.ops] == [(o.name, o.flops, o.bytes) for o in shorter.ops]


def test_a_run_counts_sequences_of_the_padded_length_computed_at_the_mean() -> None:
    unpadded = simulate("a100", "bert-large", "train", 8, seq_len=512, software=UNPADDED)
    padded = simulate("a100", "bert-large", "train", 8, seq_len=512, software=PADDED)
    shorter = simulate("a100", "bert-large", "train", 8, seq_len=256, software=PADDED)
    assert (unpadded.seq_len, unpadded.tokens_per_sequence) == (512, 256)
    assert (padded.tokens_per_sequence, shorter.tokens_per_sequence) == (None, None)
    # the same ops and dispatch as the padded stack at the mean length
    assert unpadded.step_time_s == pytest.approx(shorter.step_time_s, rel=1e-12)
    assert unpadded.flops < 0.6 * padded.flops
    assert unpadded.throughput == pytest.approx(shorter.throughput, rel=1e-12)
    assert unpadded.throughput > padded.throughput
    assert unpadded.energy_per_token_j == pytest.approx(unpadded.energy_per_sample_j / 256)


def test_cli_says_what_was_computed_and_time_to_train_holds_at_the_padded_length(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["run", "a100", "bert-large", "--mode", "train", "--batch", "8", "--seq-len", "512"]
    assert main([*argv, "--software", "pytorch-mlperf", "--time-to-train"]) == 0
    out = capsys.readouterr().out
    assert "seq_len 512 (256 tokens computed per sequence: padding removed)" in out
    assert "time to train" in out
    assert main([*argv, "--software", UNPADDED, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["seq_len"], record["tokens_per_sequence"]) == (512, 256)
    assert main([*argv, "--software", PADDED, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tokens_per_sequence"] is None


def bert_sweep(tmp_path: Path, software: str, grid: dict[str, list[str]]) -> str:
    """A sweep file of BERT-Large training at 512 on an A100, run by ``software`` over ``grid``."""
    spec = {
        "schema_version": 1,
        "kind": "sweep",
        "name": "padding",
        "target": "a100",
        "workloads": [{"name": "bert-large", "mode": "train", "batch": 4, "seq_len": 512}],
        "settings": {"software": software},
        "grid": grid,
    }
    path = tmp_path / "padding.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def test_a_sweep_removes_padding_on_both_paths(tmp_path: Path) -> None:
    path = bert_sweep(tmp_path, UNPADDED, {"chip.clock": ["1410 MHz", "1200 MHz"]})
    tables = [run_sweep(path, jobs=1, progress=False, path=p) for p in ("event", "batch")]
    for table in tables:
        assert table["error"].isna().all()
        assert list(table["tokens_per_sequence"]) == [256, 256]
    assert list(tables[0]["throughput"]) == pytest.approx(list(tables[1]["throughput"]), rel=1e-9)
    shorter = simulate("a100", "bert-large", "train", 4, seq_len=256, software=PADDED)
    assert tables[0]["throughput"].iloc[0] == pytest.approx(shorter.throughput, rel=1e-12)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"mean_tokens": 513}, "mean_tokens must be at most seq_len"),
        (
            {"mean_tokens": 256, "format": "jpeg", "encoded_sample_bytes": "110 KB", "decoded_sample_bytes": "150 KB"},
            "describes a token data set",
        ),
    ],
)
def test_a_bad_mean_is_refused_naming_the_field(tmp_path: Path, change: dict[str, object], problem: str) -> None:
    source = CONVERGENCE / "bert-large.yaml"
    data = yaml.safe_load(source.read_text())
    data["name"], data["aliases"] = "bert-other", []
    data["dataset"] |= change
    (tmp_path / "bert-other.yaml").write_text(yaml.safe_dump(data))
    library = Library([tmp_path])
    with pytest.raises(SpecError, match=problem):
        library.convergence("bert-other")


def test_a_mean_needs_its_source(tmp_path: Path) -> None:
    source = CONVERGENCE / "bert-large.yaml"
    data = yaml.safe_load(source.read_text())
    data["name"], data["aliases"] = "bert-other", []
    del data["sources"]["dataset.mean_tokens"]
    (tmp_path / "bert-other.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match=r"no source for dataset\.mean_tokens"):
        Library([tmp_path]).convergence("bert-other")


def test_padding_asked_by_name_overrides_the_stack(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "a100", "bert-large", "--mode", "train", "--batch", "8", "--seq-len", "512", "--json"]
    steps = {}
    for software, padding in ((PADDED, "removed"), (UNPADDED, None), (UNPADDED, "kept"), (PADDED, None)):
        asked = [] if padding is None else ["--padding", padding]
        assert main([*argv, "--software", software, *asked]) == 0
        record = json.loads(capsys.readouterr().out)
        steps[software, padding] = (record["tokens_per_sequence"], record["step_time_s"])
    assert steps[PADDED, "removed"] == steps[UNPADDED, None]
    assert steps[UNPADDED, "kept"] == steps[PADDED, None]
    assert steps[PADDED, None][0] is None
    api = simulate("a100", "bert-large", "train", 8, seq_len=512, software=PADDED, padding="removed")
    assert (api.tokens_per_sequence, api.step_time_s) == steps[PADDED, "removed"]
    # the time to train's evaluation is an inference step: it computes what the stack does there
    trained = simulate_training("a100", "bert-large", batch=8, seq_len=512, software=PADDED, padding="removed")
    unpadded = simulate_training("a100", "bert-large", batch=8, seq_len=512, software=UNPADDED)
    assert trained.time_to_train is not None and unpadded.time_to_train is not None
    assert trained.time_to_train.time_to_train_s == unpadded.time_to_train.time_to_train_s


@pytest.mark.parametrize(
    "argv",
    [
        ["a100", "bert-large", "--mode", "infer", "--seq-len", "512"],
        ["a100", "bert-large", "--mode", "train", "--batch", "2", "--seq-len", "128"],
        ["a100", "resnet50", "--mode", "train", "--batch", "2"],
    ],
)
def test_padding_removed_where_no_mean_is_published_is_refused_in_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", *argv, "--padding", "removed"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--padding: removed: no published mean sequence length" in err[0]


def test_a_padding_axis_of_a_sweep(tmp_path: Path) -> None:
    path = bert_sweep(tmp_path, PADDED, {"run.padding": ["kept", "removed"]})
    table = run_sweep(path, jobs=1, progress=False)
    assert table["error"].isna().all()
    assert list(table["tokens_per_sequence"].fillna(0)) == [0, 256]
    kept, removed = table["throughput"]
    assert removed > kept


@pytest.mark.parametrize(("batch", "packs"), [(8, 4), (7, 4), (1, 1)])
def test_packed_sequences_fill_packs_of_the_padded_length(batch: int, packs: int) -> None:
    library = Library(builtin_roots())
    packed = options(library, PADDED, Mode.TRAIN)
    packed = TraceOptions(packed.fusion, packed.recompute, packed.rewrites | {Rewrite.PACK_SEQUENCES})
    trace = build_trace("bert-large", library, Mode.TRAIN, batch, Precision.FP16, 512, packed)
    whole = build_trace(
        "bert-large", library, Mode.TRAIN, packs, Precision.FP16, 512, options(library, PADDED, Mode.TRAIN)
    )
    assert (trace.batch, trace.seq_len) == (batch, 512)
    assert (trace.meta["padding"], trace.meta["tokens_per_sequence"]) == ("packed", "256")
    assert [(o.name, o.flops, o.bytes) for o in trace.ops] == [(o.name, o.flops, o.bytes) for o in whole.ops]


def test_a_packed_step_counts_its_sequences_and_pays_attention_over_whole_packs() -> None:
    packed = simulate("a100", "bert-large", "train", 8, seq_len=512, software=PADDED, padding="packed")
    four_packs = simulate("a100", "bert-large", "train", 4, seq_len=512, software=PADDED)
    removed = simulate("a100", "bert-large", "train", 8, seq_len=512, software=PADDED, padding="removed")
    assert (packed.padding, packed.tokens_per_sequence, packed.batch) == ("packed", 256, 8)
    assert packed.step_time_s == pytest.approx(four_packs.step_time_s, rel=1e-12)
    assert packed.throughput == pytest.approx(2 * four_packs.throughput, rel=1e-12)
    # the same tokens as removing the padding, and more attention: a pack attends over all its 512
    assert removed.flops < packed.flops < four_packs.flops * 1.0001


def test_poplar_packs_graphcores_bert_and_counts_sequences(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "ipu-pod16", "bert-large", "--mode", "train", "--seq-len", "512", "--json"]
    layout = ["--pipeline-stages", "4", "--microbatches", "8", "--streaming-memory", "optimizer-state"]
    assert main([*argv, *layout, "--batch", "16"]) == 0
    packed = json.loads(capsys.readouterr().out)
    # the same packs, one padded sequence each: half the sequences in the same step
    assert main([*argv, *layout, "--batch", "8", "--padding", "kept"]) == 0
    kept = json.loads(capsys.readouterr().out)
    assert (packed["software"], packed["padding"], kept["padding"]) == ("poplar-2.3", "packed", None)
    assert packed["step_time_s"] == pytest.approx(kept["step_time_s"], rel=1e-12)
    assert packed["throughput"] == pytest.approx(2 * kept["throughput"], rel=1e-12)


def test_a_validation_row_and_an_mlperf_row_may_name_their_padding(tmp_path: Path) -> None:
    from archsim.validation.mlperf import run_mlperf
    from archsim.validation.run import validate

    row = {
        "id": "unpadded",
        "group": "single_chip",
        "target": "a100",
        "workload": "bert-large",
        "mode": "train",
        "batch": 8,
        "seq_len": 512,
        "precision": "fp16",
        "software": PADDED,
        "padding": "removed",
        "metric": "throughput",
        "published": 100,
        "unit": "seq/s",
        "source": "made up for the test",
    }
    table = {
        "schema_version": 1,
        "kind": "validation",
        "name": "padding-rows",
        "description": "d",
        "tolerance": {"single_chip": 0.15},
        "rows": [row],
    }
    (tmp_path / "rows.yaml").write_text(yaml.safe_dump(table))
    report = validate(Library([tmp_path]), str(tmp_path / "rows.yaml"))
    removed = simulate("a100", "bert-large", "train", 8, seq_len=512, software=PADDED, padding="removed")
    assert report.rows[0].predicted == pytest.approx(removed.throughput, rel=1e-12)
    mlperf = yaml.safe_load((CONVERGENCE.parent / "validation" / "mlperf.yaml").read_text())
    nvidia = next(r for r in mlperf["rows"] if r["id"] == "nvidia-dgxa100-bert-v1.0")
    mlperf["rows"] = [nvidia | {"stack": PADDED, "padding": "removed"}, nvidia | {"id": "padded", "stack": PADDED}]
    (tmp_path / "mlperf.yaml").write_text(yaml.safe_dump(mlperf))
    outcomes = run_mlperf(Library([tmp_path]), str(tmp_path / "mlperf.yaml")).rows
    assert outcomes[0].predicted_minutes < outcomes[1].predicted_minutes / 1.8


def test_trace_export_leaves_padding_out_or_refuses_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["trace", "export", "bert-large", "--batch", "4", "--seq-len", "512", "--padding", "packed"]
    out = tmp_path / "packed.et"
    assert main([*argv, "--mode", "train", "--out", str(out)]) == 0
    assert out.exists()
    capsys.readouterr()
    refused = tmp_path / "refused.et"
    assert main([*argv, "--mode", "infer", "--out", str(refused)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--padding: packed: no published mean sequence length" in err[0]
    assert not refused.exists()


def test_the_html_report_says_how_the_padding_was_left_out() -> None:
    from archsim import plots

    library = Library(builtin_roots())
    packed = simulate("a100", "bert-large", "train", 4, seq_len=512, padding="packed", library=library)
    page = plots.run_report(packed, library)
    assert '<tr data-field="padding"><th>padding</th><td data-value="&quot;packed&quot;">packed</td></tr>' in page
    assert '<tr data-field="tokens_per_sequence"><th>real tokens per sequence</th>' in page
    kept = simulate("a100", "bert-large", "train", 4, seq_len=512, library=library)
    assert 'data-field="padding"' not in plots.run_report(kept, library)
