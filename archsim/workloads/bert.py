"""The forward graph of a BERT encoder with its pre-training or SQuAD head, from its ModelSpec.

Shapes: batch ``B``, sequence ``S`` (any length up to ``max_position``), hidden ``h``, ``A`` heads of
``d = h / A``, feed-forward ``I``, vocabulary ``V``, ``L`` layers. Ops in execution order:

* embeddings: word, position and token-type lookups (``embedding``, no FLOPs; each reads only the
  table rows it gathers), their sum, layernorm, dropout;
* per layer ``encoder.{i}``: fused QKV projection (Gemm ``m = B*S, n = 3h, k = h``), attention
  scores ``Q @ K^T`` (Gemm ``batch = B*A, m = S, n = S, k = d``), scale + additive mask, softmax,
  dropout, ``probs @ V`` (Gemm ``batch = B*A, m = S, n = d, k = S``), output projection, dropout,
  residual add, layernorm, FFN up (``n = I``), GELU, FFN down, dropout, residual add, layernorm;
* training (pre-training): pooler dense + tanh on the first token, the next-sentence head
  (``h -> 2``), the masked-LM head on ``M = ceil(mlm_fraction * S)`` positions per sequence (gather,
  transform dense + GELU + layernorm, decoder to ``V`` tied to the word embeddings, with its own
  bias), and one softmax-cross-entropy loss over both heads (appended by the training derivation);
* inference: the SQuAD span head (``h -> 2``) on all positions; no dropout, no pooler.

Linear layers carry a bias; matrix FLOPs are ``2 * MACs``, so the forward matrix FLOPs are
``B*S*L*(8h^2 + 4hI) + 4*B*L*S^2*h`` for the encoder plus the head's. Parameters count the tied
decoder weight once: BERT-Base has 110,106,428 in pre-training and 108,893,186 with the span head.
"""

from __future__ import annotations

import math
from fractions import Fraction

from archsim.spec.common import Precision
from archsim.spec.model import BertSection, ModelSpec
from archsim.workloads.graph import (
    ELEMENT_FLOPS,
    INT_BYTES,
    STAT_BYTES,
    BackwardRule,
    ForwardGraph,
    GraphBuilder,
)
from archsim.workloads.trace import Gemm, Mode, OpKind, TensorAccess

INPUT_IDS = "input_ids"
TOKEN_TYPE_IDS = "token_type_ids"  # noqa: S105 - a tensor name, not a password
ATTENTION_MASK = "attention_mask"
WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"


def masked_positions(cfg: BertSection, seq_len: int) -> int:
    """Masked-LM predictions per sequence: ``ceil(mlm_fraction * seq_len)``, in exact arithmetic."""
    return math.ceil(Fraction(repr(cfg.mlm_fraction)) * seq_len)


