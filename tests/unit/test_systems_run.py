"""Runs on systems: every built-in system trains ResNet-50 and BERT-Large; JSON, timeline and errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from archsim import simulate
from archsim.cli import main
from archsim.errors import CapacityError
from archsim.results.records import RunResult
from archsim.run.observers import TimelineRecorder
from archsim.run.request import RunRequest
from archsim.run.runner import run as record_run
from archsim.spec.library import Library
from tests.unit.test_system_spec import SYSTEMS

WORKLOADS = [("resnet50", 2, None), ("bert-large", 1, 128)]


def check(result: RunResult, system: str) -> None:
    assert result.system == system
    assert result.num_chips > 1
    assert result.data_parallel * result.pipeline_stages == result.num_chips
    assert result.global_batch == result.batch * result.data_parallel
    assert result.throughput == pytest.approx(result.global_batch / result.step_time_s)
    assert result.scaling_efficiency is not None and 0.0 < result.scaling_efficiency <= 1.0 + 1e-9
    assert 0.0 <= result.exposed_comm_s <= result.step_time_s
    assert result.comm_s > 0.0
    assert result.links
    assert all(0.0 <= link.utilization <= link.max_utilization <= 1.0 for link in result.links)
    assert result.collectives


@pytest.mark.parametrize("system", SYSTEMS)
@pytest.mark.parametrize(("workload", "batch", "seq_len"), WORKLOADS)
def test_every_system_trains(library: Library, system: str, workload: str, batch: int, seq_len: int | None) -> None:
    refusal = None
    try:
        result = simulate(system, workload, mode="train", batch=batch, seq_len=seq_len, library=library)
    except CapacityError as err:
        refusal = err.line()
    if refusal is not None:
        # BERT-Large's weights and optimizer state alone exceed an IPU's (GC200, Bow) In-Processor
        # Memory: refused unless streaming memory is asked for (one chip per replica, data parallel)
        assert library.chip(library.system(system).chip).family == "ipu" and workload == "bert-large"
        assert "of In-Processor Memory; not even a batch of 1 fits" in refusal
        result = simulate(
            system, workload, mode="train", batch=batch, seq_len=seq_len, library=library, streaming_memory="all"
        )
    check(result, system)


def test_bert_large_over_four_ipus_as_a_pipeline(library: Library) -> None:
    # BERT-Large fits four GC200s with its optimizer state in streaming memory, as Graphcore runs it
    offload = {"streaming_memory": "optimizer-state"}
    result = simulate(
        "ipu-m2000", "bert-large", mode="train", seq_len=128, batch=8, library=library, pipeline_stages=4, **offload
    )
    assert (result.pipeline_stages, result.data_parallel, result.microbatches) == (4, 1, 8)
    assert result.schedule == "1f1b"
    assert 0.0 < result.bubble_fraction < 1.0
    assert {layer.stage for layer in result.layers} == {0, 1, 2, 3}
    kinds = [t.name.split()[0] for t in result.collectives]
    assert (kinds.count("act"), kinds.count("grad"), len(kinds)) == (3 * 8, 3 * 8, 6 * 8)  # no data parallelism
    gpipe = simulate(
        "ipu-m2000", "bert-large", mode="train", seq_len=128, batch=8, library=library, pipeline_stages=4,
        schedule="gpipe", **offload,
    )  # fmt: skip
    # GPipe keeps every microbatch's activations
    assert gpipe.memory_bytes + gpipe.streaming_memory_bytes > result.memory_bytes + result.streaming_memory_bytes


def test_pipeline_and_data_parallel_together(library: Library) -> None:
    result = simulate(
        "ipu-pod16", "bert-large", mode="train", seq_len=128, batch=4, library=library, pipeline_stages=4,
        streaming_memory="optimizer-state",
    )  # fmt: skip
    assert (result.data_parallel, result.global_batch) == (4, 16)
    assert any(c.name.startswith("all-reduce s3") for c in result.collectives)


def test_inference_on_a_system_has_no_gradient_traffic(library: Library) -> None:
    result = simulate("dgx1", "resnet50", batch=4, library=library)
    assert result.comm_s == 0.0
    assert result.scaling_efficiency == pytest.approx(1.0)


def test_scale_out_adds_a_tier(library: Library) -> None:
    one = simulate("dgx-a100", "resnet50", mode="train", batch=4, library=library)
    four = simulate("dgx-a100", "resnet50", mode="train", batch=4, library=library, nodes=4)
    assert (four.num_chips, four.nodes) == (32, 4)
    assert {link.tier for link in four.links} == {"node", "scale-out"}
    assert four.scaling_efficiency <= one.scaling_efficiency


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_json_of_a_system(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "run", "dgx1", "resnet50", "--mode", "train", "--batch", "4", "--json")
    assert code == 0, err
    data = json.loads(out)
    for key in ("num_chips", "scaling_efficiency", "comm_s", "exposed_comm_s", "links", "global_batch", "layers"):
        assert key in data
    assert data["num_chips"] == 8
    assert {"tier", "link", "direction", "utilization"} <= set(data["links"][0])


def test_cli_human_output_of_a_pipeline(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys, "run", "ipu-m2000", "bert-base", "--mode", "train", "--batch", "4", "--pipeline-stages", "2",
        "--microbatches", "4", "--schedule", "gpipe", "--collective", "ring", "--bucket-size", "8MiB", "--no-overlap",
        "--streaming-memory", "optimizer-state",
    )  # fmt: skip
    assert code == 0, err
    assert "pipeline      gpipe, 4 microbatches" in out
    assert "data parallel 2 x pipeline 2" in out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["run", "dgx9", "resnet50"], "archsim: error: dgx9: unknown chip or system"),
        (["run", "ipu-pod16", "resnet50", "--nodes", "2"], "ipu-pod16.yaml: --nodes: ipu-pod16 declares no scale-out"),
        (["run", "tpu-v3-pod", "resnet50", "--nodes", "2"], "tpu-v3-pod.yaml: --nodes:"),
        (["run", "v100", "resnet50", "--nodes", "2"], "archsim: error: v100: --nodes: needs a multi-chip system"),
        (["run", "dgx1", "resnet50", "--pipeline-stages", "3"], "dgx1.yaml: --pipeline-stages: 3 stages must divide"),
        (["run", "dgx1", "resnet50", "--collective", "torus"], "dgx1.yaml: --collective: torus needs a torus level"),
        (["run", "dgx1", "resnet50", "--bucket-size", "25"], "--bucket-size: '25' has no unit"),
        (
            [
                "run",
                "dgx1",
                "resnet50",
                "--mode",
                "train",
                "--batch",
                "6",
                "--pipeline-stages",
                "2",
                "--microbatches",
                "4",
            ],
            "--microbatches: the batch of 6 does not split into 4 microbatches",
        ),
    ],
)
def test_bad_input_is_one_line_and_status_2(capsys: pytest.CaptureFixture[str], argv: list[str], expected: str) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("archsim: error: ")
    assert expected in err


def test_malformed_system_file_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(
        "schema_version: 1\nkind: system\nname: broken\ndescription: x\nchip: v100\n"
        "levels:\n  node: {size: 8, topology: torus, shape: [2, 2], link: nvlink2, links: 1}\n"
        "sources: {chip: a, levels.node: b}\n"
    )
    code, out, err = run_cli(capsys, "run", str(path), "resnet50")
    assert code == 2
    assert out == ""
    assert err == f"archsim: error: {path}: levels.node: shape [2, 2] has 4 members, size is 8\n"


def validate_trace_events(data: dict[str, Any]) -> dict[tuple[int, int], str]:
    """Check the trace-event format; returns the lane names by (pid, tid)."""
    assert isinstance(data["traceEvents"], list)
    names: dict[tuple[int, int], str] = {}
    processes: dict[int, str] = {}
    used: set[tuple[int, int]] = set()
    for event in data["traceEvents"]:
        for key in ("ph", "ts", "pid", "tid", "name"):
            assert key in event, event
        assert isinstance(event["ts"], int | float)
        assert event["ts"] >= 0
        if event["ph"] == "M":
            assert event["name"] in ("process_name", "thread_name", "thread_sort_index")
            if event["name"] == "thread_name":
                names[(event["pid"], event["tid"])] = event["args"]["name"]
            if event["name"] == "process_name":
                processes[event["pid"]] = event["args"]["name"]
        else:
            assert event["ph"] == "X"
            assert event["dur"] >= 0
            used.add((event["pid"], event["tid"]))
    assert used <= set(names)
    assert set(processes.values()) == {"chips", "links"}
    return names


def test_timeline_is_a_valid_trace_event_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "step.json"
    code, out, err = run_cli(
        capsys, "run", "ipu-m2000", "resnet50", "--mode", "train", "--batch", "2", "--json", "--timeline", str(path)
    )
    assert code == 0, err
    result = json.loads(out)
    data = json.loads(path.read_text())
    names = validate_trace_events(data)
    chips = [n for (pid, _), n in names.items() if pid == 1]
    links = [n for (pid, _), n in names.items() if pid == 2]
    assert len(chips) == 4  # one lane per chip
    assert links and all("[ipu-link]" in n for n in links)
    ends = [e["ts"] + e["dur"] for e in data["traceEvents"] if e["ph"] == "X"]
    assert max(ends) == pytest.approx(result["ops_time_s"] * 1e6, rel=1e-6)  # microseconds
    last_op = max(layer["end_s"] for layer in result["layers"])
    assert any(e["ph"] == "X" and e["ts"] + e["dur"] == pytest.approx(last_op * 1e6) for e in data["traceEvents"])
    assert [p.name for p in tmp_path.iterdir()] == ["step.json"]  # no temporary left behind


def test_timeline_of_a_single_chip(tmp_path: Path, library: Library) -> None:
    recorder = TimelineRecorder()
    record_run(RunRequest.of("v100", "gemm:512x512x512"), library, observers=[recorder])
    assert len(recorder.timeline.chips) == 1
    assert recorder.timeline.links == []


def test_a_failed_timeline_write_leaves_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "missing-folder" / "step.json"
    code, out, err = run_cli(capsys, "run", "dgx1", "resnet50", "--batch", "2", "--timeline", str(target))
    assert code == 2
    assert out == ""
    assert err.startswith(f"archsim: error: {target}: --timeline: cannot write")
    assert not target.parent.exists()
    folder = tmp_path / "ro"
    folder.mkdir()
    (folder / "step.json").write_text("old")
    folder.chmod(0o500)
    try:
        code, out, err = run_cli(
            capsys, "run", "dgx1", "resnet50", "--batch", "2", "--timeline", str(folder / "step.json")
        )
    finally:
        folder.chmod(0o700)
    if code == 2:  # (root ignores the folder's permissions)
        assert (folder / "step.json").read_text() == "old"
        assert [p.name for p in folder.iterdir()] == ["step.json"]


def test_a_software_stack_all_reduces_gradients_with_its_own_collective_library(tmp_path: Path) -> None:
    # a copy of mxnet naming a copy of nccl whose every call costs 5 ms more: the run named with
    # --software must pay it on each gradient bucket; the system's own library (nccl) does not
    root = Path(__file__).resolve().parents[2]
    nccl = (root / "software" / "nccl.yaml").read_text(encoding="utf-8")
    slow = nccl.replace("name: nccl", "name: slow-nccl").replace("aliases: [nccl2]", "aliases: []")
    slow = slow.replace('launch_latency: "59.6 us"', 'launch_latency: "5 ms"', 1)
    (tmp_path / "slow-nccl.yaml").write_text(slow, encoding="utf-8")
    mxnet = (root / "software" / "mxnet-20.12.yaml").read_text(encoding="utf-8")
    stack = mxnet.replace("name: mxnet-20.12", "name: mxnet-slow").replace("aliases: [mxnet]", "aliases: []")
    stack = stack.replace("collective_library: nccl", "collective_library: slow-nccl")
    (tmp_path / "mxnet-slow.yaml").write_text(stack, encoding="utf-8")
    library = Library([tmp_path], use_env=False)
    common = {"mode": "train", "batch": 32, "library": library, "overlap": False}
    fast = simulate("dgx1", "resnet50", software="mxnet", **common)  # type: ignore[arg-type]
    slowed = simulate("dgx1", "resnet50", software="mxnet-slow", **common)  # type: ignore[arg-type]
    assert slowed.comm_s >= fast.comm_s + 5e-3  # at least one bucket paid the 5 ms
    assert slowed.step_time_s > fast.step_time_s
    argv = ["run", "dgx1", "resnet50", "--mode", "train", "--batch", "32", "--lib", str(tmp_path)]
    output = main_json([*argv, "--software", "mxnet-slow", "--no-overlap", "--json"])
    assert output["comm_s"] == pytest.approx(slowed.comm_s)


def main_json(argv: list[str]) -> dict[str, Any]:
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(argv) == 0
    parsed: dict[str, Any] = json.loads(buffer.getvalue())
    return parsed


def test_a_bulk_synchronous_chip_exposes_its_gradient_all_reduce(library: Library) -> None:
    # an IPU exchanges only between compute phases (superstep): its gradient all-reduce runs after
    # the backward pass whatever --no-overlap says; a GPU's overlaps the backward pass unless told not to
    ipu = simulate("ipu-pod16", "resnet50", mode="train", batch=2, library=library)
    assert ipu.exposed_comm_s == pytest.approx(ipu.comm_s)
    assert ipu == simulate("ipu-pod16", "resnet50", mode="train", batch=2, library=library, overlap=False)
    gpu = simulate("dgx-a100", "resnet50", mode="train", batch=32, library=library)
    assert gpu.exposed_comm_s < 0.9 * gpu.comm_s
