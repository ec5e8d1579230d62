"""Batch semantics of micro-batching and pipelining agree across workload sources (issue 20, items 1-2).

``--batch`` is the samples per data-parallel replica whatever the source; ``--microbatches M`` splits
it into ``M`` microbatches. A source that can be rebuilt (a built-in model, an ONNX model) is built
at ``batch / M``; one whose batch is fixed (a trace file, a Chakra file, an inline product) is one
microbatch only when ``--batch`` says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from archsim.api import simulate
from archsim.cli import main
from archsim.errors import UsageError
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.workloads import build_trace, write_trace
from archsim.workloads.trace import Mode

onnx = pytest.importorskip("onnx")

from tests.onnx_models import save, small_cnn_model  # noqa: E402 - after the optional-dependency skip


@pytest.fixture(scope="module")
def cnn_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save(small_cnn_model(), tmp_path_factory.mktemp("onnx") / "cnn.onnx")


@pytest.mark.parametrize(("target", "options"), [("dgx1", {"microbatches": 4}), ("ipu-pod16", {"pipeline_stages": 4})])
def test_onnx_batch_is_split_not_multiplied(
    cnn_file: Path, library: Library, target: str, options: dict[str, int]
) -> None:
    onnx_run = simulate(target, str(cnn_file), mode="train", batch=8, library=library, **options)
    assert onnx_run.batch == 8
    assert onnx_run.global_batch == 8 * onnx_run.data_parallel


def test_onnx_and_builtin_report_the_same_batches(library: Library, tmp_path: Path) -> None:
    from tests.onnx_models import resnet50_model

    path = save(resnet50_model(), tmp_path / "r50.onnx")
    imported = simulate("dgx1", str(path), mode="train", batch=8, microbatches=4, library=library)
    builtin = simulate("dgx1", "resnet50", mode="train", batch=8, microbatches=4, library=library)
    assert (imported.batch, imported.global_batch, imported.microbatches) == (8, 64, 4)
    assert (builtin.batch, builtin.global_batch, builtin.microbatches) == (8, 64, 4)


def test_a_trace_file_is_one_microbatch_only_when_the_batch_says_so(
    cnn_file: Path, library: Library, tmp_path: Path
) -> None:
    trace = build_trace(str(cnn_file), library, Mode.TRAIN, 2, Precision.FP16, None)
    path = tmp_path / "cnn-b2.yaml"
    write_trace(trace, path)
    run = simulate("dgx1", str(path), mode="train", batch=8, microbatches=4, library=library)
    assert (run.batch, run.microbatches) == (8, 4)
    with pytest.raises(UsageError, match="--batch 8") as err:
        simulate("dgx1", str(path), mode="train", microbatches=4, library=library)
    assert "fixed batch of 2" in str(err.value)
    with pytest.raises(UsageError, match="fixed batch of 2"):
        simulate("dgx1", str(path), mode="train", batch=6, microbatches=4, library=library)
    # with pipeline stages and no --microbatches, a fixed batch is one microbatch: the batch it holds
    staged = simulate("ipu-pod16", str(path), mode="train", pipeline_stages=2, library=library)
    assert (staged.batch, staged.microbatches) == (2, 1)


def test_too_many_stages_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "dgx1", "gemm:64x64x64", "--mode", "train", "--pipeline-stages", "2"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "--pipeline-stages: 2 stages but the trace has 1 forward op: at most 1" in err


def test_a_sweep_records_too_many_stages_as_one_refused_row(tmp_path: Path) -> None:
    import yaml

    from archsim.sweep import run_sweep

    spec = tmp_path / "stages.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "schema_version": 1,
                "kind": "sweep",
                "name": "stages",
                "target": "dgx1",
                "workloads": ["gemm:64x64x64"],
                "settings": {"mode": "train"},
                "grid": {"run.pipeline_stages": [1, 2]},
            }
        )
    )
    table = run_sweep(str(spec), tmp_path / "out", jobs=1, progress=False)
    assert len(table) == 2
    assert table["error"].isna().tolist() == [True, False]
    assert "at most 1" in table["error"].iloc[1]
