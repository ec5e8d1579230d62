"""BERT forward graphs: closed-form FLOPs and parameters, op structure, heads, training."""

from __future__ import annotations

import math

import pytest

from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.spec.model import BertSection, ModelSpec
from archsim.workloads import build_trace
from archsim.workloads.bert import bert_graph, masked_positions
from archsim.workloads.trace import Mode, Op, OpKind, Phase, Role

BERT_BASE_PRETRAINING_PARAMETERS = 110_106_428
"""HF BertForPreTraining (bert-base-uncased): encoder 109,482,240 + MLM transform, decoder bias, NSP."""
BERT_BASE_SQUAD_PARAMETERS = 108_893_186
"""HF BertForQuestionAnswering (no pooler): 108,891,648 + the 768 x 2 span head."""
BERT_LARGE_PRETRAINING_PARAMETERS = 336_226_108
BERT_LARGE_SQUAD_PARAMETERS = 334_094_338


@pytest.fixture(scope="module")
def library() -> Library:
    return Library(use_env=False)


@pytest.fixture(scope="module", params=["bert-base", "bert-large"])
def spec(request: pytest.FixtureRequest, library: Library) -> ModelSpec:
    return library.model(request.param)


def section(spec: ModelSpec) -> BertSection:
    assert spec.bert is not None
    return spec.bert


def closed_form_parameters(cfg: BertSection, mode: Mode) -> int:
    h, inner, vocab = cfg.hidden, cfg.intermediate, cfg.vocab
    embeddings = (cfg.vocab + cfg.max_position + cfg.type_vocab) * h + 2 * h
    layer = 4 * h * h + 2 * h * inner + 9 * h + inner  # QKV, output, 2 layernorms, FFN up and down
    if mode is Mode.INFER:
        return embeddings + cfg.layers * layer + 2 * h + 2  # span head
    pooler, nsp, mlm = h * h + h, 2 * h + 2, h * h + h + 2 * h + vocab  # decoder weight tied
    return embeddings + cfg.layers * layer + pooler + nsp + mlm


def closed_form_matrix_flops(cfg: BertSection, mode: Mode, batch: int, seq: int) -> int:
    """Forward matrix FLOPs: per token L*(8h^2 + 4hI) + 4*L*S*h for the encoder, plus the head."""
    h, inner, layers = cfg.hidden, cfg.intermediate, cfg.layers
    tokens = batch * seq
    encoder = tokens * (layers * (8 * h * h + 4 * h * inner) + 4 * layers * seq * h)
    if mode is Mode.INFER:
        return encoder + tokens * 4 * h
    masked = batch * math.ceil(0.15 * seq - 1e-9)
    heads = batch * (2 * h * h + 4 * h) + masked * (2 * h * h + 2 * h * cfg.vocab)
    return encoder + heads


def matrix_flops(ops: tuple[Op, ...], phase: Phase | None = Phase.FORWARD) -> int:
    return sum(op.flops for op in ops if op.kind.is_matrix and (phase is None or op.phase is phase))


def test_published_parameter_counts(library: Library) -> None:
    base, large = section(library.model("bert-base")), section(library.model("bert-large"))
    assert closed_form_parameters(base, Mode.TRAIN) == BERT_BASE_PRETRAINING_PARAMETERS
    assert closed_form_parameters(base, Mode.INFER) == BERT_BASE_SQUAD_PARAMETERS
    assert closed_form_parameters(large, Mode.TRAIN) == BERT_LARGE_PRETRAINING_PARAMETERS
    assert closed_form_parameters(large, Mode.INFER) == BERT_LARGE_SQUAD_PARAMETERS


@pytest.mark.parametrize("mode", [Mode.TRAIN, Mode.INFER])  # the modes of an encoder
def test_parameters(spec: ModelSpec, mode: Mode) -> None:
    graph = bert_graph(spec, mode, 2, 16, Precision.FP16)
    assert graph.parameters == closed_form_parameters(section(spec), mode)


