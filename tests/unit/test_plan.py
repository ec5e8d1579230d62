"""``archsim plan``: the layouts it enumerates, its bounds, and that its search is exact."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

import pytest

from archsim.errors import CapacityError
from archsim.plan import Layout, layouts, memory_bound, plan, state_bytes_per_parameter, time_bound
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.workloads.decoder import matrix_flops
from archsim.workloads.trace import Mode
from tests.cli import run_cli


@dataclass
class _Result:
    """What the plan reads of a run result."""

    step_time_s: float
    tokens_per_s: float
    memory_bytes: int
    mfu: float = 0.5

    def to_dict(self) -> dict[str, Any]:
        return {"step_time_s": self.step_time_s}


def test_layouts_tile_the_system_and_split_the_batch() -> None:
    found = list(layouts(64, 8, 24, 512))
    assert found
    for layout in found:
        assert layout.tensor_parallel * layout.pipeline_stages * layout.data_parallel == 64
        assert 8 % layout.tensor_parallel == 0
        assert layout.pipeline_stages <= 24
        assert layout.data_parallel * layout.micro_batch * layout.microbatches == 512
        assert not (layout.sequence_parallel and layout.tensor_parallel == 1)
        assert not (layout.zero and layout.data_parallel == 1)
    assert len(set(found)) == len(found)
    assert {layout.recompute for layout in found} == {"none", "selective", "full"}


def test_layouts_leave_out_what_does_not_divide() -> None:
    # 96 sequences over 64 chips: data parallel must divide 96, so DP 64 is out
    assert all(96 % layout.data_parallel == 0 for layout in layouts(64, 8, 24, 96))
    assert not any(layout.data_parallel == 64 for layout in layouts(64, 8, 24, 96))


def test_a_mixture_of_experts_adds_expert_parallel_layouts() -> None:
    dense = list(layouts(32, 8, 32, 256))
    assert {layout.expert_parallel for layout in dense} == {1}
    moe = list(layouts(32, 8, 32, 256, experts=8))
    assert {layout.expert_parallel for layout in moe} == {1, 2, 4, 8}
    for layout in moe:
        # the experts' group is made of replicas and splits the experts evenly; ZeRO is not modelled with it
        assert layout.data_parallel % layout.expert_parallel == 0 and 8 % layout.expert_parallel == 0
        assert not (layout.zero and layout.expert_parallel > 1)
    assert {layout for layout in moe if layout.expert_parallel == 1} == set(dense)
    assert "x DP 8 (EP 4)," in Layout(4, 1, 8, 1, 32, 0, "none", False, 4).label()


def test_memory_bound_splits_the_experts_over_the_expert_parallel_group() -> None:
    per = state_bytes_per_parameter(Precision.BF16, 8)
    alone = memory_bound(Layout(2, 1, 8, 1, 1, 0, "full", False), 1000, per, expert_parameters=800)
    shared = memory_bound(Layout(2, 1, 8, 1, 1, 0, "full", False, 4), 1000, per, expert_parameters=800)
    assert alone == pytest.approx(16 * 1000 / 2)
    assert shared == pytest.approx(16 * (200 + 800 / 4) / 2)


def test_plan_finds_expert_parallel_layouts_for_mixtral(library: Library) -> None:
    calls: list[dict[str, Any]] = []
    report = plan("dgx-h100", "mixtral-8x7b", 256, library, nodes=4, seq_len=4096, top=3, simulate=_fake(calls))
    assert any(call["expert_parallel"] > 1 for call in calls)
    assert report.over_memory_bound > 0  # 16 bytes per parameter of 46.7 B: some splits cannot hold it
    assert report.best


def test_an_expert_parallel_layout_runs_through_the_simulator(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["dgx-h100", "mixtral-8x7b", "--global-batch", "64", "--nodes", "2", "--seq-len", "1024"]
    code, out, err = run_cli(capsys, "plan", *argv, "--max-runs", "1", "--top", "1", "--json")
    assert code == 0, err
    (best,) = json.loads(out)["layouts"]
    assert best["expert_parallel"] > 1  # the fastest bound: EP keeps TP small
    assert best["result"]["expert_parallel"] == best["expert_parallel"]
    assert best["result"]["memory_per_chip"]["total"] <= best["result"]["memory_capacity_bytes"]


def test_memory_bound_divides_by_model_parallel_and_zero_shards() -> None:
    per = state_bytes_per_parameter(Precision.FP16, 8)
    assert per == (2, 2, 12)  # fp16 weights and gradients, fp32 master and Adam's two moments
    base = Layout(1, 1, 8, 1, 1, 0, "full", False)
    assert memory_bound(base, 1000, per) == 16_000
    split = Layout(4, 2, 1, 1, 1, 0, "full", True)
    assert memory_bound(split, 1000, per) == pytest.approx(16_000 / 8)
    previous = memory_bound(base, 1000, per)
    for zero in (1, 2, 3):
        sharded = memory_bound(Layout(1, 1, 8, 1, 1, zero, "full", False), 1000, per)
        assert sharded < previous
        previous = sharded
    assert previous == pytest.approx(16_000 / 8)


def test_time_bound_grows_with_the_pipeline_fill() -> None:
    flat = time_bound(Layout(8, 1, 8, 1, 8, 0, "full", False), 10**15, 64, 1e12)
    piped = time_bound(Layout(8, 8, 1, 1, 8, 0, "full", False), 10**15, 64, 1e12)
    assert flat == pytest.approx(10**15 / 64e12)
    assert piped == pytest.approx(flat * 15 / 8)


@functools.cache
def _step_flops() -> int:
    cfg = Library().model("gpt3-1.3b").decoder
    assert cfg is not None
    seq = cfg.default_seq_len
    return matrix_flops(cfg, Mode.TRAIN, 64, seq, seq)


def _cost(layout: Layout) -> float:
    """A made-up step time never below the plan's time bound: gpt3-1.3b at global batch 64 on 16 A100s at 40%
    of peak, with made-up recompute, TP and ZeRO costs."""
    bound = time_bound(layout, _step_flops(), 16, 312e12)
    recompute = {"none": 1.0, "selective": 1.02, "full": 1.33}[layout.recompute]
    return bound / 0.4 * recompute * (1 + 0.03 * layout.tensor_parallel) * (1 + 0.01 * layout.zero)


def _fake(calls: list[dict[str, Any]], refuse_below_pp: int = 1) -> Any:
    def simulate(target: str, workload: str, **kwargs: Any) -> _Result:
        calls.append(kwargs)
        microbatches = kwargs["microbatches"] or 1
        layout = Layout(
            kwargs["tensor_parallel"],
            kwargs["pipeline_stages"],
            0,
            kwargs["batch"] // microbatches,
            microbatches,
            kwargs["zero"],
            kwargs["recompute"],
            kwargs["sequence_parallel"],
        )
        if layout.pipeline_stages < refuse_below_pp:
            raise CapacityError("chip", "--pipeline-stages", "does not fit")
        return _Result(_cost(layout), 1.0, 1)

    return simulate


def test_the_search_is_exact_and_simulates_less_than_everything(library: Library) -> None:
    calls: list[dict[str, Any]] = []
    report = plan("dgx-a100", "gpt3-1.3b", 64, library, nodes=2, top=3, max_runs=10**6, simulate=_fake(calls))
    assert report.exact
    survivors = report.enumerated - report.over_memory_bound
    assert 0 < report.simulated == len(calls) < survivors
    # exhaustive: every surviving layout simulated, the best three by the same made-up cost
    everything: list[dict[str, Any]] = []
    full = plan(
        "dgx-a100", "gpt3-1.3b", 64, library, nodes=2, top=survivors, max_runs=10**6, simulate=_fake(everything)
    )
    assert full.simulated == survivors
    expected = sorted(p.result.step_time_s for p in full.best)[:3]
    assert [p.result.step_time_s for p in report.best] == expected
    steps = [p.result.step_time_s for p in report.best]
    assert steps == sorted(steps)


def test_refused_layouts_are_counted_and_left_out(library: Library) -> None:
    report = plan(
        "dgx-a100", "gpt3-1.3b", 64, library, nodes=2, top=3, max_runs=10**6, simulate=_fake([], refuse_below_pp=4)
    )
    assert report.refused > 0
    assert report.best and all(p.layout.pipeline_stages >= 4 for p in report.best)
    assert report.refusals and "does not fit" in report.refusals[0]


def test_a_run_cap_says_the_list_is_not_exhaustive(library: Library) -> None:
    calls: list[dict[str, Any]] = []
    report = plan("dgx-a100", "gpt3-1.3b", 64, library, top=3, max_runs=2, simulate=_fake(calls))
    assert not report.exact
    assert report.simulated == len(calls) == 2


def test_a_state_too_big_for_any_layout_is_dropped_before_simulating(library: Library) -> None:
    # GPT-3 175B on one DGX A100: 16 bytes per parameter over 8 chips with no data parallelism to shard over
    calls: list[dict[str, Any]] = []
    report = plan("dgx-a100", "gpt3-175b", 8, library, top=3, simulate=_fake(calls))
    assert report.over_memory_bound == report.enumerated
    assert not calls and not report.best


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["a100-80gb", "gpt3-1.3b"], "needs a multi-chip system"),
        (["dgx-a100", "resnet50"], "decoder language models"),
        (["dgx-a100", "gpt3-1.3b", "--precision", "fp64"], "--precision"),
    ],
)
def test_the_cli_refuses_in_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    code, out, err = run_cli(capsys, "plan", *argv, "--global-batch", "8")
    assert code == 2
    assert out == ""
    assert needle in err and len(err.strip().splitlines()) == 1


def test_plan_runs_the_simulator_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "plan", "dgx-a100", "gpt2", "--global-batch", "16", "--max-runs", "4", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["chips"] == 8 and 0 < report["simulated"] <= 4
    steps = [layout["step_time_s"] for layout in report["layouts"]]
    assert steps and steps == sorted(steps)
    for layout in report["layouts"]:
        run = layout["result"]
        tiles = layout["tensor_parallel"] * layout["pipeline_stages"] * layout["data_parallel"]
        assert tiles == run["num_chips"] == 8
        assert run["global_batch"] == 16
        assert run["memory_per_chip"]["total"] <= run["memory_capacity_bytes"]
        assert 0 < run["mfu"] <= 1
    code, out, _ = run_cli(capsys, "plan", "dgx-a100", "gpt2", "--global-batch", "16", "--max-runs", "4")
    assert code == 0 and "TP " in out and "not exhaustive" in out


def test_issue35_19_plan_spends_no_run_on_a_layout_the_run_refuses(library: Library) -> None:
    # gpt2's 12 heads do not split over 8 chips: TP 8 is never simulated, so two runs find TP 4 x PP 2
    calls: list[dict[str, Any]] = []
    report = plan("dgx-a100", "gpt2", 7, library, max_runs=2, simulate=_fake(calls))
    assert {call["tensor_parallel"] for call in calls} <= {1, 2, 4}
    assert report.refused == 0 and report.best
    every = list(layouts(8, 8, 12, 7))
    assert report.enumerated == sum(layout.tensor_parallel != 8 for layout in every) < len(every)
