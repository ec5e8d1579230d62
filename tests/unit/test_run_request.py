"""archsim.run: one checked request, one runner, and the engine's observers."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import pytest

import archsim.run.runner as runner
from archsim import simulate
from archsim.baseline.runs import parse_run, record_run
from archsim.cli import main
from archsim.engine.network import Direction, Lane
from archsim.errors import ArchsimError, LimitError, UsageError
from archsim.run.observers import Lanes, TimelineRecorder
from archsim.run.request import Layout, RunRequest
from archsim.run.runner import build, replay_built, run
from archsim.run.target import ONE_CHIP
from archsim.spec.common import Fusion, Precision, StreamingMemory
from archsim.spec.library import Library
from archsim.sweep.worker import _simulate
from archsim.workloads import build_trace
from archsim.workloads.trace import Mode


@pytest.fixture(scope="module")
def library() -> Library:
    return Library()


@pytest.mark.parametrize(
    ("arguments", "line"),
    [
        ({"batch": 0}, "--batch: must be a positive integer, got 0"),
        ({"batch": True}, "--batch: must be a positive integer, got True"),
        ({"seq_len": -1}, "--seq-len: must be a positive integer, got -1"),
        ({"batch": 2**31}, "--batch: must be at most 2147483647"),
        ({"mode": "fly"}, "--mode: 'fly' is not one of train, infer, prefill, decode, generate"),
        ({"mode": "decode", "seq_len": 64}, "--seq-len: prefill and decode take the prompt's length: use --prompt-len"),
        ({"prompt_len": 64}, "--prompt-len: is for --mode prefill and decode; other modes take --seq-len"),
        ({"gen_len": 0}, "--gen-len: must be a positive integer, got 0"),
        ({"recompute": "yes"}, "--recompute: must be one of none, selective, full, true or false, got 'yes'"),
        ({"fusion": "all"}, "--fusion: 'all' is not one of none, norm-act"),
        ({"streaming_memory": "some"}, "--streaming-memory: 'some' is not one of none, optimizer-state, all"),
        ({"nodes": 0}, "--nodes: must be a positive integer, got 0"),
        ({"nodes": 5000}, "--nodes: must be at most 4096"),
        ({"bucket_bytes": 0}, "--bucket-size: must be a positive number of bytes, got 0"),
        ({"schedule": "zigzag"}, "--schedule: 'zigzag' is not one of gpipe, 1f1b"),
        ({"software": 3}, "--software: must be a software name, got 3"),
    ],
)
def test_a_bad_argument_is_refused_once_in_one_line_by_the_request_and_the_api(
    arguments: dict[str, Any], line: str, library: Library
) -> None:
    with pytest.raises((UsageError, LimitError)) as built:
        RunRequest.of("v100", "resnet50", **arguments)
    assert built.value.line() == line
    with pytest.raises(ArchsimError) as simulated:
        simulate("v100", "resnet50", library=library, **arguments)
    assert simulated.value.line() == line


def test_a_request_is_frozen_and_holds_enums() -> None:
    request = RunRequest.of("v100", "bert-base", "train", 8, "fp16", 128, fusion="norm-act", collective="auto")
    assert (request.mode, request.precision, request.fusion) == (Mode.TRAIN, Precision.FP16, Fusion.NORM_ACT)
    assert request.streaming is StreamingMemory.NONE
    assert request.layout == Layout()  # "auto" is the system's algorithm, as None is
    assert not request.layout.spreads
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.batch = 4  # type: ignore[misc]
    generating = RunRequest.of("v100", "gpt2", "prefill", 1, prompt_len=256)
    assert generating.trace_seq_len == 256


def test_every_front_door_builds_the_same_request(monkeypatch: pytest.MonkeyPatch, library: Library) -> None:
    seen: list[RunRequest] = []

    class Built(Exception):
        pass

    def record(request: RunRequest, _library: Library) -> runner.BuiltRun:
        seen.append(request)
        raise Built

    monkeypatch.setattr(runner, "build", record)
    arguments = {"mode": "train", "batch": 8, "precision": "fp16", "seq_len": 128, "software": "pytorch"}
    with pytest.raises(Built):
        simulate("v100", "bert-base", library=library, **arguments)
    with pytest.raises(Built):
        main(
            [
                "run",
                "v100",
                "bert-base",
                "--mode",
                "train",
                "--batch",
                "8",
                "--precision",
                "fp16",
                "--seq-len",
                "128",
                "--software",
                "pytorch",
            ]
        )
    with pytest.raises(Built):
        record_run(
            parse_run("v100:bert-base:mode=train,batch=8,precision=fp16,seq_len=128,software=pytorch"),
            library,
            keep_errors=False,
        )
    with pytest.raises(Built):
        _simulate(
            "v100", "bert-base", library, {**arguments, "time_to_train": False, "optimizer": None, "input_decode": None}
        )
    assert len(seen) == 4
    assert all(request == seen[0] for request in seen)


def test_a_chip_refuses_a_multichip_layout_naming_the_flag(library: Library) -> None:
    with pytest.raises(UsageError) as refused:
        run(RunRequest.of("v100", "resnet50", pipeline_stages=2), library)
    assert refused.value.line() == "v100: --pipeline-stages: needs a multi-chip system as the target, not a chip"


def test_the_default_batch_is_halved_the_same_way_on_a_chip_and_on_a_system(library: Library) -> None:
    chip = build(RunRequest.of("gc200", "bert-large", "train"), library)
    system = build(RunRequest.of("ipu-m2000", "bert-large", "train"), library)
    assert chip.target.system is ONE_CHIP and chip.target.linked is None  # a chip is a system of one chip
    assert system.target.linked is system.target.system is not ONE_CHIP
    assert system.target.chip == chip.target.chip
    assert (
        system.trace.batch
        == chip.trace.batch
        < build_trace("bert-large", library, Mode.TRAIN, None, Precision.FP16, None).batch
    )


def test_a_built_run_replays_the_same_result_every_time(library: Library) -> None:
    built = build(RunRequest.of("dgx1", "resnet50", "train", 8), library)
    first, again = replay_built(built, library), replay_built(built, library)
    assert first == again
    assert first == simulate("dgx1", "resnet50", "train", 8, library=library)


def test_recording_a_timeline_changes_nothing_in_the_result(library: Library) -> None:
    request = RunRequest.of("ipu-m2000", "bert-base", "train", 8, pipeline_stages=4)
    recorder = TimelineRecorder()
    plain, recorded = run(request, library), run(request, library, observers=[recorder])
    assert plain == recorded
    assert any(spans for _, spans in recorder.timeline.links)
    assert {link.direction for link in recorded.links} <= {d.value for d in Direction}


@dataclasses.dataclass
class Counter:
    """An observer of the caller's own: what it was told (the engine knows nothing of it)."""

    bytes_by_label: dict[str, float] = dataclasses.field(default_factory=dict)
    steps: list[list[str]] = dataclasses.field(default_factory=list)

    def transfer(self, lane: Lane, start_s: float, end_s: float, nbytes: float, label: str) -> None:
        self.bytes_by_label[label] = self.bytes_by_label.get(label, 0.0) + nbytes

    def step(self, chips: Callable[[], Lanes], lanes: Sequence[Lane]) -> None:
        self.steps.append([name for name, _ in chips()])


