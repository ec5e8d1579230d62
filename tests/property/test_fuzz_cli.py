"""Fuzzing the command line: any argument list exits 0, 1 or 2, and a refusal is one line on stderr."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from archsim.cli import main

ODD = ["", "-", "--", "0", "-1", "1.5", "1e3", "nan", "x" * 300, "9" * 5000, "\u00b2", "a\tb", "/dev/null", "/", "."]
TARGETS = ["v100", "tpu-v3", "ipu-pod16", "dgx1", "nope", "chips/none.yaml", *ODD]
WORKLOADS = ["gemm:64x64x64", "gemm:2x32x32x32", "conv:1,4,8,8,4,3,3", "gemm:0x1x1", "gemm:1e3x2x2", "resnet99", *ODD]
OPTIONS: dict[str, list[str]] = {
    "--mode": ["train", "infer", "fly", *ODD],
    "--batch": ["1", "2", "99999999999", *ODD],
    "--precision": ["fp16", "bf16", "fp8", *ODD],
    "--seq-len": ["8", "4294967296", *ODD],
    "--nodes": ["1", "2", "99999", *ODD],
    "--pipeline-stages": ["1", "2", "3", *ODD],
    "--microbatches": ["1", "4", *ODD],
    "--schedule": ["1f1b", "gpipe", *ODD],
    "--collective": ["auto", "ring", "torus", *ODD],
    "--bucket-size": ["25MiB", "1 B", "1e30 B", "25", *ODD],
    "--lib": ["/nonexistent", "/dev/null", *ODD],
    "--timeline": ["t.json", "/nonexistent/t.json", *ODD],
    "--rtol": ["1e-6", "-1", "2", *ODD],
    "--max-layers": ["0", "3", *ODD],
}
FLAGS = ["--json", "--no-overlap", "--help-me", "-x"]


@st.composite
def argvs(draw: st.DrawFn) -> list[str]:
    command = draw(st.sampled_from(["run", "run", "baseline", "list", "scalesim", "export", "nothing", ""]))
    argv = [command] if command else []
    if command == "run":
        argv += [draw(st.sampled_from(TARGETS)), draw(st.sampled_from(WORKLOADS))]
    elif command == "baseline":
        action = draw(st.sampled_from(["save", "check", "frob"]))
        argv += [action, draw(st.sampled_from(["b", "b.tsv", "bad name", *ODD]))]
        if action == "save":
            # at least one run: the default set (every chip and system) is tested in test_baseline_cli
            runs = [f"{t}:{w}" for t in TARGETS[:4] for w in WORKLOADS[:3]]
            argv += draw(st.lists(st.sampled_from(runs), min_size=1, max_size=2))
    elif command in ("scalesim", "export"):
        argv += draw(st.lists(st.sampled_from(["scalesim", "gemm:8x8x8", "--out", "o.csv", *ODD]), max_size=4))
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        if draw(st.booleans()):
            option = draw(st.sampled_from(sorted(OPTIONS)))
            argv += [option, draw(st.sampled_from(OPTIONS[option]))]
        else:
            argv.append(draw(st.sampled_from(FLAGS)))
    return argv


def test_any_argument_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ARCHSIM_PATH", raising=False)
    ran = 0

    @settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(argv=argvs())
    def one(argv: list[str]) -> None:
        nonlocal ran
        ran += 1
        code = main(argv)
        out, err = capsys.readouterr()
        assert code in (0, 1, 2), (argv, code)
        if code == 2:
            assert out == ""
            assert err.startswith("archsim: error: ") and err.count("\n") == 1, (argv, err)
        else:
            assert "Traceback" not in err

    one()
    assert ran >= 300


TINY_RESNET = """schema_version: 1
kind: model
name: tiny-resnet
description: a ResNet of one bottleneck block per stage on 32x32 images (fuzzing only)
architecture: resnet
default_batch: {train: 8, infer: 8}
optimizer: sgd-momentum
resnet: {image_size: 32, in_channels: 3, stem_channels: 8, blocks: [1, 1, 1, 1], widths: [8, 8, 8, 8],
         expansion: 4, classes: 10, stride_on_3x3: true}
sources: {resnet.blocks: "test input", default_batch.train: "test input"}
"""
FILE_BATCH = 2
"""The batch the trace and Chakra files hold (built from the ONNX model at this batch)."""


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Every kind of workload source: a model description, inline products, ONNX, trace and Chakra files."""
    pytest.importorskip("onnx")
    from archsim.spec.library import Library
    from archsim.stack import planned_software, stack_options
    from archsim.workloads import build_trace, write_trace
    from archsim.workloads.chakra import write_chakra
    from archsim.workloads.trace import Mode
    from tests.onnx_models import save, small_cnn_model

    folder = tmp_path_factory.mktemp("sources")
    (folder / "lib").mkdir()
    (folder / "lib" / "tiny-resnet.yaml").write_text(TINY_RESNET, encoding="utf-8")
    onnx_file = str(save(small_cnn_model(), folder / "cnn.onnx"))
    files: dict[str, dict[tuple[str, str], str]] = {"trace": {}, "chakra": {}}
    library = Library(use_env=False)
    for target, mode in itertools.product(TARGETS, ("train", "infer")):
        # the trace the ONNX run builds: with the rewrites of the target's default stack (a file is replayed
        # as it is written, so a file built without them is another trace, e.g. without the IPU's recomputation)
        chip = library.chip(library.system(target).chip)
        stack = planned_software(library, chip, None, onnx_file)
        options = stack_options(stack, Mode(mode), chip.default_precision, None, None)
        trace = build_trace(onnx_file, library, Mode(mode), FILE_BATCH, chip.default_precision, None, options)
        name = f"cnn-{target}-{mode}"
        write_trace(trace, folder / f"{name}.yaml")
        write_chakra(trace, folder / f"{name}.et")
        files["trace"][(target, mode)] = str(folder / f"{name}.yaml")
        files["chakra"][(target, mode)] = str(folder / f"{name}.et")
    return {"lib": str(folder / "lib"), "onnx": onnx_file, **files}


