"""The forward graph of a decoder-only language model (GPT, Llama, Mixtral), from its ModelSpec.

Shapes: batch ``B`` sequences, ``L`` layers, hidden ``h``, ``A`` query heads and ``G`` key/value heads
of size ``d`` (``A/G`` query heads share one K and V: grouped-query attention), feed-forward size
``F``, vocabulary ``V``. Each sequence brings ``q`` new tokens whose queries attend to ``c`` keys:

* ``train`` and ``infer``: the whole sequence, ``q = c = S`` (``--seq-len``); logits for every token;
* ``prefill``: the prompt, ``q = c = P`` (``--prompt-len``); keys and values of every layer are kept
  as the KV cache; logits for the last token only (the first generated token);
* ``decode``: one step of generation, ``q = 1`` new token per sequence attending to the KV cache and
  itself. A run is one step at the mean context of a generation of ``N`` tokens (``--gen-len``):
  the ``t``-th generated token (``t = 1..N``) attends to ``P + t`` keys, so the step attends to
  ``c = P + (N + 1) // 2`` keys (exactly the mean for odd ``N``); attention work is linear in ``c``,
  so ``N`` such steps cost what the generation's ``N`` steps cost. The KV cache held is the
  longest, ``P + N`` tokens.

Ops per layer ``layers.{i}`` (pre-norm): norm, fused QKV projection (``n = (A + 2G) d``), rotary
embedding of Q and K (``positions: rotary``), scores ``Q K^T`` (Gemm ``batch = B G, m = (A/G) q,
n = c, k = d``), scale + causal mask, softmax, [dropout of the probabilities], context ``P V``
(``batch = B G, m = (A/G) q, n = d, k = c``) -- the attention core, which selective recomputation
runs again --, output projection, [dropout], residual add, norm, feed-forward, [dropout], residual
add. The feed-forward is ``up -> GELU -> down`` or SwiGLU's fused ``gate|up -> SiLU(gate) * up ->
down``; with ``moe`` a router (``n = E``), softmax and top-k, a dispatch of each token to its ``k``
experts' buffers, the experts' FFNs as batched products over the ``E`` experts (``m`` = tokens per
expert: ``ceil(B q k / E)``, or ``ceil(capacity_factor B q k / E)``), and a gate-weighted combine.
Attention is computed whole (no skipping of masked blocks, as an unfused kernel or Megatron-LM's
softmax does). The embeddings gather rows of the token table (plus a learned position table); a
final norm and the output projection (the token table itself when tied) give the logits; training
appends a softmax-cross-entropy loss over every position.

FLOPs (``2 * MACs``; matrix ops only -- norms, activations, softmax and the like come on top):
per token a forward pass costs ``2 * N_mat + 4 * L * c * A * d``, where ``N_mat`` is the number of
parameters a token multiplies by: every layer's projection weights (with ``moe``, the router and
``k`` of the ``E`` experts, when the buffers hold exactly the routed tokens), plus ``V h`` for the
output projection on the tokens that get logits. Training is three times the forward (Megatron-LM's
``72 B S L h^2 (1 + S/(6h) + V/(12 h L))`` for GPT; PaLM's ``6 N + 12 L S A d`` per token), the
attention term counted without causal halving. :func:`matrix_flops` states it in code for the tests.

With tensor parallelism of degree ``T`` (Megatron-LM, Shoeybi et al. 2019) the graph is one chip's
shard: the QKV projection keeps ``A/T`` query heads and ``G/T`` key/value heads (one, replicated,
when ``T`` is a multiple of ``G``, as Megatron and TensorRT-LLM do for GQA), attention runs on the
local heads, the output projection reads ``A d / T`` inputs, the feed-forward (each expert's) keeps
``F/T`` columns, and the token table and output projection keep ``ceil(V/T)`` rows (vocabulary
parallel). Norms, residual adds and dropouts run on every token, or on ``1/T`` of them with sequence
parallelism (Korthikanti et al. 2022). The collectives between the shards are added by
:mod:`archsim.workloads.tensor_parallel`.

With expert parallelism of degree ``X`` (DeepSpeed-MoE, Rajbhandari et al. 2022; Megatron-LM's
``--expert-model-parallel-size``) the ``E`` experts are sharded over ``X`` chips of the
data-parallel group: a chip holds ``E/X`` experts' weights and its experts' FFNs run on the tokens
routed to them from all ``X`` chips. Under balanced routing each expert receives the same
``ceil(B q k / E)`` tokens (times the capacity factor) from every chip, so a chip's ``E/X`` local
experts process ``X`` times that many rows each: the per-chip buffers are exactly as large as
without expert parallelism (``E x rows x h``), the FFN work per chip is unchanged and only the
expert weights shrink by ``X``. The all-to-alls that move the buffers are added by
:mod:`archsim.workloads.expert_parallel`.
"""