def test_an_observer_passed_from_outside_sees_every_transfer_and_step(library: Library) -> None:
    counter, recorder = Counter(), TimelineRecorder()
    request = RunRequest.of("dgx1", "resnet50", "train", 16, nodes=2)
    result = run(request, library, observers=[counter, recorder])
    assert counter.steps == [[name for name, _ in recorder.timeline.chips]]
    assert len(counter.steps[0]) == result.num_chips == 16
    # the observer saw each of the step's all-reduces on the links, and all the bytes the links carried
    assert (
        sorted(counter.bytes_by_label)
        == sorted(c.name for c in result.collectives)
        == ["all-reduce b0", "all-reduce b1"]
    )
    carried = sum(link.bytes * link.links for link in result.links)
    assert sum(counter.bytes_by_label.values()) == pytest.approx(carried, rel=1e-12)


def test_a_generation_timeline_is_the_prefill_then_one_decode_step(library: Library) -> None:
    recorder = TimelineRecorder()
    result = run(RunRequest.of("v100", "llama2-7b", "generate", 1), library, observers=[recorder])
    ((lane, spans),) = recorder.timeline.chips
    assert lane == f"chip 0 ({result.target})"
    prefill = [s for s in spans if not s.name.startswith("decode.")]
    decode = [s for s in spans if s.name.startswith("decode.")]
    assert prefill and decode and len(spans) == len(prefill) + len(decode)
    ttft = result.ttft_s
    assert ttft is not None
    assert max(s.end_s for s in prefill) <= ttft <= min(s.start_s for s in decode)