TARGETS = ("dgx1", "ipu-pod16")
REBUILT = ("builtin", "onnx")
FIXED = ("trace", "chakra")
INLINE = ("gemm", "conv")


@st.composite
def run_options(draw: st.DrawFn) -> dict[str, object]:
    return {
        "target": draw(st.sampled_from(TARGETS)),
        "mode": draw(st.sampled_from(["train", "infer"])),
        "batch": draw(st.sampled_from([None, 1, 2, 4, 8, 6])),
        "microbatches": draw(st.sampled_from([None, 1, 2, 4])),
        "stages": draw(st.sampled_from([1, 2, 4])),
        "nodes": draw(st.sampled_from([None, 1, 2])),
    }


def _argv(workload: str, lib: str, options: dict[str, object]) -> list[str]:
    argv = ["run", str(options["target"]), workload, "--mode", str(options["mode"]), "--json", "--lib", lib]
    for flag, key in (("--batch", "batch"), ("--microbatches", "microbatches"), ("--nodes", "nodes")):
        if options[key] is not None:
            argv += [flag, str(options[key])]
    if options["stages"] != 1:
        argv += ["--pipeline-stages", str(options["stages"])]
    return argv


def test_batch_semantics_agree_across_workload_sources(
    sources: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """``--batch`` is per replica and ``--microbatches`` splits it, whatever the source.

    Every run either succeeds or is refused in one line. A success reports the batch asked (or the
    source's own), ``global_batch = batch x data_parallel`` and a microbatch count that divides the
    batch; sources that are rebuilt agree on all of it; a trace or Chakra file of the ONNX model's
    microbatch gives the ONNX run's batch, and its step time when the microbatch counts agree (a
    fixed-batch file defaults to one microbatch where a rebuilt source splits).
    """
    workloads = {
        "builtin": "tiny-resnet",
        "onnx": sources["onnx"],
        "gemm": "gemm:64x64x64",
        "conv": "conv:1,8,16,16,8,3,3",
    }

    @settings(max_examples=10, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(options=run_options())
    # a stack that rewrites the graph (the IPU's recomputation): the file must hold the rewritten trace
    @example(
        options={"target": "ipu-pod16", "mode": "train", "batch": 2, "microbatches": None, "stages": 1, "nodes": None}
    )
    def one(options: dict[str, Any]) -> None:
        results: dict[str, dict[str, Any]] = {}
        names = {
            **workloads,
            "trace": sources["trace"][(options["target"], options["mode"])],
            "chakra": sources["chakra"][(options["target"], options["mode"])],
        }
        for source, workload in names.items():
            code = main(_argv(workload, sources["lib"], options))
            out, err = capsys.readouterr()
            assert code in (0, 2), (source, options, err)
            if code == 2:
                assert out == "" and err.startswith("archsim: error: ") and err.count("\n") == 1, (source, err)
                continue
            result = json.loads(out)
            results[source] = result
            batch, microbatches = result["batch"], result.get("microbatches", 1)
            own = 1 if source in INLINE else FILE_BATCH if source in FIXED else None
            if options["batch"] is not None:
                assert batch == options["batch"], (source, options, batch)
            elif own is not None and options["microbatches"] in (None, 1):
                assert batch == own, (source, options, batch)
            assert result["global_batch"] == batch * result.get("data_parallel", 1), (source, result)
            assert batch % microbatches == 0, (source, options, result)
            if options["microbatches"] is not None and (options["stages"] != 1 or options["microbatches"] > 1):
                assert microbatches == options["microbatches"], (source, options, result)
        if options["batch"] is not None and all(s in results for s in REBUILT):
            keys = ("batch", "global_batch", "microbatches", "data_parallel", "num_chips")
            assert [results["builtin"].get(k) for k in keys] == [results["onnx"].get(k) for k in keys], options
        for source in FIXED:
            if source in results and "onnx" in results and options["batch"] is not None:
                assert results[source]["batch"] == results["onnx"]["batch"], (source, options)
                # the same microbatch count: the file holds exactly the microbatch the ONNX run rebuilt
                if results[source].get("microbatches") == results["onnx"].get("microbatches"):
                    onnx_step = results["onnx"]["step_time_s"]
                    assert results[source]["step_time_s"] == pytest.approx(onnx_step, rel=1e-9), (source, options)

    one()