class _Bert:
    """Builds the ops of one BERT forward pass."""

    def __init__(
        self, spec: ModelSpec, cfg: BertSection, mode: Mode, batch: int, seq_len: int, precision: Precision
    ) -> None:
        self.g = GraphBuilder(spec.name, precision)
        self.cfg = cfg
        self.train = mode is Mode.TRAIN
        self.b = batch
        self.s = seq_len

    def linear(self, name: str, x: TensorAccess, rows: int, n: int, k: int) -> TensorAccess:
        """``rows x k`` activation times a ``k x n`` weight plus bias -> ``rows x n``."""
        g = self.g
        out = g.act(f"{name}.out", rows * n)
        reads = (x, g.weight(f"{name}.weight", k * n), g.weight(f"{name}.bias", n))
        g.matmul(name, Gemm(1, rows, n, k), reads, out)
        return out

    def layernorm(self, name: str, x: TensorAccess, rows: int) -> TensorAccess:
        """Layernorm over the hidden dimension; training also writes per-row mean and 1/std."""
        g, h = self.g, self.cfg.hidden
        elements = rows * h
        gamma = g.weight(f"{name}.weight", h)
        beta = g.weight(f"{name}.bias", h)
        out = g.act(f"{name}.out", elements)
        fwd, bwd = ELEMENT_FLOPS["norm"]
        if not self.train:
            g.add(name, OpKind.LAYERNORM, fwd * elements, (x, gamma, beta), (out,))
            return out
        stats = TensorAccess(f"{name}.saved_stats", 2 * rows * STAT_BYTES)
        rule = BackwardRule((x.name, gamma.name, stats.name), bwd * elements)
        g.add(name, OpKind.LAYERNORM, fwd * elements, (x, gamma, beta), (out, stats), rule=rule)
        return out

    def dropout(self, name: str, x: TensorAccess) -> TensorAccess:
        """Dropout in training (writes a 1-byte mask, its backward's only saved tensor); none in inference."""
        if not self.train:
            return x
        return self.g.dropout(name, x)

    def embeddings(self) -> TensorAccess:
        """Word + position + token-type embeddings, layernorm, dropout."""
        g, cfg, b, s = self.g, self.cfg, self.b, self.s
        h, tokens = cfg.hidden, b * s
        ids = TensorAccess(INPUT_IDS, tokens * INT_BYTES)
        types = TensorAccess(TOKEN_TYPE_IDS, tokens * INT_BYTES)
        word = g.act("embeddings.word_embeddings.out", tokens * h)
        table = g.weight(WORD_EMBEDDINGS, cfg.vocab * h, touched=min(cfg.vocab, tokens) * h)
        g.add(
            "embeddings.word_embeddings",
            OpKind.EMBEDDING,
            0,
            (ids, table),
            (word,),
            rule=BackwardRule((ids.name,), tokens * h),
        )
        pos = g.act("embeddings.position_embeddings.out", s * h)
        table = g.weight("embeddings.position_embeddings.weight", cfg.max_position * h, touched=s * h)
        g.add("embeddings.position_embeddings", OpKind.EMBEDDING, 0, (table,), (pos,), rule=BackwardRule((), s * h))
        typ = g.act("embeddings.token_type_embeddings.out", tokens * h)
        table = g.weight(
            "embeddings.token_type_embeddings.weight", cfg.type_vocab * h, touched=min(cfg.type_vocab, tokens) * h
        )
        g.add(
            "embeddings.token_type_embeddings",
            OpKind.EMBEDDING,
            0,
            (types, table),
            (typ,),
            rule=BackwardRule((types.name,), tokens * h),
        )
        total = g.act("embeddings.add.out", tokens * h)
        # backward passes dy to word and type, and sums it over the batch for the position rows
        g.add(
            "embeddings.add",
            OpKind.ELEMENTWISE,
            2 * tokens * h,
            (word, pos, typ),
            (total,),
            rule=BackwardRule((), tokens * h),
        )
        return self.dropout("embeddings.dropout", self.layernorm("embeddings.layernorm", total, tokens))

    def attention(self, prefix: str, x: TensorAccess) -> TensorAccess:
        """Multi-head self-attention of one layer, up to its output projection."""
        g, cfg, b, s = self.g, self.cfg, self.b, self.s
        h, heads = cfg.hidden, cfg.heads
        tokens, d, scores_n = b * s, h // heads, b * heads * s * s
        q, k, v = (g.act(f"{prefix}.{part}", tokens * h) for part in ("query", "key", "value"))
        reads = (x, g.weight(f"{prefix}.qkv.weight", h * 3 * h), g.weight(f"{prefix}.qkv.bias", 3 * h))
        gemm = Gemm(1, tokens, 3 * h, h)
        g.add(f"{prefix}.qkv", OpKind.MATMUL, 2 * gemm.macs, reads, (q, k, v), gemm=gemm)
        scores = g.act(f"{prefix}.scores.out", scores_n)
        g.matmul(f"{prefix}.scores", Gemm(b * heads, s, s, d), (q, k), scores)
        masked = g.act(f"{prefix}.scale_mask.out", scores_n)
        mask = TensorAccess(ATTENTION_MASK, g.size(b * s))
        g.elementwise(f"{prefix}.scale_mask", "scale_mask", (scores, mask), masked, scores_n)
        probs = g.act(f"{prefix}.softmax.out", scores_n)
        g.elementwise(
            f"{prefix}.softmax", "softmax", (masked,), probs, scores_n, saved=(probs.name,), kind=OpKind.SOFTMAX
        )
        probs = self.dropout(f"{prefix}.dropout", probs)
        context = g.act(f"{prefix}.context.out", tokens * h)
        g.matmul(f"{prefix}.context", Gemm(b * heads, s, d, s), (probs, v), context)
        return self.linear(f"{prefix}.output.dense", context, tokens, h, h)

    def layer(self, prefix: str, x: TensorAccess) -> TensorAccess:
        """One encoder layer: attention and feed-forward sublayers, each with dropout, add and layernorm."""
        g, cfg = self.g, self.cfg
        tokens, h, inner = self.b * self.s, cfg.hidden, cfg.intermediate
        y = self.dropout(f"{prefix}.attention.output.dropout", self.attention(f"{prefix}.attention", x))
        a = self.layernorm(
            f"{prefix}.attention.output.layernorm", self.g.residual(f"{prefix}.attention.output.add", y, x), tokens
        )
        up = self.linear(f"{prefix}.intermediate.dense", a, tokens, inner, h)
        act = g.act(f"{prefix}.intermediate.gelu.out", tokens * inner)
        g.elementwise(f"{prefix}.intermediate.gelu", "gelu", (up,), act, tokens * inner, saved=(up.name,))
        y = self.dropout(f"{prefix}.output.dropout", self.linear(f"{prefix}.output.dense", act, tokens, h, inner))
        return self.layernorm(f"{prefix}.output.layernorm", self.g.residual(f"{prefix}.output.add", y, a), tokens)

    def pretraining_heads(self, x: TensorAccess) -> ForwardGraph:
        """Pooler + next-sentence head, masked-LM head, and the loss over both."""
        g, cfg, b = self.g, self.cfg, self.b
        h, vocab, m = cfg.hidden, cfg.vocab, masked_positions(cfg, self.s)
        first = TensorAccess(x.name, g.size(b * h))  # the [CLS] token of each sequence
        pooled = self.linear("pooler.dense", first, b, h, h)
        tanh = g.act("pooler.tanh.out", b * h)
        g.elementwise("pooler.tanh", "tanh", (pooled,), tanh, b * h, saved=(tanh.name,))
        nsp = self.linear("cls.seq_relationship", tanh, b, 2, h)
        positions = TensorAccess("masked_lm_positions", b * m * INT_BYTES)
        picked = g.act("cls.predictions.gather.out", b * m * h)
        rows = TensorAccess(x.name, g.size(b * m * h))
        g.elementwise("cls.predictions.gather", "gather", (rows, positions), picked, b * m * h, saved=(positions.name,))
        t = self.linear("cls.predictions.transform.dense", picked, b * m, h, h)
        act = g.act("cls.predictions.transform.gelu.out", b * m * h)
        g.elementwise("cls.predictions.transform.gelu", "gelu", (t,), act, b * m * h, saved=(t.name,))
        t = self.layernorm("cls.predictions.transform.layernorm", act, b * m)
        logits = g.act("cls.predictions.decoder.out", b * m * vocab)
        reads = (t, g.weight(WORD_EMBEDDINGS, vocab * h), g.weight("cls.predictions.decoder.bias", vocab))
        g.matmul("cls.predictions.decoder", Gemm(1, b * m, vocab, h), reads, logits)
        labels = (
            TensorAccess("masked_lm_labels", b * m * INT_BYTES),
            TensorAccess("next_sentence_labels", b * INT_BYTES),
        )
        saved = (logits.name, nsp.name, labels[0].name, labels[1].name)
        loss, rule = g.loss_op("loss", (logits, nsp, *labels), b * m * vocab + 2 * b, saved)
        return g.graph(loss, rule)

    def build(self) -> ForwardGraph:
        """Every op of the forward pass."""
        x = self.embeddings()
        for i in range(self.cfg.layers):
            x = self.layer(f"encoder.{i}", x)
        if self.train:
            return self.pretraining_heads(x)
        self.linear("qa_outputs", x, self.b * self.s, 2, self.cfg.hidden)
        return self.g.graph()


def bert_graph(spec: ModelSpec, mode: Mode, batch: int, seq_len: int, precision: Precision) -> ForwardGraph:
    """The forward graph of the BERT ``spec`` for ``batch`` sequences of ``seq_len`` tokens."""
    if spec.bert is None:
        raise ValueError(f"model {spec.name} is not a bert")
    if not 0 < seq_len <= spec.bert.max_position:
        raise ValueError(f"seq_len must be in 1..{spec.bert.max_position}, got {seq_len}")
    return _Bert(spec, spec.bert, mode, batch, seq_len, precision).build()