from __future__ import annotations

import math
from fractions import Fraction

from archsim.spec.common import Precision
from archsim.spec.model import Activation, DecoderSection, ModelSpec, Norm, Positions
from archsim.workloads.expert_parallel import expert_parallel_problem
from archsim.workloads.graph import INT_BYTES, STAT_BYTES, BackwardRule, ForwardGraph, GraphBuilder
from archsim.workloads.trace import Gemm, Mode, OpKind, TensorAccess

DEFAULT_PROMPT_LEN = 128
"""Prompt tokens of a ``prefill`` or ``decode`` run when none is given: the first (input 128,
output 128) configuration of TensorRT-LLM's published performance tables."""
DEFAULT_GEN_LEN = 128
"""Generated tokens of a ``decode`` run when none is given (the same configuration)."""

TOKENS = "input_ids"
EMBEDDING = "embed_tokens.weight"


def expert_tokens(cfg: DecoderSection, tokens: int) -> int:
    """Tokens in each expert's buffer for ``tokens`` routed tokens (see the module docstring)."""
    assert cfg.moe is not None
    routed = Fraction(tokens * cfg.moe.top_k, cfg.moe.experts)
    factor = Fraction(1) if cfg.moe.capacity_factor is None else Fraction(repr(cfg.moe.capacity_factor))
    return math.ceil(factor * routed)


def kv_bytes_per_token(cfg: DecoderSection, precision: Precision) -> int:
    """Bytes of keys and values one token keeps in the KV cache, all layers together."""
    return precision.nbytes(2 * cfg.layers * cfg.kv_heads * cfg.head_size)


def ffn_matrix_parameters(cfg: DecoderSection) -> int:
    """Weights of one feed-forward network's products (one expert's, with a mixture of experts)."""
    return (3 if cfg.activation is Activation.SWIGLU else 2) * cfg.hidden * cfg.ffn


def layer_matrix_parameters(cfg: DecoderSection, active: bool) -> int:
    """Weights of one layer's matrix products (biases and norms not counted); ``active``: k of E experts."""
    h, d = cfg.hidden, cfg.head_size
    attention = h * (cfg.heads + 2 * cfg.kv_heads) * d + cfg.heads * d * h
    ffn = ffn_matrix_parameters(cfg)
    if cfg.moe is None:
        return attention + ffn
    experts = cfg.moe.top_k if active else cfg.moe.experts
    return attention + h * cfg.moe.experts + experts * ffn


def matrix_flops(cfg: DecoderSection, mode: Mode, batch: int, queries: int, context: int) -> int:
    """FLOPs of the matrix ops of one step, by the closed form of the module docstring.

    ``queries`` new tokens per sequence attend to ``context`` keys; exact when the experts' buffers
    hold exactly the routed tokens (dropless routing with ``tokens * top_k`` a multiple of ``E``).
    """
    tokens = batch * queries
    logits = tokens if mode in (Mode.TRAIN, Mode.INFER) else batch
    forward = (
        2 * tokens * cfg.layers * layer_matrix_parameters(cfg, active=True)
        + 2 * logits * cfg.vocab * cfg.hidden
        + 4 * tokens * cfg.layers * context * cfg.heads * cfg.head_size
    )
    return 3 * forward if mode is Mode.TRAIN else forward


