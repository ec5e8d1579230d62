"""Workload model descriptions (``workloads/NAME.yaml``, ``kind: model``).

A model file holds a network's hyperparameters; the graph structure that turns them into an op-by-op
trace (a ResNet bottleneck, a transformer encoder layer) lives in :mod:`archsim.workloads`. Exactly
the section named by ``architecture`` is present.
"""

from __future__ import annotations

import enum
from typing import Literal

from pydantic import model_validator

from archsim.limits import MAX_MODEL_LAYERS
from archsim.spec.common import Count, Fraction, Name, Spec


class Architecture(enum.StrEnum):
    """Network families archsim can build a trace for."""

    RESNET = "resnet"
    BERT = "bert"


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