@pytest.mark.parametrize("seq", [1, 7, 20, 128, 384, 512])
@pytest.mark.parametrize("mode", [Mode.TRAIN, Mode.INFER])  # the modes of an encoder
def test_forward_matrix_flops_closed_form(spec: ModelSpec, mode: Mode, seq: int) -> None:
    batch = 3
    graph = bert_graph(spec, mode, batch, seq, Precision.FP16)
    assert matrix_flops(graph.ops) == closed_form_matrix_flops(section(spec), mode, batch, seq)


def test_encoder_flops_per_token_is_24_l_h2_plus_4_l_s_h(spec: ModelSpec) -> None:
    cfg = section(spec)
    assert cfg.intermediate == 4 * cfg.hidden
    for seq in (64, 128, 512):
        graph = bert_graph(spec, Mode.INFER, 1, seq, Precision.FP16)
        encoder = matrix_flops(tuple(op for op in graph.ops if op.name.startswith("encoder.")))
        per_token = 24 * cfg.layers * cfg.hidden**2 + 4 * cfg.layers * seq * cfg.hidden
        assert encoder == seq * per_token


@pytest.mark.parametrize(("seq", "masked"), [(1, 1), (20, 3), (128, 20), (512, 77)])
def test_masked_positions(library: Library, seq: int, masked: int) -> None:
    assert masked_positions(section(library.model("bert-base")), seq) == masked


def test_attention_gemm_shapes(library: Library) -> None:
    spec = library.model("bert-large")
    batch, seq = 2, 64
    graph = bert_graph(spec, Mode.INFER, batch, seq, Precision.FP16)
    ops = {op.name: op for op in graph.ops}
    shapes = {
        "encoder.0.attention.qkv": (1, batch * seq, 3 * 1024, 1024),
        "encoder.0.attention.scores": (batch * 16, seq, seq, 64),
        "encoder.0.attention.context": (batch * 16, seq, 64, seq),
        "encoder.0.attention.output.dense": (1, batch * seq, 1024, 1024),
        "encoder.0.intermediate.dense": (1, batch * seq, 4096, 1024),
        "encoder.23.output.dense": (1, batch * seq, 1024, 4096),
        "qa_outputs": (1, batch * seq, 2, 1024),
    }
    for name, shape in shapes.items():
        gemm = ops[name].gemm
        assert gemm is not None, name
        assert (gemm.batch, gemm.m, gemm.n, gemm.k) == shape, name
    assert ops["encoder.0.attention.softmax"].kind is OpKind.SOFTMAX
    assert ops["encoder.0.attention.scale_mask"].kind is OpKind.ELEMENTWISE
    assert ops["encoder.0.output.layernorm"].kind is OpKind.LAYERNORM
    assert ops["embeddings.word_embeddings"].kind is OpKind.EMBEDDING
    scores = ops["encoder.0.attention.scores"]
    assert [t.name for t in scores.reads] == ["encoder.0.attention.query", "encoder.0.attention.key"]
    assert all(t.role is Role.ACTIVATION for t in scores.reads)


def test_dropout_only_in_training(library: Library) -> None:
    spec = library.model("bert-base")
    infer = bert_graph(spec, Mode.INFER, 2, 32, Precision.FP16)
    train = bert_graph(spec, Mode.TRAIN, 2, 32, Precision.FP16)
    assert not any("dropout" in op.name for op in infer.ops)
    dropouts = [op for op in train.ops if op.name.endswith("dropout")]
    assert len(dropouts) == 1 + 3 * 12
    mask = dropouts[0].writes[1]
    assert mask.name.endswith(".mask")
    assert mask.bytes == 2 * 32 * 768


