"""No impossible numbers (issue 13): every built-in chip and system, both modes, random batches and options.

A run either gives physically possible numbers -- scaling efficiency null or within (0, 1],
utilization within (0, 1], throughput never above ``num_chips x peak / FLOPs per sample``, no op
faster than its roofline, nothing streamed on an IPU whose step fits In-Processor Memory -- or is
refused in one line by an :class:`~archsim.errors.ArchsimError`.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from archsim import simulate
from archsim.errors import ArchsimError, CapacityError, LimitError, UsageError
from archsim.models.placement import place
from archsim.results.records import RunResult
from archsim.run.target import fabric_for
from archsim.spec.common import Precision, StreamingMemory
from archsim.spec.library import Library

LIBRARY = Library(use_env=False)
CHIPS = [e.name for e in LIBRARY.entries("chip")]
SYSTEMS = [e.name for e in LIBRARY.entries("system")]
WORKLOADS = {"resnet50": None, "bert-base": 32, "bert-large": 32}
"""Built-in networks and the (short) sequence length they run at, to keep examples quick."""


def _stages(system: str) -> list[int]:
    """Pipeline depths the system accepts (they must divide its first tier)."""
    fabric = fabric_for(LIBRARY.system(system), LIBRARY, 1, system)
    valid = []
    for stages in (1, 2, 4, 8):
        try:
            place(fabric, stages, system)
        except UsageError:
            continue
        valid.append(stages)
    return valid


STAGES = {system: _stages(system) for system in SYSTEMS}


@st.composite
def runs(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    """A target, a workload and the keyword arguments of :func:`archsim.simulate`."""
    target = draw(st.sampled_from(CHIPS + SYSTEMS))
    workload = draw(st.sampled_from(sorted(WORKLOADS)))
    mode = draw(st.sampled_from(["train", "infer"]))
    batch = draw(st.integers(min_value=1, max_value=8))
    kwargs: dict[str, Any] = {
        "mode": mode,
        "batch": batch,
        "seq_len": WORKLOADS[workload],
        "streaming_memory": draw(st.sampled_from(list(StreamingMemory))),
        "recompute": mode == "train" and draw(st.booleans()),
    }
    if target in SYSTEMS:
        stages = draw(st.sampled_from(STAGES[target]))
        kwargs["pipeline_stages"] = stages
        if stages > 1 or draw(st.booleans()):
            kwargs["microbatches"] = draw(st.sampled_from([m for m in (1, 2, 4, 8) if batch % m == 0]))
    return target, workload, kwargs


def check_physical(result: RunResult) -> None:
    """The bounds every result obeys."""
    chip = LIBRARY.chip(LIBRARY.system(result.system).chip if result.system else result.target)
    peak = chip.peak[Precision(result.precision)]
    if result.scaling_efficiency is None:
        assert result.scaling_note and result.single_chip_throughput is None
    else:
        assert 0.0 < result.scaling_efficiency <= 1.0
    assert 0.0 < result.utilization <= 1.0
    flops_per_sample = result.flops / result.global_batch
    assert result.throughput <= result.num_chips * peak / flops_per_sample
    for layer in result.layers:
        assert layer.end_s - layer.start_s >= layer.roofline_s * (1 - 1e-12), layer.name
        # the timeline fits the step, throttled or not (every time stretches with the clock)
        assert layer.end_s <= result.ops_time_s * (1 + 1e-9), layer.name
    for collective in result.collectives:
        assert collective.end_s <= result.step_time_s * (1 + 1e-9), collective.name
    assert result.memory_bytes <= result.memory_capacity_bytes
    assert result.streaming_memory_bytes <= chip.memory.main.capacity
    if chip.family == "ipu" and result.streaming_memory_bytes == 0:
        # a step that fits In-Processor Memory moves nothing from streaming memory (an IPU op's bytes)
        assert all(layer.bytes == 0 for layer in result.layers)


@settings(max_examples=30, deadline=None, database=None)
@given(run=runs())
def test_results_are_physically_possible_or_refused_in_one_line(run: tuple[str, str, dict[str, Any]]) -> None:
    target, workload, kwargs = run
    try:
        result = simulate(target, workload, library=LIBRARY, **kwargs)
    except (CapacityError, UsageError, LimitError) as err:
        line = err.line()
        assert line and "\n" not in line
        return
    except ArchsimError as err:  # any other refusal is a bug in the strategy or in archsim
        raise AssertionError(f"unexpected refusal: {err.line()}") from err
    check_physical(result)


@settings(max_examples=12, deadline=None, database=None)
@given(
    system=st.sampled_from(["ipu-m2000", "ipu-pod16", "dgx1", "dgx-a100", "atlas-800", "tpu-v3-8"]),
    workload=st.sampled_from(["resnet50", "bert-base"]),
    stages=st.sampled_from([2, 4]),
    microbatches=st.sampled_from([2, 4, 8]),
)
def test_pipelines_never_scale_above_linear(system: str, workload: str, stages: int, microbatches: int) -> None:
    """Pipelines that one chip can also hold: a reference exists and the efficiency stays within (0, 1]."""
    try:
        result = simulate(
            system,
            workload,
            mode="train",
            batch=microbatches,
            seq_len=WORKLOADS[workload],
            library=LIBRARY,
            pipeline_stages=stages,
            microbatches=microbatches,
            recompute=True,
        )
    except (CapacityError, UsageError) as err:
        line = err.line()
        assert line and "\n" not in line
        return
    check_physical(result)
