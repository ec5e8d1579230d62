"""In-Processor Memory refusals, --streaming-memory, memory reporting and the one-chip scaling reference."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from archsim import memory_fit, plots, simulate
from archsim.baseline.runs import parse_run, record_run
from archsim.errors import CapacityError
from archsim.memory_fit import Need, batch_guess, largest_fitting, trace_needs
from archsim.spec.common import StreamingMemory
from archsim.spec.library import Library
from archsim.sweep import run_sweep
from archsim.workloads import build_trace
from archsim.workloads.trace import Mode
from tests.cli import run_cli


def refusal(**kwargs: object) -> str:
    with pytest.raises(CapacityError) as info:
        simulate(**kwargs)  # type: ignore[arg-type]
    return info.value.line()


def test_the_largest_batch_named_fits_and_the_next_does_not(library: Library) -> None:
    # without recomputation, which Poplar (the IPU's default software) does
    line = refusal(target="gc200", workload="resnet50", mode="train", batch=32, recompute=False, library=library)
    assert line.startswith("gc200: --batch: batch 32 needs 1.7 GiB, more than the chip's 897.0 MiB of In-Processor")
    match = re.search(r"the largest batch that fits is (\d+)", line)
    assert match is not None
    largest = int(match.group(1))
    fits = simulate("gc200", "resnet50", mode="train", batch=largest, recompute=False, library=library)
    assert fits.streaming_memory_bytes == 0 and fits.memory_bytes <= fits.memory_capacity_bytes
    with pytest.raises(CapacityError):
        simulate("gc200", "resnet50", mode="train", batch=largest + 1, recompute=False, library=library)


def test_every_option_the_refusal_names_makes_the_batch_fit(library: Library) -> None:
    line = refusal(target="gc200", workload="resnet50", mode="train", batch=16, recompute=False, library=library)
    assert "it fits with --recompute, or --streaming-memory optimizer-state, or --streaming-memory all" in line
    recomputed = simulate("gc200", "resnet50", mode="train", batch=16, recompute=True, library=library)
    assert recomputed.streaming_memory_bytes == 0
    offloaded = simulate(
        "gc200", "resnet50", mode="train", batch=16, recompute=False, streaming_memory="optimizer-state"
    )
    # the optimizer state that does not fit beside the rest lives in streaming memory
    assert offloaded.memory_bytes == offloaded.memory_capacity_bytes and offloaded.streaming_memory_bytes > 0
    streamed = simulate(
        "gc200", "resnet50", mode="train", batch=32, recompute=False, streaming_memory="all", library=library
    )
    assert streamed.memory_technology == "ipu-in-processor-memory"
    assert streamed.memory_bytes + streamed.streaming_memory_bytes > streamed.memory_capacity_bytes
    # the cliff the option opts into: every op streams what does not fit
    assert streamed.throughput < recomputed.throughput / 10


def test_a_step_that_fits_no_batch_says_so(library: Library) -> None:
    line = refusal(target="gc200", workload="bert-large", mode="train", library=library)
    assert "not even a batch of 1 fits; it fits with --streaming-memory all" in line
    assert "more pipeline stages (--pipeline-stages, on a system) divide its weights" in line


def test_a_pipeline_stage_that_does_not_fit_names_the_largest_micro_batch(library: Library) -> None:
    line = refusal(
        target="ipu-m2000", workload="resnet50", mode="train", batch=512, microbatches=8, pipeline_stages=4,
        library=library,
    )  # fmt: skip
    match = re.search(r"--microbatches: stage \d with \d micro-batch(es)? of 64 in flight .* fits is (\d+)", line)
    assert match is not None, line
    size = int(match.group(2))
    assert 1 <= size < 64
    for micro, fits in ((size, True), (size + 1, False)):
        try:
            simulate(
                "ipu-m2000", "resnet50", mode="train", batch=micro * 8, microbatches=8, pipeline_stages=4,
                library=library,
            )  # fmt: skip
        except CapacityError:
            assert not fits
        else:
            assert fits


def test_chips_without_streaming_memory_ignore_the_option(library: Library) -> None:
    plain = simulate("v100", "resnet50", mode="train", batch=8, library=library)
    asked = simulate("v100", "resnet50", mode="train", batch=8, streaming_memory="all", library=library)
    assert asked == plain
    assert (plain.memory_technology, plain.streaming_memory_bytes) == ("hbm2", 0)
    line = refusal(target="v100", workload="resnet50", mode="train", batch=4096, library=library)
    assert "of hbm2 memory; the largest batch that fits is" in line and "--streaming-memory" not in line


def test_no_one_chip_reference_gives_a_null_scaling_efficiency(library: Library) -> None:
    result = simulate("ipu-m2000", "bert-base", mode="train", batch=4, pipeline_stages=4, seq_len=128, library=library)
    assert result.scaling_efficiency is None and result.single_chip_throughput is None
    assert result.scaling_note is not None
    assert result.scaling_note.startswith("one gc200 cannot hold bert-base at micro-batch 1: it needs")
    dgx = simulate("dgx1", "bert-base", mode="train", batch=8, pipeline_stages=4, seq_len=128, library=library)
    assert dgx.scaling_efficiency is not None and 0 < dgx.scaling_efficiency <= 1 and dgx.scaling_note is None
    page = plots.run_report(result, library)
    assert '<tr data-field="scaling_efficiency"><th>scaling efficiency</th>' in page
    assert "n/a: one gc200 cannot hold bert-base at micro-batch 1" in page


def test_cli_refuses_in_one_line_and_reports_on_chip_memory(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "run", "gc200", "resnet50", "--mode", "train", "--batch", "16", "--no-recompute")
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert err.startswith("archsim: error: gc200: --batch: batch 16 needs 1009.6 MiB")
    code, out, err = run_cli(
        capsys, "run", "gc200", "resnet50", "--mode", "train", "--batch", "32", "--no-recompute",
        "--streaming-memory", "all",
    )  # fmt: skip
    assert code == 0, err
    assert "memory        897.0 MiB used of 897.0 MiB ipu-in-processor-memory, " in out
    assert " in streaming memory\n" in out


def test_plots_and_reports_take_the_option(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = ["gc200", "resnet50", "--mode", "train", "--batch", "32"]
    code, _, err = run_cli(capsys, "plot", "breakdown", *argv, "--out", str(tmp_path / "a.html"))
    assert code == 2 and "of In-Processor Memory" in err
    code, _, err = run_cli(
        capsys, "report", "run", *argv, "--streaming-memory", "all", "--out", str(tmp_path / "b.html")
    )
    assert code == 0, err
    assert "ipu-in-processor-memory" in (tmp_path / "b.html").read_text()


def test_cli_json_and_summary_of_a_null_scaling(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "ipu-m2000", "bert-base", "--mode", "train", "--batch", "4", "--pipeline-stages", "4"]
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["scaling_efficiency"] is None and data["single_chip_throughput"] is None
    assert data["scaling_note"].startswith("one gc200 cannot hold bert-base")
    assert data["memory_technology"] == "ipu-in-processor-memory"
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    assert "\nscaling       n/a: one gc200 cannot hold bert-base at micro-batch 1" in out


def test_a_sweep_axis_asks_for_streaming_memory(tmp_path: Path) -> None:
    spec = {
        "schema_version": 1,
        "kind": "sweep",
        "name": "streaming",
        "target": ["gc200", "v100"],
        "workloads": ["resnet50"],
        "settings": {"mode": "train", "batch": 16, "recompute": False},
        "grid": {"run.streaming_memory": ["none", "optimizer-state"]},
    }
    path = tmp_path / "streaming.yaml"
    path.write_text(yaml.safe_dump(spec))
    table: pd.DataFrame = run_sweep(str(path), tmp_path / "out", jobs=1, progress=False)
    rows = table.set_index(["target", "run.streaming_memory"])
    assert "of In-Processor Memory" in rows.loc[("gc200", "none"), "error"]
    assert pd.isna(rows.loc[("gc200", "optimizer-state"), "error"])
    assert rows.loc[("gc200", "optimizer-state"), "streaming_memory_bytes"] > 0
    assert rows.loc[("v100", "none"), "throughput"] == rows.loc[("v100", "optimizer-state"), "throughput"]


@given(limit=st.integers(min_value=0, max_value=300), below=st.integers(min_value=1, max_value=300))
def test_largest_fitting_is_the_largest_batch_below_that_fits(limit: int, below: int) -> None:
    expected = max([b for b in range(1, below) if b <= limit], default=0)
    assert largest_fitting(lambda b: b <= limit, below) == expected


@given(
    limit=st.integers(min_value=0, max_value=300),
    below=st.integers(min_value=1, max_value=300),
    guess=st.integers(min_value=-5, max_value=400),
)
def test_a_guess_changes_the_calls_never_the_answer(limit: int, below: int, guess: int) -> None:
    asked: list[int] = []

    def fits(batch: int) -> bool:
        asked.append(batch)
        return batch <= limit

    expected = max([b for b in range(1, below) if b <= limit], default=0)
    assert largest_fitting(fits, below, guess) == expected
    assert all(1 <= b < below for b in asked)  # never a batch outside the range asked about
    if 1 < guess < below and expected in (guess, guess - 1) and expected > 1:
        assert len(asked) <= 3  # batch 1, then the guess and its neighbour


def test_the_guess_from_two_builds_is_close_to_the_largest_batch(library: Library) -> None:
    """Batch 1 and the asked batch predict the largest that fits within 5% (ResNet-50 training on a V100)."""
    chip = library.chip("v100")

    def needs(batch: int) -> list[Need]:
        return trace_needs(build_trace("resnet50", library, Mode.TRAIN, batch, chip.default_precision, None))

    def fits_batch(batch: int) -> bool:
        return all(memory_fit.fits(chip, StreamingMemory.NONE, n.bytes, n.update_only) for n in needs(batch))

    guess = batch_guess(chip, StreamingMemory.NONE, needs(1), needs(4096), 4096)
    largest = largest_fitting(fits_batch, 4096)
    assert guess is not None and largest > 100
    assert abs(guess - largest) <= 0.05 * largest


def test_a_baseline_run_asks_for_streaming_memory(library: Library) -> None:
    plain = record_run(parse_run("gc200:resnet50:mode=train,batch=16,recompute=false"), library, keep_errors=True)
    assert plain.error is not None and "of In-Processor Memory" in plain.error
    streamed = record_run(
        parse_run("gc200:resnet50:mode=train,batch=16,recompute=false,streaming_memory=all"), library, False
    )
    assert streamed.error is None and streamed.values
