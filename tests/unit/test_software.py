"""Software stacks: the ``kind: software`` descriptions, their choice and their defaults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from archsim import simulate
from archsim.errors import ArchsimError
from archsim.spec.library import Library
from archsim.spec.registry import family_names
from archsim.spec.software import SoftwareSpec, mechanism
from tests.cli import run_cli

LIBRARY = Library(use_env=False)
SHIPPED = ["mxnet", "pytorch", "tensorflow", "tensorflow-xla", "tensorrt", "cublas", "poplar", "mindspore", "tpu-xla"]

STACK = """\
schema_version: 1
kind: software
name: my-stack
description: a user's stack
family: tensorcore
dispatch:
  mechanism: kernel-launch
  per_op: "5 us"
  framework: "1 us"
  host: "0 s"
  per_step: "0 s"
input_pipeline: "100 samples/s"
sources:
  dispatch: "example"
  input_pipeline: "example"
"""


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_stack_loads_with_its_family_mechanism(name: str) -> None:
    spec = LIBRARY.software(name)
    assert isinstance(spec, SoftwareSpec)
    assert spec.dispatch.mechanism is mechanism(spec.family)


def test_every_family_names_a_default_and_a_kernel_stack_of_its_own() -> None:
    for family in family_names():
        spec = LIBRARY.family(family)
        for name in (spec.software, spec.kernel_software):
            assert LIBRARY.software(name).family == family


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "stack.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (("  host:", '  host: "0 s"\n  turbo: 2\n  ignored:'), "dispatch.turbo"),
        (("mechanism: kernel-launch", "mechanism: superstep"), "dispatch.mechanism"),
        (('  input_pipeline: "example"\n', ""), "sources"),
        (('per_op: "5 us"', "per_op: 5"), "dispatch.per_op"),
        (('"100 samples/s"', '"100 GB/s"'), "input_pipeline"),
    ],
)
def test_a_bad_stack_is_one_line_naming_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: tuple[str, str], field: str
) -> None:
    path = write(tmp_path, STACK.replace(*change, 1))
    code, out, err = run_cli(capsys, "run", "v100", "gemm:64x64x64", "--software", str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"archsim: error: {path}: {field}")


def test_a_stack_of_another_family_is_refused_naming_those_that_fit(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "run", "v100", "resnet50", "--software", "poplar")
    assert code == 2 and out == ""
    assert "runs on ipu chips, not v100-16gb" in err and "mxnet-20.12" in err and err.count("\n") == 1


def test_the_default_stack_is_the_chips_and_kernels_take_the_bare_library() -> None:
    assert simulate("v100", "resnet50", batch=2, library=LIBRARY).software == "mxnet-20.12"
    assert simulate("v100", "gemm:512x512x512", library=LIBRARY).software == "cublas"
    assert simulate("gc200", "resnet50", batch=2, library=LIBRARY).software == "poplar-2.3"
    assert simulate("tpu-v3", "resnet50", batch=2, library=LIBRARY).software == "tpu-xla"
    assert simulate("ascend910", "resnet50", batch=2, library=LIBRARY).software == "mindspore-0.5"


def test_default_training_runs_as_the_validated_fused_setting() -> None:
    default = simulate("v100", "resnet50", mode="train", batch=16, library=LIBRARY)
    fused = simulate("v100", "resnet50", mode="train", batch=16, library=LIBRARY, fusion="norm-act")
    unfused = simulate("v100", "resnet50", mode="train", batch=16, library=LIBRARY, fusion="none")
    assert default.step_time_s == fused.step_time_s < unfused.step_time_s
    fp32 = simulate("v100", "resnet50", mode="train", batch=16, precision="fp32", library=LIBRARY)
    assert len(fp32.layers) == len(unfused.layers)  # MXNet fuses only in fp16


def test_the_ipu_recomputes_by_default_in_training_as_poplar_does() -> None:
    default = simulate("gc200", "resnet50", mode="train", batch=4, library=LIBRARY)
    asked = simulate("gc200", "resnet50", mode="train", batch=4, library=LIBRARY, recompute=True)
    plain = simulate("gc200", "resnet50", mode="train", batch=4, library=LIBRARY, recompute=False)
    assert default.step_time_s == asked.step_time_s
    assert default.memory_bytes < plain.memory_bytes


def test_a_user_stack_found_through_lib_sets_the_dispatch_costs(tmp_path: Path) -> None:
    write(tmp_path, STACK)
    library = Library([tmp_path], use_env=False)
    bare = simulate("v100", "gemm:256x256x256", library=library, software="cublas")
    mine = simulate("v100", "gemm:256x256x256", library=library, software="my-stack")
    assert mine.software == "my-stack"
    # one op: the kernel gap changes from cuBLAS's to 5 us, and the framework adds 1 us
    cublas = library.software("cublas").dispatch
    assert mine.layers[0].end_s - mine.layers[0].start_s == pytest.approx(
        bare.layers[0].end_s - bare.layers[0].start_s - cublas.per_op + 6e-6, rel=1e-9
    )


def test_an_unknown_stack_is_one_line_pointing_at_the_list() -> None:
    with pytest.raises(ArchsimError, match=r"unknown software; `archsim list` shows the known names"):
        simulate("v100", "resnet50", batch=2, library=LIBRARY, software="nope")


def test_run_json_names_the_software(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "run", "a100", "resnet50", "--batch", "2", "--software", "tensorrt", "--json")
    assert code == 0 and json.loads(out)["software"] == "tensorrt-8"


def test_the_input_pipeline_caps_the_rate_and_says_how_long_the_step_waited(tmp_path: Path) -> None:
    write(tmp_path, STACK)
    library = Library([tmp_path], use_env=False)
    fast = simulate("v100", "resnet50", batch=8, library=library, software="cublas")
    capped = simulate("v100", "resnet50", batch=8, library=library, software="my-stack")
    assert fast.throughput > 100.0
    assert capped.throughput == pytest.approx(100.0, rel=1e-12)
    assert capped.input_wait_s > 0.0 and fast.input_wait_s == 0.0


def test_list_software_names_every_stack(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "list", "software")
    assert code == 0 and out.startswith("software:\n")
    for name in ("mxnet-20.12", "tensorrt-8", "poplar-2.3", "tpu-xla", "cublas"):
        assert f"  {name} " in out


def test_a_stack_is_fitted_only_to_the_rows_that_run_with_it(tmp_path: Path) -> None:
    from archsim.validation.calibrate_software import fit_software, write_software

    fit = fit_software(LIBRARY, "pytorch", ["framework"], folds=1, max_evaluations=4)
    assert fit.rows == 3  # the V100 BERT-Large training row and the two A100 PyTorch rows
    assert {r.row.software for r in fit.report_after.rows} == {"pytorch"}
    with pytest.raises(ValueError, match=r"3 pytorch-21\.11 rows cannot determine 4 parameters"):
        fit_software(LIBRARY, "pytorch", ["framework", "host", "per_step", "per_op"], folds=1, max_evaluations=1)
    copy = tmp_path / "pytorch.yaml"
    copy.write_text(LIBRARY.find(["software"], "pytorch").path.read_text())
    write_software(copy, fit, "published")
    written = Library([tmp_path], use_env=False).software(str(copy))
    assert written.dispatch.framework == pytest.approx(fit.after["framework"], rel=1e-2)
    assert "fitted by scripts/calibrate.py --software pytorch-21.11" in written.sources["dispatch.framework"]


def test_a_stacks_kernel_choice_sets_the_compute_fraction(tmp_path: Path) -> None:
    slow = STACK.replace("input_pipeline:", "kernels:\n  compute: {fp16: 0.2}\ninput_pipeline:", 1)
    cited = '  input_pipeline: "example"\n  kernels.compute: "example"'
    write(tmp_path, slow.replace('  input_pipeline: "example"', cited))
    library = Library([tmp_path], use_env=False)
    bare = simulate("v100", "gemm:4096x4096x4096", library=library, software="cublas")
    mine = simulate("v100", "gemm:4096x4096x4096", library=library, software="my-stack")
    assert mine.layers[0].bound == "compute"
    assert mine.step_time_s > 3 * bare.step_time_s
