"""Workload model descriptions (``workloads/NAME.yaml``, ``kind: model``).

A model file holds a network's hyperparameters; the graph structure that turns them into an op-by-op
trace (a ResNet bottleneck, a transformer encoder layer, a decoder-only language model) lives in
:mod:`archsim.workloads`. Exactly the section named by ``architecture`` is present.
"""

from __future__ import annotations

import enum
from typing import Literal

from pydantic import model_validator

from archsim.limits import MAX_DIM, MAX_MODEL_LAYERS
from archsim.spec.common import Count, Fraction, Name, Spec


class Architecture(enum.StrEnum):
    """Network families archsim can build a trace for."""

    RESNET = "resnet"
    BERT = "bert"
    DECODER = "decoder"


class Optimizer(enum.StrEnum):
    """Optimizer of a training step; decides the optimizer state kept per parameter.

    ``sgd-momentum`` keeps one fp32 momentum per parameter; ``adam`` and ``lamb`` keep two fp32
    moments (LAMB adds per-layer trust ratios, which cost FLOPs but no stored state per parameter).
    """

    SGD_MOMENTUM = "sgd-momentum"
    ADAM = "adam"
    LAMB = "lamb"


class DefaultBatch(Spec):
    """Per-chip batch used when the user gives none."""

    train: Count
    infer: Count


class ResNetSection(Spec):
    """A bottleneck ResNet (v1.5: the stride of a downsampling block sits on its 3x3 convolution)."""

    image_size: Count
    in_channels: Count
    stem_channels: Count
    blocks: tuple[Count, ...]
    widths: tuple[Count, ...]
    expansion: Count
    classes: Count
    stride_on_3x3: bool

    @model_validator(mode="after")
    def _stages(self) -> ResNetSection:
        if len(self.blocks) != len(self.widths) or not self.blocks:
            raise ValueError("blocks and widths must be non-empty lists of equal length")
        if sum(self.blocks) > MAX_MODEL_LAYERS:
            raise ValueError(f"blocks: {sum(self.blocks)} blocks in all, more than the {MAX_MODEL_LAYERS} allowed")
        return self


class BertSection(Spec):
    """A BERT encoder with its embeddings, pre-training heads (MLM, NSP) and a span (SQuAD) head."""

    layers: Count
    hidden: Count
    heads: Count
    intermediate: Count
    vocab: Count
    max_position: Count
    type_vocab: Count
    default_seq_len: Count
    mlm_fraction: Fraction
    """Fraction of positions whose masked-LM prediction is computed (BERT masks 15%)."""

    @model_validator(mode="after")
    def _heads(self) -> BertSection:
        if self.layers > MAX_MODEL_LAYERS:
            raise ValueError(f"layers: {self.layers} is more than the {MAX_MODEL_LAYERS} allowed")
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if self.default_seq_len > self.max_position:
            raise ValueError("default_seq_len exceeds max_position")
        return self


class Activation(enum.StrEnum):
    """Feed-forward activation of a decoder: ``gelu`` (one up projection) or ``swiglu`` (gate and up)."""

    GELU = "gelu"
    SWIGLU = "swiglu"


class Norm(enum.StrEnum):
    """Normalization of a decoder: ``layernorm`` (mean and variance, gain and bias) or ``rmsnorm`` (gain)."""

    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"


class Positions(enum.StrEnum):
    """Position encoding: a ``learned`` table added to the embeddings, or ``rotary`` (RoPE) on Q and K."""

    LEARNED = "learned"
    ROTARY = "rotary"


class MoeSection(Spec):
    """Mixture of experts in every feed-forward sublayer: ``experts`` FFNs, each token routed to ``top_k``.

    ``capacity_factor`` None is dropless routing (every expert runs exactly the tokens routed to it,
    balanced: ``tokens * top_k / experts`` each, rounded up); a number ``c`` pads every expert's
    buffer to ``ceil(c * tokens * top_k / experts)`` tokens, as GShard and Switch do.
    """

    experts: Count
    top_k: Count
    capacity_factor: float | None = None

    @model_validator(mode="after")
    def _routing(self) -> MoeSection:
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) exceeds experts ({self.experts})")
        if self.experts > MAX_MODEL_LAYERS:
            raise ValueError(f"experts: {self.experts} is more than the {MAX_MODEL_LAYERS} allowed")
        if self.capacity_factor is not None and not 1.0 <= self.capacity_factor <= 64.0:
            raise ValueError(f"capacity_factor must be in 1..64, got {self.capacity_factor}")
        return self


class DecoderSection(Spec):
    """A decoder-only transformer language model (GPT, Llama, Mixtral), pre-norm, causal attention."""

    layers: Count
    hidden: Count
    heads: Count
    kv_heads: Count
    """Key/value heads: ``heads`` for multi-head attention, fewer for grouped-query (1: multi-query)."""
    head_dim: Count | None = None
    """Size of one head (None: ``hidden / heads``)."""
    ffn: Count
    """Inner size of the feed-forward sublayer (of each expert with ``moe``)."""
    activation: Activation
    norm: Norm
    positions: Positions
    bias: bool
    """Whether the linear layers and norms carry biases (GPT) or not (Llama)."""
    dropout: bool
    """Whether training applies dropout (after the embeddings, attention probabilities and sublayers)."""
    vocab: Count
    tied_embeddings: bool
    """Whether the output projection is the token-embedding table (one tensor, counted once)."""
    max_position: Count
    default_seq_len: Count
    """Sequence length of training and ``infer`` runs when none is given (the pre-training context)."""
    moe: MoeSection | None = None

    @property
    def head_size(self) -> int:
        """Size of one attention head."""
        return self.head_dim if self.head_dim is not None else self.hidden // self.heads

    @model_validator(mode="after")
    def _shape(self) -> DecoderSection:
        if self.layers > MAX_MODEL_LAYERS:
            raise ValueError(f"layers: {self.layers} is more than the {MAX_MODEL_LAYERS} allowed")
        for field in ("hidden", "ffn", "vocab", "max_position", "heads"):
            if getattr(self, field) > MAX_DIM:
                raise ValueError(f"{field}: {getattr(self, field)} is more than the {MAX_DIM} allowed")
        if self.head_dim is None and self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads}), or give head_dim")
        if self.heads * self.head_size > MAX_DIM:
            raise ValueError(f"heads x head_dim is more than the {MAX_DIM} allowed")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.default_seq_len > self.max_position:
            raise ValueError("default_seq_len exceeds max_position")
        return self


class ModelSpec(Spec):
    """A built-in network."""

    schema_version: Literal[1]
    kind: Literal["model"]
    name: Name
    aliases: tuple[Name, ...] = ()
    description: str
    architecture: Architecture
    default_batch: DefaultBatch
    optimizer: Optimizer
    """Optimizer used when the model is trained (decides optimizer state and update cost)."""
    resnet: ResNetSection | None = None
    bert: BertSection | None = None
    decoder: DecoderSection | None = None
    sources: dict[str, str]

    @model_validator(mode="after")
    def _section(self) -> ModelSpec:
        present = [a.value for a in Architecture if getattr(self, a.value) is not None]
        if present != [self.architecture.value]:
            raise ValueError(
                f"architecture {self.architecture.value!r} needs exactly the section "
                f"{self.architecture.value!r}, found {present or 'none'}"
            )
        return self
