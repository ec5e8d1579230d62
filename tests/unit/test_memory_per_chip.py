"""memory_per_chip: what one chip holds, by part, summing to the figure memory fit checks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from archsim import simulate
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.workloads import TraceOptions, build_trace
from archsim.workloads.memory import MemoryPerChip, memory_per_chip
from archsim.workloads.trace import Mode

LIBRARY = Library(use_env=False)


@pytest.mark.parametrize(
    ("target", "workload", "arguments"),
    [
        ("v100", "resnet50", {"mode": "train", "batch": 8}),
        ("v100", "resnet50", {"mode": "infer", "batch": 8}),
        ("a100-80gb", "bert-base", {"mode": "train", "batch": 4, "seq_len": 128}),
        ("h100", "gpt2", {"mode": "decode", "batch": 4, "prompt_len": 64, "gen_len": 16}),
        ("h100", "gpt2", {"mode": "train", "batch": 1, "seq_len": 256, "recompute": "selective"}),
        ("v100", "gemm:256x256x256", {}),
        ("gc200", "resnet50", {"mode": "train", "batch": 4, "streaming_memory": "all"}),
        ("dgx-a100", "gpt2", {"mode": "train", "batch": 1, "seq_len": 128}),
        ("ipu-m2000", "bert-base", {"mode": "train", "batch": 8, "seq_len": 128, "pipeline_stages": 4}),
    ],
)
def test_every_run_splits_the_memory_fit_checks(target: str, workload: str, arguments: dict[str, object]) -> None:
    result = simulate(target, workload, library=LIBRARY, **arguments)  # type: ignore[arg-type]
    split = result.memory_per_chip
    assert split is not None
    parts = (split.weights, split.gradients, split.optimizer_state, split.activations, split.kv_cache)
    assert all(part >= 0 for part in parts)
    assert sum(parts) == split.total == result.memory_bytes + result.streaming_memory_bytes
    assert split.kv_cache == result.kv_cache_bytes
    if result.mode != "train":
        assert split.gradients == split.optimizer_state == 0


def test_mixed_precision_adam_is_2_2_12_bytes_per_parameter() -> None:
    trace = build_trace("gpt2", LIBRARY, Mode.TRAIN, 1, Precision.FP16, 128, TraceOptions())
    split = memory_per_chip(trace)
    p = trace.parameters
    # fp16 weights and gradients; fp32 master weights and Adam's two fp32 moments
    assert (split.weights, split.gradients, split.optimizer_state) == (2 * p, 2 * p, 12 * p)
    fp32 = memory_per_chip(build_trace("gpt2", LIBRARY, Mode.TRAIN, 1, Precision.FP32, 128, TraceOptions()))
    assert (fp32.weights, fp32.gradients, fp32.optimizer_state) == (4 * p, 4 * p, 8 * p)  # no master copy


def test_a_pipeline_stage_holds_its_share_of_the_parameter_state() -> None:
    whole = simulate("dgx-a100", "bert-base", mode="train", batch=8, seq_len=128, library=LIBRARY)
    staged = simulate("dgx-a100", "bert-base", mode="train", batch=8, seq_len=128, pipeline_stages=4, library=LIBRARY)
    assert whole.memory_per_chip is not None and staged.memory_per_chip is not None
    assert staged.memory_per_chip.optimizer_state < whole.memory_per_chip.optimizer_state
    assert staged.memory_per_chip.total == staged.memory_bytes


def test_scaled_keeps_the_total() -> None:
    split = MemoryPerChip.of(100, 100, 600, 50, 0)
    half = split.scaled(0.5, 500)
    assert (half.weights, half.gradients, half.optimizer_state, half.total) == (50, 50, 300, 500)
    assert half.activations == 100
    tight = split.scaled(1 / 3, 200)  # the parts alone come to 266: cut to the total, nothing negative
    assert tight.total == 200 and min(tight.weights, tight.gradients, tight.optimizer_state, tight.activations) >= 0


def test_json_and_human_output_show_the_split() -> None:
    run = [sys.executable, "-m", "archsim.cli", "run", "h100", "gpt2", "--mode", "train", "--batch", "1"]
    done = subprocess.run([*run, "--seq-len", "128", "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    split = record["memory_per_chip"]
    assert set(split) == {"weights", "gradients", "optimizer_state", "activations", "kv_cache", "total"}
    assert split["total"] == record["memory_bytes"]
    human = subprocess.run([*run, "--seq-len", "128"], capture_output=True, text=True)
    line = next(x for x in human.stdout.splitlines() if x.startswith("memory split"))
    assert "weights" in line and "optimizer state" in line and "KV cache 0 B" in line
