"""ZeRO never increases memory per chip, and stages 1-2 put on the wire what plain data parallelism does.

A ring all-reduce of ``B`` bytes over ``N`` chips sends ``2 (N - 1) / N B`` per chip; a reduce-scatter
of ``B`` input bytes and an all-gather of ``B`` gathered bytes ``(N - 1) / N B`` each.
"""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from archsim import simulate
from archsim.errors import CapacityError, UsageError
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.workloads import TraceOptions, build_trace
from archsim.workloads.trace import CommKind, Mode, Trace
from archsim.workloads.transforms import with_gradient_all_reduces
from archsim.workloads.zero import with_zero, zero_memory

LIBRARY = Library(use_env=False)
TRACES = {
    (name, recompute): build_trace(name, LIBRARY, Mode.TRAIN, 1, Precision.FP16, seq, TraceOptions(recompute=recompute))
    for name, seq in (("gpt2", 64), ("bert-base", 64), ("resnet50", None))
    for recompute in ("none", "full")
}


def wire_bytes(trace: Trace, chips: int) -> Fraction:
    factor = {CommKind.ALL_REDUCE: 2, CommKind.REDUCE_SCATTER: 1, CommKind.ALL_GATHER: 1}
    return sum(
        (
            Fraction(factor[op.comm.kind] * (chips - 1) * op.comm.bytes, chips)
            for op in trace.ops
            if op.comm is not None
        ),
        Fraction(0),
    )


@settings(max_examples=25, deadline=None)
@given(
    key=st.sampled_from(sorted(TRACES)),
    chips=st.sampled_from([1, 2, 3, 8, 64, 1024]),
    stage=st.integers(0, 2),
)
def test_a_higher_stage_never_holds_more(key: tuple[str, str], chips: int, stage: int) -> None:
    trace = TRACES[key]
    lower, higher = zero_memory(trace, stage, chips), zero_memory(trace, stage + 1, chips)
    assert higher.total <= lower.total <= trace.memory_bytes
    for part in ("weights", "gradients", "optimizer_state", "activations", "kv_cache"):
        assert getattr(higher, part) <= getattr(lower, part)


@settings(max_examples=20, deadline=None)
@given(
    key=st.sampled_from(sorted(TRACES)),
    chips=st.sampled_from([2, 4, 8, 256]),
    stage=st.sampled_from([1, 2]),
    bucket=st.sampled_from([2**20, 25 * 2**20, 2**30]),
    overlap=st.booleans(),
)
def test_stages_1_and_2_move_the_wire_bytes_of_plain_data_parallelism(
    key: tuple[str, str], chips: int, stage: int, bucket: int, overlap: bool
) -> None:
    trace = TRACES[key]
    plain = with_gradient_all_reduces(trace, bucket, overlap)
    zero = with_zero(trace, stage, chips, bucket, overlap)
    zero.check()
    assert wire_bytes(zero, chips) == wire_bytes(plain, chips) > 0
    assert sum(op.flops for op in zero.ops) <= sum(op.flops for op in plain.ops)


@settings(max_examples=10, deadline=None, database=None)
@given(
    system=st.sampled_from(["dgx-a100", "dgx1", "tpu-v3-8", "ipu-m2000", "atlas-800"]),
    workload=st.sampled_from(["gpt2", "bert-base"]),
    stage=st.integers(0, 3),
    recompute=st.sampled_from(["none", "full"]),
    batch=st.integers(1, 4),
)
def test_zero_runs_are_physically_possible_or_refused_in_one_line(
    system: str, workload: str, stage: int, recompute: str, batch: int
) -> None:
    try:
        result = simulate(
            system, workload, mode="train", batch=batch, seq_len=64, zero=stage, recompute=recompute, library=LIBRARY
        )
    except (CapacityError, UsageError) as err:
        line = err.line()
        assert line and "\n" not in line
        return
    assert result.scaling_efficiency is not None and 0 < result.scaling_efficiency <= 1
    assert 0 < result.utilization <= 1
    assert result.memory_per_chip is not None
    assert result.memory_per_chip.total == result.memory_bytes + result.streaming_memory_bytes
    assert result.memory_bytes <= result.memory_capacity_bytes
    for layer in result.layers:
        assert layer.end_s - layer.start_s >= layer.roofline_s * (1 - 1e-12), layer.name