def test_heads(library: Library) -> None:
    spec = library.model("bert-base")
    infer = {op.name for op in bert_graph(spec, Mode.INFER, 2, 32, Precision.FP16).ops}
    assert "qa_outputs" in infer
    assert "pooler.dense" not in infer
    assert "cls.predictions.decoder" not in infer
    train = bert_graph(spec, Mode.TRAIN, 2, 32, Precision.FP16)
    ops = {op.name: op for op in train.ops}
    assert "qa_outputs" not in ops
    decoder = ops["cls.predictions.decoder"]
    assert decoder.gemm is not None
    assert (decoder.gemm.m, decoder.gemm.n, decoder.gemm.k) == (2 * 5, 30522, 768)
    assert decoder.reads[1].name == "embeddings.word_embeddings.weight"  # tied to the word embeddings
    nsp = ops["cls.seq_relationship"]
    assert nsp.gemm is not None
    assert (nsp.gemm.m, nsp.gemm.n) == (2, 2)
    assert train.loss is not None
    assert train.loss.kind is OpKind.LOSS


def test_embedding_reads_only_gathered_rows(library: Library) -> None:
    spec = library.model("bert-base")
    ops = {op.name: op for op in bert_graph(spec, Mode.INFER, 2, 8, Precision.FP32).ops}
    word = ops["embeddings.word_embeddings"]
    assert word.reads[1].role is Role.WEIGHT
    assert word.reads[1].bytes == 16 * 768 * 4
    assert word.reads[0].bytes == 16 * 4  # int32 token ids
    assert ops["embeddings.position_embeddings"].reads[0].bytes == 8 * 768 * 4


def test_sequence_length_limits(library: Library) -> None:
    spec = library.model("bert-base")
    bert_graph(spec, Mode.TRAIN, 1, 512, Precision.FP16)
    with pytest.raises(ValueError, match="seq_len"):
        bert_graph(spec, Mode.TRAIN, 1, 513, Precision.FP16)


def test_training_flops_three_times_forward(spec: ModelSpec, library: Library) -> None:
    trace = build_trace(spec.name, library, Mode.TRAIN, 4, Precision.FP16, 128)
    trace.check()
    forward = matrix_flops(trace.ops)
    assert forward == closed_form_matrix_flops(section(spec), Mode.TRAIN, 4, 128)
    assert matrix_flops(trace.ops, None) == 3 * forward  # every matmul input needs a gradient
    assert 2.95 < trace.flops / sum(op.flops for op in trace.ops if op.phase is Phase.FORWARD) < 3.05
    assert trace.meta["optimizer"] == "lamb"
    update = trace.ops[-1]
    assert update.kind is OpKind.OPTIMIZER
    assert update.flops == 16 * trace.parameters
    assert update.bytes_read == trace.parameters * (4 + 2 + 8)


def test_attention_backward_is_two_data_products(library: Library) -> None:
    trace = build_trace("bert-base", library, Mode.TRAIN, 2, Precision.FP16, 16)
    ops = {op.name: op for op in trace.ops}
    dq, dk = ops["encoder.0.attention.scores.bwd_data"], ops["encoder.0.attention.scores.bwd_data_rhs"]
    assert dq.phase is dk.phase is Phase.BACKWARD_DATA
    assert dq.gemm is not None
    assert (dq.gemm.batch, dq.gemm.m, dq.gemm.n, dq.gemm.k) == (24, 16, 64, 16)
    assert dk.gemm is not None
    assert (dk.gemm.batch, dk.gemm.m, dk.gemm.n, dk.gemm.k) == (24, 64, 16, 16)
    assert "encoder.0.attention.scores.bwd_weight" not in ops
    # the tied decoder weight gets its gradient from the decoder and the embedding scatter, accumulated
    scatter = ops["embeddings.word_embeddings.bwd"]
    assert scatter.phase is Phase.BACKWARD_WEIGHT
    assert "embeddings.word_embeddings.weight.grad" in {t.name for t in scatter.reads}
    decoder_dw = [i for i, op in enumerate(trace.ops) if op.name == "cls.predictions.decoder.bwd_weight"]
    assert set(decoder_dw) <= set(scatter.deps)


def test_bert_large_b64_s128_training_memory(library: Library) -> None:
    trace = build_trace("bert-large", library, Mode.TRAIN, 64, Precision.FP16, 128)
    persistent = trace.parameters * (2 + 2 + 4 + 8)
    assert persistent < trace.memory_bytes < 32 * 2**30
