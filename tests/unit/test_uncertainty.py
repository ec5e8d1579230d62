"""Error bars: every result's uncertainty and extrapolation, the error table behind them, and validate's groups."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from archsim import simulate
from archsim.cli import main
from archsim.commands import validate as validate_command
from archsim.commands.validate import group_errors
from archsim.errors import SpecError
from archsim.results.table import summary_lines
from archsim.spec.library import Library
from archsim.spec.uncertainty import ANY
from archsim.sweep.worker import result_columns
from archsim.uncertainty import error_table
from archsim.validation import ValidationReport, validate
from archsim.validation.crossval import Plan, RowErrors, grouped
from archsim.validation.run import prepare
from tests.unit.test_validation import ROW, table


def entry(library: Library, family: str, software: str, level: str) -> float:
    found = error_table(library)
    assert found is not None
    (match,) = [e for e in found.errors if (e.family, e.software, e.level) == (family, software, level)]
    return float(match.cross_validated)


def test_a_calibrated_run_carries_its_groups_cross_validated_error(library: Library) -> None:
    result = simulate("tpu-v3-8", "resnet50", mode="train", batch=256, precision="bf16", library=library)
    assert result.uncertainty == entry(library, "systolic", "tpu-xla", "system")
    assert result.extrapolation == ()
    kernel = simulate("v100", "gemm:1024x1024x1024", library=library)
    assert kernel.software is not None
    assert kernel.uncertainty == entry(library, "tensorcore", kernel.software, "operator")


@pytest.mark.parametrize(
    ("target", "workload", "arguments", "outside"),
    [
        ("tpu-v2", "resnet50", {"mode": "train", "batch": 128}, ("chip",)),
        ("a100", "resnet50", {"mode": "train", "batch": 256, "software": "tensorflow"}, ("software",)),
        ("v100-32gb", "bert-large", {"mode": "train", "batch": 8, "seq_len": 384}, ("workload shape",)),
        ("gc200", "resnet50", {"mode": "train", "batch": 4}, ("workload shape",)),
        ("tpu-v3-pod", "resnet50", {"mode": "train", "batch": 8}, ("workload shape", "scale")),
    ],
)
def test_extrapolation_names_what_the_calibration_does_not_cover(
    library: Library, target: str, workload: str, arguments: dict[str, object], outside: tuple[str, ...]
) -> None:
    result = simulate(target, workload, library=library, **arguments)  # type: ignore[arg-type]
    assert result.extrapolation == outside
    assert result.uncertainty is not None and 0.0 < result.uncertainty < 1.0


def test_error_bars_in_the_summary_json_and_sweep_columns(library: Library, capsys: pytest.CaptureFixture[str]) -> None:
    result = simulate("tpu-v2", "resnet50", mode="train", batch=128, library=library)
    assert result.uncertainty is not None
    line = next(x for x in summary_lines(result) if x.startswith("error bar"))
    assert f"+/-{100 * result.uncertainty:.1f}%" in line and "outside the calibration: chip" in line
    columns = result_columns(result)
    assert columns["uncertainty"] == result.uncertainty and columns["extrapolation"] == "chip"
    assert main(["run", "tpu-v2", "resnet50", "--mode", "train", "--batch", "128", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["uncertainty"] == result.uncertainty and out["extrapolation"] == ["chip"]


def test_the_error_table_is_current(library: Library) -> None:
    # the in-sample errors the calibration script wrote are those validate measures today: a change
    # to a parameter, a row or a cost model without `scripts/calibrate.py --uncertainty` fails here
    found = error_table(library)
    assert found is not None
    live = {(g["family"], g["software"], g["level"]): g for g in group_errors(validate(library), library)}
    for e in found.errors:
        assert live[(e.family, e.software, e.level)]["in_sample"] == pytest.approx(e.in_sample, rel=0.01, abs=1e-3)
        assert live[(e.family, e.software, e.level)]["rows"] == e.rows
        assert 0.0 <= e.in_sample < 1.0 and 0.0 <= e.cross_validated < 1.0
    families = {key[0] for key in live}
    assert {e.family for e in found.errors} == families == {"tensorcore", "ipu", "cube", "systolic"}
    assert all((family, ANY, ANY) in live for family in families)


def test_validate_prints_in_sample_and_cross_validated_per_family_software_and_level(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    reports: list[ValidationReport] = []

    def recorded(*args: Any, **kwargs: Any) -> ValidationReport:
        reports.append(validate(*args, **kwargs))
        return reports[-1]

    monkeypatch.setattr(validate_command, "validate", recorded)
    assert main(["validate"]) == 0
    text = capsys.readouterr().out
    assert "family      software         level     rows  in-sample  cross-validated" in text
    # the JSON of the same report (its rows are predicted once, not twice); the command groups it again
    monkeypatch.setattr(validate_command, "validate", lambda *args, **kwargs: reports[0])
    assert main(["validate", "--json"]) == 0
    assert len(reports) == 1
    groups = json.loads(capsys.readouterr().out)["groups"]
    held = {(g["family"], g["software"], g["level"]): g["cross_validated"] for g in groups}
    assert held[("tensorcore", "nccl", "operator")] is None  # a collective row: fitted exactly, not cross-validated
    assert all(v is not None for k, v in held.items() if k[1] != "nccl")


def test_grouped_means_per_software_level_and_family(library: Library) -> None:
    spec = library.validation("published")
    gemm, conv = (prepare(r, library) for r in spec.rows if r.id.startswith("deepbench-gemm-fp16-1760x1"))
    out = grouped([RowErrors(gemm, "cublas", 0.1, 0.2), RowErrors(conv, "cublas", 0.3, 0.4)])
    keys = {(o["family"], o["software"], o["level"]): o for o in out}
    assert keys[("tensorcore", "cublas", "operator")]["in_sample"] == pytest.approx(0.2)
    assert keys[("tensorcore", ANY, ANY)]["cross_validated"] == pytest.approx(0.3)
    assert Plan(gemm.family, ("compute",), {"cublas": ("per_op",)}).count == 2


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"metric": "busbw", "unit": "GB/s", "phase": None}, "mode is required, except in busbw rows"),
        ({"metric": "busbw", "unit": "GB/s", "phase": None, "mode": None}, "bytes .the message size. is required"),
        ({"bytes": 1024}, "bytes .the message size. is required"),
    ],
)
def test_busbw_rows_are_checked(tmp_path: Path, library: Library, change: dict[str, object], fragment: str) -> None:
    with pytest.raises(SpecError, match=fragment):
        validate(library, str(table(tmp_path, [{**ROW, **change}])))


def test_a_busbw_row_is_what_archsim_collective_answers(
    tmp_path: Path, library: Library, capsys: pytest.CaptureFixture[str]
) -> None:
    row = {**ROW, "target": "dgx-a100", "workload": "all-reduce", "bytes": 1 << 30, "metric": "busbw"}
    row |= {"unit": "GB/s", "phase": None, "mode": None, "software": "nccl", "published": 229.04}
    path = table(tmp_path, [row])
    data = yaml.safe_load(path.read_text())
    data["tolerance"]["operator"] = 0.1
    path.write_text(yaml.safe_dump(data))
    (result,) = validate(library, str(path)).rows
    assert main(["collective", "dgx-a100", "all-reduce", "1GiB", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert result.predicted == pytest.approx(answer["busbw_bytes_per_s"] / 1e9)
    assert result.software == "nccl" and result.within_tolerance


def test_held_out_errors_refit_without_the_row(library: Library) -> None:
    # leave-one-out on the two IPU rows: each is predicted with a compute fraction fitted to the other
    from archsim.validation.crossval import held_out_errors

    results = held_out_errors(library, Plan("ipu", ("compute",), {}), folds=5, max_evaluations=6)
    assert sorted(r.prepared.row.id for r in results) == [
        "ipu-pod16-bert-large-train-mlperf-s512",
        "ipu-pod16-rn50-train",
    ]
    assert all(r.software == "poplar-2.3" and r.in_sample >= 0 and r.held_out >= 0 for r in results)
    with pytest.raises(ValueError, match="cannot determine 3 parameters"):
        held_out_errors(library, Plan("ipu", ("compute", "vector", "exchange"), {}), max_evaluations=1)


def test_a_stack_left_without_rows_in_a_fold_is_held_out_at_its_prior(library: Library) -> None:
    from archsim.spec.common import Precision
    from archsim.validation.calibrate_software import _apply
    from archsim.validation.crossval import _prior

    family = library.family("cube").efficiency
    # a stack whose fp16 kernels carry a compute fraction of their own (as a fit to its rows writes it)
    stack = _apply(library.software("mindspore-1.2"), family.model_copy(update={"compute": 0.7}), ("compute.fp16",))
    assert stack.kernels.compute[Precision.FP16] == 0.7 != family.compute
    prior = _prior(stack, ("compute.fp16",), family)
    assert prior.kernels.compute[Precision.FP16] == family.compute
    costs = _prior(library.software("tpu-xla"), ("per_step",), library.family("systolic").efficiency)
    assert costs.dispatch.per_step == 0.0