def step_shape(mode: Mode, seq_len: int, gen_len: int) -> tuple[int, int]:
    """``(queries, context)`` of a step: new tokens per sequence and the keys they attend to."""
    if mode is Mode.DECODE:
        return 1, seq_len + (gen_len + 1) // 2
    return seq_len, seq_len


def kv_heads_per_chip(cfg: DecoderSection, tensor_parallel: int) -> int:
    """Key/value heads a chip of ``tensor_parallel`` holds: ``G/T``, or one (replicated) when ``G < T``."""
    if cfg.kv_heads % tensor_parallel == 0:
        return cfg.kv_heads // tensor_parallel
    return 1


def tensor_parallel_problem(cfg: DecoderSection, tensor_parallel: int) -> str | None:
    """Why ``cfg`` cannot be split over ``tensor_parallel`` chips (None: it can)."""
    t = tensor_parallel
    if cfg.heads % t:
        return f"{t} must divide the {cfg.heads} attention heads"
    if cfg.kv_heads % t and t % cfg.kv_heads:
        return f"{t} must divide the {cfg.kv_heads} key/value heads or be a multiple of them"
    if cfg.ffn % t:
        return f"{t} must divide the feed-forward size {cfg.ffn}"
    return None


class _Decoder:
    """Builds the ops of one forward pass (or one decode step) of a decoder language model (one TP shard)."""

    def __init__(
        self,
        spec: ModelSpec,
        cfg: DecoderSection,
        mode: Mode,
        batch: int,
        shape: tuple[int, int],
        p: Precision,
        tensor_parallel: int = 1,
        sequence_parallel: bool = False,
        expert_parallel: int = 1,
    ) -> None:
        self.g = GraphBuilder(spec.name, p)
        self.expert_parallel = expert_parallel
        """Chips the experts are sharded over (this chip holds ``E / expert_parallel`` of them)."""
        self.cfg = cfg
        self.mode = mode
        self.train = mode is Mode.TRAIN
        self.b = batch
        self.q, self.c = shape
        self.tokens = batch * self.q
        t = tensor_parallel
        self.heads = cfg.heads // t
        self.kv = kv_heads_per_chip(cfg, t)
        self.ffn_size = cfg.ffn // t
        self.vocab = -(-cfg.vocab // t)
        self.rows = self.tokens // t if sequence_parallel else self.tokens
        """Tokens the norms, residual adds and dropouts of this chip see (``1/T`` with sequence parallelism)."""

    def linear(self, name: str, x: TensorAccess, rows: int, n: int, k: int) -> TensorAccess:
        """``rows x k`` activation times a ``k x n`` weight (plus a bias when the model has them)."""
        g = self.g
        out = g.act(f"{name}.out", rows * n)
        bias = (g.weight(f"{name}.bias", n),) if self.cfg.bias else ()
        g.matmul(name, Gemm(1, rows, n, k), (x, g.weight(f"{name}.weight", k * n), *bias), out)
        return out

    def norm(self, name: str, x: TensorAccess) -> TensorAccess:
        """LayerNorm or RMSNorm over the hidden size; training also writes the per-row statistics."""
        g, h, rows = self.g, self.cfg.hidden, self.rows
        elements = rows * h
        rms = self.cfg.norm is Norm.RMSNORM
        params = (g.weight(f"{name}.weight", h),) + (() if rms or not self.cfg.bias else (g.weight(f"{name}.bias", h),))
        out = g.act(f"{name}.out", elements)
        fwd, bwd = (4, 8) if rms else (5, 10)
        if not self.train:
            g.add(name, OpKind.LAYERNORM, fwd * elements, (x, *params), (out,))
            return out
        stats = TensorAccess(f"{name}.saved_stats", (1 if rms else 2) * rows * STAT_BYTES)
        rule = BackwardRule((x.name, params[0].name, stats.name), bwd * elements)
        g.add(name, OpKind.LAYERNORM, fwd * elements, (x, *params), (out, stats), rule=rule)
        return out

    def dropout(self, name: str, x: TensorAccess) -> TensorAccess:
        """Dropout when training a model that uses it; otherwise the input unchanged."""
        if not (self.train and self.cfg.dropout):
            return x
        return self.g.dropout(name, x)

    def embeddings(self) -> TensorAccess:
        """Token (and learned position) embeddings, then dropout."""
        g, cfg, tokens, h = self.g, self.cfg, self.tokens, self.cfg.hidden
        ids = TensorAccess(TOKENS, tokens * INT_BYTES)
        x = g.act("embed_tokens.out", tokens * h)
        table = g.weight(EMBEDDING, self.vocab * h, touched=min(self.vocab, tokens) * h)
        g.add("embed_tokens", OpKind.EMBEDDING, 0, (ids, table), (x,), rule=BackwardRule((ids.name,), tokens * h))
        if cfg.positions is Positions.LEARNED:
            rows = self.q  # the positions of the new tokens, the same for every sequence
            pos = g.act("embed_positions.out", rows * h)
            table = g.weight("embed_positions.weight", cfg.max_position * h, touched=rows * h)
            g.add("embed_positions", OpKind.EMBEDDING, 0, (table,), (pos,), rule=BackwardRule((), rows * h))
            total = g.act("embed.add.out", tokens * h)
            g.add("embed.add", OpKind.ELEMENTWISE, tokens * h, (x, pos), (total,), rule=BackwardRule((), tokens * h))
            x = total
        return self.dropout("embed.dropout", self.local(x))

    def local(self, x: TensorAccess) -> TensorAccess:
        """``x`` (a whole ``tokens x h`` activation) as the norms and residual adds see it: this chip's rows."""
        return TensorAccess(x.name, self.g.size(self.rows * self.cfg.hidden))

    def gathered(self, x: TensorAccess) -> TensorAccess:
        """A norm's output ``x`` as a column-parallel product reads it: every token (all-gathered with SP)."""
        return TensorAccess(x.name, self.g.size(self.tokens * self.cfg.hidden))

    def attention(self, prefix: str, x: TensorAccess) -> TensorAccess:
        """Causal self-attention with grouped K/V heads, up to its output projection."""
        g, cfg, b = self.g, self.cfg, self.b
        d, heads, kv = cfg.head_size, self.heads, self.kv
        group, tokens, c = heads // kv, self.tokens, self.c
        x = self.gathered(x)
        q, k, v = (
            g.act(f"{prefix}.q", tokens * heads * d),
            *(g.act(f"{prefix}.{part}", tokens * kv * d) for part in ("k", "v")),
        )
        width = (heads + 2 * kv) * d
        bias = (g.weight(f"{prefix}.qkv.bias", width),) if cfg.bias else ()
        gemm = Gemm(1, tokens, width, cfg.hidden)
        reads = (x, g.weight(f"{prefix}.qkv.weight", cfg.hidden * width), *bias)
        g.add(f"{prefix}.qkv", OpKind.MATMUL, 2 * gemm.macs, reads, (q, k, v), gemm=gemm)
        if cfg.positions is Positions.ROTARY:
            rq, rk = g.act(f"{prefix}.rotary.q", tokens * heads * d), g.act(f"{prefix}.rotary.k", tokens * kv * d)
            elements = tokens * (heads + kv) * d
            rule = BackwardRule((), 3 * elements)
            g.add(f"{prefix}.rotary", OpKind.ELEMENTWISE, 3 * elements, (q, k), (rq, rk), rule=rule)
            q, k = rq, rk
        if self.mode is Mode.DECODE:  # the new token's K and V join the cache, which the products read whole
            k = TensorAccess(f"{prefix}.k_cache", g.size(b * c * kv * d))
            v = TensorAccess(f"{prefix}.v_cache", g.size(b * c * kv * d))
        core = len(g.ops)  # scores to context: the attention core selective recomputation runs again
        scores_n = b * heads * self.q * c
        scores = g.act(f"{prefix}.scores.out", scores_n)
        g.matmul(f"{prefix}.scores", Gemm(b * kv, group * self.q, c, d), (q, k), scores)
        masked = g.act(f"{prefix}.scale_mask.out", scores_n)
        g.elementwise(f"{prefix}.scale_mask", "scale_mask", (scores,), masked, scores_n)
        probs = g.act(f"{prefix}.softmax.out", scores_n)
        g.elementwise(
            f"{prefix}.softmax", "softmax", (masked,), probs, scores_n, saved=(probs.name,), kind=OpKind.SOFTMAX
        )
        probs = self.dropout(f"{prefix}.probs_dropout", probs)  # apart from the sublayer's {prefix}.dropout
        context = g.act(f"{prefix}.context.out", tokens * heads * d)
        g.matmul(f"{prefix}.context", Gemm(b * kv, group * self.q, d, c), (probs, v), context)
        g.core.update(range(core, len(g.ops)))
        return self.local(self.linear(f"{prefix}.o_proj", context, tokens, cfg.hidden, heads * d))

    def ffn(self, prefix: str, x: TensorAccess, rows: int, experts: int = 1) -> TensorAccess:
        """A feed-forward network (``experts`` of them as batched products over ``rows`` tokens each)."""
        g, cfg, h, f = self.g, self.cfg, self.cfg.hidden, self.ffn_size
        swiglu = cfg.activation is Activation.SWIGLU
        up_n = 2 * f if swiglu else f
        name = f"{prefix}.up" if not swiglu else f"{prefix}.gate_up"
        up = g.act(f"{name}.out", experts * rows * up_n)
        bias = (g.weight(f"{name}.bias", experts * up_n),) if cfg.bias else ()
        g.matmul(name, Gemm(experts, rows, up_n, h), (x, g.weight(f"{name}.weight", experts * h * up_n), *bias), up)
        act = g.act(f"{prefix}.act.out", experts * rows * f)
        what = "silu_mul" if swiglu else "gelu"
        g.elementwise(f"{prefix}.act", what, (up,), act, experts * rows * f, saved=(up.name,))
        out = g.act(f"{prefix}.down.out", experts * rows * h)
        bias = (g.weight(f"{prefix}.down.bias", experts * h),) if cfg.bias else ()
        reads = (act, g.weight(f"{prefix}.down.weight", experts * f * h), *bias)
        g.matmul(f"{prefix}.down", Gemm(experts, rows, h, f), reads, out)
        return out

    def moe(self, prefix: str, x: TensorAccess) -> TensorAccess:
        """Router, top-k, dispatch to the experts' buffers, the experts' FFNs, gate-weighted combine."""
        g, cfg, tokens, h = self.g, self.cfg, self.tokens, self.cfg.hidden
        assert cfg.moe is not None
        experts, top_k = cfg.moe.experts, cfg.moe.top_k
        logits = g.act(f"{prefix}.router.out", tokens * experts)
        router = g.weight(f"{prefix}.router.weight", h * experts)
        g.matmul(f"{prefix}.router", Gemm(1, tokens, experts, h), (x, router), logits)
        gates = g.act(f"{prefix}.topk.gates", tokens * top_k)
        index = TensorAccess(f"{prefix}.topk.index", tokens * top_k * INT_BYTES)
        g.elementwise(
            f"{prefix}.topk", "router", (logits,), gates, tokens * experts, saved=(logits.name,), extra_writes=(index,)
        )
        rows = expert_tokens(cfg, tokens)
        buffers = g.act(f"{prefix}.dispatch.out", experts * rows * h)
        g.elementwise(f"{prefix}.dispatch", "gather", (x, index), buffers, experts * rows * h, saved=(index.name,))
        # expert parallel: E/X local experts, each on the rows routed to it from all X chips (same buffers)
        x_ep = self.expert_parallel
        out = self.ffn(f"{prefix}.experts", buffers, rows * x_ep, experts // x_ep)
        combined = g.act(f"{prefix}.combine.out", tokens * h)
        g.elementwise(
            f"{prefix}.combine", "combine", (out, gates), combined, tokens * top_k * h, saved=(out.name, gates.name)
        )
        return combined

    def layer(self, prefix: str, x: TensorAccess) -> TensorAccess:
        """One decoder layer: attention and feed-forward sublayers, each pre-normed with a residual add."""
        y = self.dropout(f"{prefix}.attn.dropout", self.attention(f"{prefix}.attn", self.norm(f"{prefix}.norm1", x)))
        a = self.g.residual(f"{prefix}.attn.add", y, x)
        normed = self.norm(f"{prefix}.norm2", a)
        normed = self.gathered(normed)
        y = self.moe(f"{prefix}.moe", normed) if self.cfg.moe else self.ffn(f"{prefix}.mlp", normed, self.tokens)
        y = self.local(y)
        return self.g.residual(f"{prefix}.mlp.add", self.dropout(f"{prefix}.mlp.dropout", y), a)

    def build(self, kv_cache_bytes: int) -> ForwardGraph:
        """Every op of the forward pass, then the output projection and (training) the loss."""
        g, cfg = self.g, self.cfg
        x = self.embeddings()
        for i in range(cfg.layers):
            g.block = i + 1  # full recomputation keeps each layer's input only
            x = self.layer(f"layers.{i}", x)
        g.block = cfg.layers + 1
        x = self.gathered(self.norm("norm", x))
        rows = self.tokens
        if self.mode.is_generation:  # only the last token's logits choose the next token
            rows = self.b
            x = TensorAccess(x.name, g.size(rows * cfg.hidden))
        vocab = self.vocab
        logits = g.act("lm_head.out", rows * vocab)
        head = EMBEDDING if cfg.tied_embeddings else "lm_head.weight"
        g.matmul("lm_head", Gemm(1, rows, vocab, cfg.hidden), (x, g.weight(head, vocab * cfg.hidden)), logits)
        if not self.train:
            return g.graph(kv_cache_bytes=kv_cache_bytes)
        labels = TensorAccess("labels", rows * INT_BYTES)
        loss, rule = g.loss_op("loss", (logits, labels), rows * vocab, (logits.name, labels.name))
        return g.graph(loss, rule)


def decoder_graph(
    spec: ModelSpec,
    mode: Mode,
    batch: int,
    seq_len: int,
    precision: Precision,
    gen_len: int = 0,
    tensor_parallel: int = 1,
    sequence_parallel: bool = False,
    expert_parallel: int = 1,
) -> ForwardGraph:
    """The forward graph of the decoder ``spec``: ``batch`` sequences of ``seq_len`` tokens.

    In ``prefill`` and ``decode`` modes ``seq_len`` is the prompt length; ``decode`` is one step of a
    generation of ``gen_len`` tokens at its mean context (see the module docstring). With
    ``tensor_parallel`` above 1, one chip's shard (ValueError when the model does not split so, or
    when sequence parallelism's tokens do not). With ``expert_parallel`` above 1, the chip holds
    ``1/expert_parallel`` of the experts (ValueError for a dense model or experts that do not split).
    """
    cfg = spec.decoder
    if cfg is None:
        raise ValueError(f"model {spec.name} is not a decoder")
    if not 0 < seq_len + gen_len <= cfg.max_position:
        raise ValueError(f"seq_len + gen_len must be in 1..{cfg.max_position}, got {seq_len + gen_len}")
    problem = tensor_parallel_problem(cfg, tensor_parallel)
    if problem is not None:
        fits = [t for t in range(1, cfg.heads + 1) if tensor_parallel_problem(cfg, t) is None]
        raise ValueError(f"{problem}; {', '.join(map(str, fits))} would")
    problem = expert_parallel_problem(cfg, expert_parallel)
    if problem is not None:
        raise ValueError(problem)
    shape = step_shape(mode, seq_len, gen_len)
    tokens = batch * shape[0]
    if sequence_parallel and tokens % tensor_parallel:
        raise ValueError(f"sequence parallelism needs the {tokens} tokens of a step to split over {tensor_parallel}")
    # the cache holds this chip's key/value heads
    per_token = kv_bytes_per_token(cfg, precision) // cfg.kv_heads * kv_heads_per_chip(cfg, tensor_parallel)
    if mode is Mode.DECODE:
        cache = batch * (seq_len + gen_len) * per_token
    else:
        cache = batch * seq_len * per_token if mode is Mode.PREFILL else 0
    decoder = _Decoder(spec, cfg, mode, batch, shape, precision, tensor_parallel, sequence_parallel, expert_parallel)
    return decoder.build(cache)
