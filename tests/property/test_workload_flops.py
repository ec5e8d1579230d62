"""FLOP scaling laws of the built-in workloads, for any batch and sequence length.

Matrix FLOPs are linear in the batch (every product has the batch in one dimension); attention
FLOPs (``Q @ K^T`` and ``probs @ V``, forward and backward) are quadratic in the sequence length;
a training step's matrix FLOPs are three times the forward's (BERT) or three times less the stem's
data gradient (ResNet, whose image needs none).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.workloads import build_trace
from archsim.workloads.trace import Mode, Op, Phase

LIBRARY = Library(use_env=False)
BASE = LIBRARY.model("bert-base")
assert BASE.bert is not None
LAYERS, HIDDEN = BASE.bert.layers, BASE.bert.hidden

modes = st.sampled_from(list(Mode))
precisions = st.sampled_from(list(Precision))


def matrix(ops: tuple[Op, ...], phase: Phase | None = Phase.FORWARD) -> int:
    return sum(op.flops for op in ops if op.kind.is_matrix and (phase is None or op.phase is phase))


def attention(ops: tuple[Op, ...]) -> int:
    return sum(op.flops for op in ops if ".attention.scores" in op.name or ".attention.context" in op.name)


@settings(max_examples=15, deadline=None)
@given(batch=st.integers(1, 96), mode=modes, precision=precisions)
def test_resnet_matrix_flops_linear_in_batch(batch: int, mode: Mode, precision: Precision) -> None:
    one = build_trace("resnet50", LIBRARY, mode, 1, precision, None)
    many = build_trace("resnet50", LIBRARY, mode, batch, precision, None)
    assert matrix(many.ops, None) == batch * matrix(one.ops, None)
    assert many.parameters == one.parameters


@settings(max_examples=15, deadline=None)
@given(batch=st.integers(1, 64), seq=st.integers(1, 512), mode=modes)
def test_bert_matrix_flops_linear_in_batch(batch: int, seq: int, mode: Mode) -> None:
    one = build_trace("bert-base", LIBRARY, mode, 1, Precision.FP16, seq)
    many = build_trace("bert-base", LIBRARY, mode, batch, Precision.FP16, seq)
    assert matrix(many.ops, None) == batch * matrix(one.ops, None)


@settings(max_examples=15, deadline=None)
@given(batch=st.integers(1, 16), seq=st.integers(1, 256), mode=modes)
def test_attention_flops_quadratic_in_seq_len(batch: int, seq: int, mode: Mode) -> None:
    short = build_trace("bert-base", LIBRARY, mode, batch, Precision.FP16, seq)
    long = build_trace("bert-base", LIBRARY, mode, batch, Precision.FP16, 2 * seq)
    assert attention(long.ops) == 4 * attention(short.ops)
    passes = 3 if mode is Mode.TRAIN else 1
    assert attention(short.ops) == passes * 4 * batch * LAYERS * seq * seq * HIDDEN


@settings(max_examples=10, deadline=None)
@given(batch=st.integers(1, 32), seq=st.integers(1, 512))
def test_bert_training_matrix_flops_three_times_forward(batch: int, seq: int) -> None:
    trace = build_trace("bert-base", LIBRARY, Mode.TRAIN, batch, Precision.FP16, seq)
    assert matrix(trace.ops, None) == 3 * matrix(trace.ops)


@settings(max_examples=10, deadline=None)
@given(batch=st.integers(1, 64), precision=precisions)
def test_resnet_training_matrix_flops_three_times_forward_less_the_stem(batch: int, precision: Precision) -> None:
    trace = build_trace("resnet50", LIBRARY, Mode.TRAIN, batch, precision, None)
    stem = trace.ops[0]
    assert stem.name == "conv1"
    assert matrix(trace.ops, None) == 3 * matrix(trace.ops) - stem.flops


@settings(max_examples=15, deadline=None)
@given(batch=st.integers(1, 64), mode=modes, precision=precisions)
def test_memory_grows_with_batch(batch: int, mode: Mode, precision: Precision) -> None:
    small = build_trace("resnet50", LIBRARY, mode, batch, precision, None)
    large = build_trace("resnet50", LIBRARY, mode, batch + 1, precision, None)
    assert small.memory_bytes < large.memory_bytes
    assert small.memory_bytes > small.parameters * precision.bytes
