"""``archsim baseline save|check``: unchanged code passes, a changed cost model shows as a diff, exit 1."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import archsim.baseline as baseline
from archsim.baseline import runs as baseline_runs
from archsim.cli import main
from archsim.spec.library import Library, builtin_roots
from archsim.workloads.trace import Mode

RUNS = ["v100:resnet50:batch=2", "a100:bert-base:mode=train,batch=2", "tpu-v3:gemm:2048x2048x2048"]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ARCHSIM_PATH", raising=False)
    return tmp_path


def slower_tensorcore_family(folder: Path) -> Path:
    """A user library folder whose tensorcore family reaches 10% less of the matrix peak."""
    families = next(r for r in builtin_roots() if r.name == "chips") / "families"
    data = yaml.safe_load((families / "tensorcore.yaml").read_text())
    data["efficiency"]["compute"] = round(data["efficiency"]["compute"] * 0.9, 6)
    folder.mkdir()
    (folder / "tensorcore.yaml").write_text(yaml.safe_dump(data))
    return folder


def test_unchanged_code_passes(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "baseline", "save", "gpus", *RUNS)
    assert (code, err) == (0, "")
    # 599 layers since the default stacks fuse (MXNet norm-act on the V100 and A100 runs)
    assert out == "saved 3 runs (599 layers) to baselines/gpus.tsv\n"
    code, out, err = cli(capsys, "baseline", "check", "gpus")
    assert (code, err) == (0, "")
    assert out == "baselines/gpus.tsv: 3 runs unchanged within rtol 1e-09\n"


def test_changed_efficiency_is_a_diff_naming_runs_and_layers(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(capsys, "baseline", "save", "gpus", *RUNS)[0] == 0
    lib = slower_tensorcore_family(workdir / "lib")
    code, out, err = cli(capsys, "baseline", "check", "gpus", "--lib", str(lib))
    assert code == 1, err
    assert err == ""
    assert "changed  v100:resnet50:mode=infer,batch=2" in out
    assert "changed  a100:bert-base:mode=train,batch=2" in out
    assert "tpu-v3" not in out  # another family: unchanged
    assert "[0] conv1 (conv2d fwd): time_s " in out
    assert "layers changed: " in out
    assert out.rstrip().endswith("baselines/gpus.tsv: 2 of 3 runs differ beyond rtol 1e-09")


def test_changed_model_constant_is_a_diff(
    workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli(capsys, "baseline", "save", "v100", "v100:gemm:512x512x512", "tpu-v3:gemm:512x512x512")[0] == 0
    monkeypatch.setattr("archsim.models.tensorcore.WARPS_FOR_FULL_RATE", 64)
    code, out, _ = cli(capsys, "baseline", "check", "v100", "--max-layers", "0")
    assert code == 1
    assert "changed  v100:gemm:512x512x512:mode=infer" in out
    assert "    step_time_s  " in out
    assert "      [0] " in out
    assert "[0] gemm (matmul fwd): " in out
    # the op's time is among the fields that moved (after its bound, when that moved too)
    assert re.search(r"\[0\] gemm \(matmul fwd\): (.*, )?time_s ", out)
    assert "tpu-v3" not in out


def test_max_layers_limits_the_listing(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(capsys, "baseline", "save", "one", "v100:resnet50:batch=2")[0] == 0
    lib = slower_tensorcore_family(workdir / "lib")
    out = cli(capsys, "baseline", "check", "one", "--lib", str(lib), "--max-layers", "2")[1]
    assert out.count("      [") == 2
    assert "more layers (--max-layers 0 lists all)" in out


def test_default_set_reports_added_runs_and_failures(
    workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a small default set keeps the test fast: chips in inference only, no systems
    monkeypatch.setattr(baseline_runs, "DEFAULT_MODES", {"chip": (Mode.INFER,)})
    runs = len(baseline_runs.default_runs(Library(use_env=False)))  # every chip with every model (one decoder)
    code, out, _ = cli(capsys, "baseline", "save", "default")
    assert code == 0
    assert out.startswith(f"saved {runs} runs")
    assert cli(capsys, "baseline", "check", "default")[0] == 0
    # the default set gains training runs (of three chips, to keep it short): a check reports them added
    monkeypatch.setattr(baseline_runs, "DEFAULT_MODES", {"chip": (Mode.INFER, Mode.TRAIN)})
    every = baseline_runs.default_runs
    gained = ("v100-16gb", "gc200", "tpu-v3")
    monkeypatch.setattr(  # the name `archsim baseline check` calls
        baseline,
        "default_runs",
        lambda library: [r for r in every(library) if r.mode == "infer" or r.target in gained],
    )
    added = len(baseline.default_runs(Library(use_env=False))) - runs
    assert added > len(gained)
    code, out, _ = cli(capsys, "baseline", "check", "default")
    assert code == 1
    assert "added    v100-16gb:resnet50:mode=train,batch=2 (not in the baseline)" in out
    assert f"{added} of {runs + added} runs differ" in out


def test_a_run_that_fails_now_is_reported(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chip = next(r for r in builtin_roots() if r.name == "chips") / "v100-16gb.yaml"
    mine = workdir / "mine.yaml"
    mine.write_text(chip.read_text())
    assert cli(capsys, "baseline", "save", "mine", f"{mine}:gemm:256x256x256")[0] == 0
    mine.unlink()
    code, out, _ = cli(capsys, "baseline", "check", "mine")
    assert code == 1
    assert f"failing  {mine}:gemm:256x256x256:mode=infer: {mine}: no such file" in out


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["baseline"], "the following arguments are required"),
        (["baseline", "save"], "the following arguments are required: NAME"),
        (["baseline", "save", "bad name", "v100:resnet50"], "NAME: a baseline name is"),
        (["baseline", "save", "x", "v100"], "v100: RUNS: expected TARGET:WORKLOAD"),
        (["baseline", "save", "x", "v999:resnet50"], "v999: unknown chip"),
        (["baseline", "save", "x", "v100:resnet50:batch=100000"], "--batch: batch 100000 needs"),
        (["baseline", "check", "absent"], "baselines/absent.tsv: no such baseline"),
        (["baseline", "check", "x", "--rtol", "nan"], "--rtol: expected a tolerance in [0, 1)"),
        (["baseline", "check", "x", "--rtol", "-1"], "--rtol: expected a tolerance in [0, 1)"),
        (["baseline", "check", "x", "--rtol", "lots"], "--rtol: expected a relative tolerance"),
        (["baseline", "check", "x", "--max-layers", "-3"], "--max-layers: expected a count"),
        (["baseline", "check", "x", "--lib", "/nonexistent-folder"], "/nonexistent-folder: search path: not a folder"),
        (["baseline", "frob"], "invalid choice: 'frob'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    workdir: Path, capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    code, out, err = cli(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.startswith("archsim: error: ") and err.count("\n") == 1
    assert fragment in err


def test_malformed_baseline_file_is_exit_2(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (workdir / "baselines").mkdir()
    (workdir / "baselines" / "x.tsv").write_text("schema_version\t1\nrun\tv100:resnet50\tshort\n")
    code, out, err = cli(capsys, "baseline", "check", "x")
    assert (code, out) == (2, "")
    assert err == "archsim: error: baselines/x.tsv: line 2: expected 15 tab-separated fields, got 3\n"


def test_tolerance_is_relative() -> None:
    from archsim.baseline.compare import agree

    assert agree(1.0, 1.0 + 1e-10, 1e-9)
    assert not agree(1.0, 1.0 + 1e-8, 1e-9)
    assert agree(100, 104, 0.05)
    assert agree(0.0, 0.0, 0.0)
    assert not agree("compute", "memory", 1.0)
    assert agree(None, None, 0.0)
