"""Activation recomputation (--recompute): checkpoints kept, forward ops run again for the backward pass."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from archsim import simulate
from archsim.errors import CapacityError, UsageError
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.workloads import TraceOptions, build_trace
from archsim.workloads.trace import Mode, Phase, Role, Trace
from archsim.workloads.training import RECOMPUTE

LIBRARY = Library(use_env=False)
RECOMPUTING = TraceOptions(recompute=True)


def trace(workload: str, options: TraceOptions | None = None, batch: int = 4) -> Trace:
    seq_len = 128 if workload.startswith("bert") else None
    return build_trace(workload, LIBRARY, Mode.TRAIN, batch, Precision.FP16, seq_len, options)


@pytest.mark.parametrize("workload", ["resnet50", "bert-base"])
def test_recomputed_ops_copy_forward_ops_and_add_their_flops(workload: str) -> None:
    plain, again = trace(workload), trace(workload, RECOMPUTING)
    again.check()
    forward = {op.name: op for op in again.ops if op.phase is Phase.FORWARD}
    copies = [op for op in again.ops if op.phase is Phase.RECOMPUTE]
    assert copies
    for op in copies:
        assert op.name.endswith(RECOMPUTE)
        original = forward[op.name.removesuffix(RECOMPUTE)]
        assert (op.kind, op.flops, op.gemm, op.conv) == (original.kind, original.flops, original.gemm, original.conv)
        assert not any(t.role is Role.STATE for t in op.writes)  # running statistics are updated once
    assert again.flops == plain.flops + sum(op.flops for op in copies)
    assert again.meta["recompute"] == "true"
    # the same forward, backward and update ops as without recomputation, in the same relative order
    assert [op.name for op in again.ops if op.phase is not Phase.RECOMPUTE] == [op.name for op in plain.ops]


@pytest.mark.parametrize("workload", ["resnet50", "bert-base"])
def test_recomputing_needs_less_memory(workload: str) -> None:
    assert trace(workload, RECOMPUTING).memory_bytes < trace(workload).memory_bytes


def test_backward_ops_read_rebuilt_tensors_from_the_recomputed_op() -> None:
    again = trace("resnet50", RECOMPUTING)
    rebuilt = {t.name: i for i, op in enumerate(again.ops) if op.phase is Phase.RECOMPUTE for t in op.writes}
    checked = 0
    for index, op in enumerate(again.ops):
        if not op.phase.is_backward or op.phase is Phase.RECOMPUTE:
            continue
        for t in op.reads:
            if t.name in rebuilt and rebuilt[t.name] < index:
                assert rebuilt[t.name] in op.deps, (op.name, t.name)
                checked += 1
    assert checked > 50


def test_the_last_segment_is_not_recomputed_and_copies_run_after_the_backward_before_them() -> None:
    again = trace("resnet50", RECOMPUTING)
    names = [op.name for op in again.ops]
    assert "fc.recompute" not in names
    assert "layer4.2.conv3.recompute" not in names
    for index, op in enumerate(again.ops):
        if op.phase is Phase.RECOMPUTE and again.ops[index - 1].phase is not Phase.RECOMPUTE:
            # the first copy of a block waits for the backward op emitted just before it
            assert index - 1 in op.deps


def test_recompute_is_training_only() -> None:
    with pytest.raises(UsageError, match="training only"):
        build_trace("resnet50", LIBRARY, Mode.INFER, 1, Precision.FP16, None, RECOMPUTING)


def test_recomputation_lets_an_ipu_keep_a_larger_microbatch_on_chip() -> None:
    # without recomputation (which Poplar does by default) the step does not fit In-Processor Memory:
    # refused unless asked to stream
    with pytest.raises(CapacityError, match="it fits with --recompute"):
        simulate("gc200", "resnet50", mode="train", batch=20, library=LIBRARY, recompute=False)
    plain = simulate(
        "gc200", "resnet50", mode="train", batch=20, library=LIBRARY, recompute=False, streaming_memory="all"
    )
    again = simulate("gc200", "resnet50", mode="train", batch=20, library=LIBRARY, recompute=True)
    onchip = LIBRARY.chip("gc200").memory.onchip
    assert onchip is not None
    assert plain.memory_bytes + plain.streaming_memory_bytes > onchip.capacity >= again.memory_bytes
    assert again.streaming_memory_bytes == 0
    # without recomputation the overflow streams from DDR; with it, the extra forward pass is cheaper
    assert again.step_time_s < plain.step_time_s


def test_recompute_on_a_gpu_costs_time() -> None:
    plain = simulate("v100", "resnet50", mode="train", batch=32, library=LIBRARY)
    again = simulate("v100", "resnet50", mode="train", batch=32, library=LIBRARY, recompute=True)
    assert again.step_time_s > plain.step_time_s
    assert again.memory_bytes < plain.memory_bytes


def test_pipeline_stages_recompute_in_their_backward_block() -> None:
    result = simulate(
        "ipu-m2000",
        "bert-large",
        mode="train",
        batch=8,
        seq_len=128,
        library=LIBRARY,
        pipeline_stages=4,
        recompute=True,
        streaming_memory="optimizer-state",
    )
    copies = [layer for layer in result.layers if layer.phase == Phase.RECOMPUTE.value]
    assert copies
    assert {layer.stage for layer in copies} == {0, 1, 2, 3}


def test_cli_recompute_and_its_refusal() -> None:
    run = [sys.executable, "-m", "archsim.cli", "run", "v100", "resnet50", "--batch", "2"]
    done = subprocess.run([*run, "--mode", "train", "--recompute", "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    layers = json.loads(done.stdout)["layers"]
    assert any(layer["phase"] == "recompute" for layer in layers)
    refused = subprocess.run([*run, "--recompute"], capture_output=True, text=True)
    assert refused.returncode == 2
    assert refused.stdout == ""
    assert refused.stderr.count("\n") == 1
    assert "--recompute" in refused.stderr
