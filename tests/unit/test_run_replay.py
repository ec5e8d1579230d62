"""archsim.run.replay: one replay seam for every target; a chip is a system of one chip."""

from __future__ import annotations

import pytest

from archsim import simulate
from archsim.errors import CapacityError
from archsim.run.context import SystemOptions
from archsim.run.observers import TimelineRecorder
from archsim.run.replay import replay_on_target
from archsim.run.request import RunRequest
from archsim.run.runner import build
from archsim.run.target import ONE_CHIP, resolve
from archsim.spec.common import Precision, StreamingMemory
from archsim.spec.library import Library
from archsim.workloads import build_trace
from archsim.workloads.options import Recompute, TraceOptions
from archsim.workloads.trace import Mode


@pytest.fixture(scope="module")
def library() -> Library:
    return Library()


def test_a_chip_resolves_to_the_system_of_one_chip_and_a_system_to_its_linked_chips(library: Library) -> None:
    chip, system = resolve("v100", library), resolve("dgx1", library)
    assert chip.system is ONE_CHIP and chip.linked is None and chip.num_chips == 1 and chip.source == ""
    assert system.linked is system.system and system.num_chips == 8 and system.source.endswith(".yaml")
    assert system.chip == chip.chip


@pytest.mark.parametrize("target", ["v100", "dgx1"])
def test_the_seam_replays_a_built_chip_or_system_run_as_the_runner_does(library: Library, target: str) -> None:
    built = build(RunRequest.of(target, "resnet50", "train", 32), library)
    direct = replay_on_target(built.target, built.trace, library, built.options, rebuild=built.rebuild)
    assert direct == simulate(target, "resnet50", "train", 32, library=library)
    assert (direct.system is None) == (target == "v100")
    assert direct.num_chips == (1 if target == "v100" else 8)


def test_a_system_of_one_chip_takes_the_options_streaming_memory_and_stack(library: Library) -> None:
    gc200 = resolve("gc200", library)
    no_recompute = TraceOptions(recompute=Recompute.NONE)
    trace = build_trace("resnet50", library, Mode.TRAIN, 32, Precision.FP16, None, no_recompute)
    with pytest.raises(CapacityError, match="In-Processor Memory"):
        replay_on_target(gc200, trace, library)
    streamed = replay_on_target(gc200, trace, library, SystemOptions(streaming=StreamingMemory.ALL))
    assert streamed.streaming_memory_bytes > 0
    v100 = resolve("v100", library)
    trace = build_trace("resnet50", library, Mode.TRAIN, 32, Precision.FP16, None)
    default = replay_on_target(v100, trace, library)
    pytorch = replay_on_target(v100, trace, library, SystemOptions(software=library.software("pytorch-21.11")))
    assert default.software != pytorch.software == "pytorch-21.11"
    assert default.step_time_s != pytorch.step_time_s


def test_observers_see_the_one_chip_s_lane(library: Library) -> None:
    recorder = TimelineRecorder()
    target = resolve("v100", library)
    trace = build_trace("resnet50", library, Mode.INFER, 8, Precision.FP16, None)
    result = replay_on_target(target, trace, library, observers=[recorder])
    ((lane, spans),) = recorder.timeline.chips
    assert lane == "chip 0 (v100-16gb)" and not recorder.timeline.links
    assert [span.name for span in spans] == [layer.name for layer in result.layers]
    assert max(span.end_s for span in spans) <= result.step_time_s
