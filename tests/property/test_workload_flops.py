"""FLOP scaling laws of the built-in workloads, for any batch and sequence length.

Matrix FLOPs are linear in the batch (every product has the batch in one dimension); attention
FLOPs (``Q @ K^T`` and ``probs @ V``, forward and backward) are quadratic in the sequence length;
a training step's matrix FLOPs are three times the forward's (BERT) or three times less the stem's
data gradient (ResNet, whose image needs none); a decoder's are its closed form in every mode.
"""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from archsim.spec.common import STORED_PRECISIONS, Precision
from archsim.spec.library import Library
from archsim.workloads import build_trace
from archsim.workloads.decoder import matrix_flops
from archsim.workloads.options import TraceOptions
from archsim.workloads.trace import Mode, Op, Phase

LIBRARY = Library(use_env=False)
BASE = LIBRARY.model("bert-base")
assert BASE.bert is not None
LAYERS, HIDDEN = BASE.bert.layers, BASE.bert.hidden

modes = st.sampled_from([Mode.TRAIN, Mode.INFER])  # prefill and decode are for decoders only
precisions = st.sampled_from(STORED_PRECISIONS)
trainable = st.sampled_from([p for p in STORED_PRECISIONS if p.block_scaling is None])  # 4-bit training is refused


def matrix(ops: tuple[Op, ...], phase: Phase | None = Phase.FORWARD) -> int:
    return sum(op.flops for op in ops if op.kind.is_matrix and (phase is None or op.phase is phase))


def attention(ops: tuple[Op, ...]) -> int:
    return sum(op.flops for op in ops if ".attention.scores" in op.name or ".attention.context" in op.name)


@settings(max_examples=15, deadline=None)
@given(batch=st.integers(1, 96), mode=modes, precision=precisions)
def test_resnet_matrix_flops_linear_in_batch(batch: int, mode: Mode, precision: Precision) -> None:
    assume(mode is not Mode.TRAIN or precision.block_scaling is None)  # 4-bit training is refused
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
@given(batch=st.integers(1, 64), precision=trainable)
def test_resnet_training_matrix_flops_three_times_forward_less_the_stem(batch: int, precision: Precision) -> None:
    trace = build_trace("resnet50", LIBRARY, Mode.TRAIN, batch, precision, None)
    stem = trace.ops[0]
    assert stem.name == "conv1"
    assert matrix(trace.ops, None) == 3 * matrix(trace.ops) - stem.flops


@settings(max_examples=15, deadline=None)
@given(batch=st.integers(1, 64), mode=modes, precision=precisions)
def test_memory_grows_with_batch(batch: int, mode: Mode, precision: Precision) -> None:
    assume(mode is not Mode.TRAIN or precision.block_scaling is None)
    small = build_trace("resnet50", LIBRARY, mode, batch, precision, None)
    large = build_trace("resnet50", LIBRARY, mode, batch + 1, precision, None)
    assert small.memory_bytes < large.memory_bytes
    assert small.memory_bytes > precision.nbytes(small.parameters)


@settings(max_examples=15, deadline=None)
@given(
    name=st.sampled_from(["gpt2", "gpt3-125m", "llama2-7b", "llama3-8b", "mixtral-8x7b"]),
    mode=st.sampled_from([m for m in Mode if m is not Mode.GENERATE]),  # generate is two traces, not one
    batch=st.integers(1, 8),
    seq=st.integers(1, 512),
    gen=st.integers(1, 256),
)
def test_decoder_matrix_flops_are_the_closed_form(name: str, mode: Mode, batch: int, seq: int, gen: int) -> None:
    cfg = LIBRARY.model(name).decoder
    assert cfg is not None
    options = TraceOptions(gen_len=gen if mode is Mode.DECODE else None)
    trace = build_trace(name, LIBRARY, mode, batch, Precision.BF16, seq, options)
    queries, context = (1, seq + (gen + 1) // 2) if mode is Mode.DECODE else (seq, seq)
    closed = matrix_flops(cfg, mode, batch, queries, context)
    if cfg.moe is None or (batch * queries * cfg.moe.top_k) % cfg.moe.experts == 0:
        assert matrix(trace.ops, None) == closed
    else:  # the experts' buffers round up to whole tokens: at most one token per expert more
        assert closed < matrix(trace.ops, None)
