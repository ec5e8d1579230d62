"""The property tests' strategies: archsim's public ones (:mod:`archsim.testing.strategies`), re-exported."""

from __future__ import annotations

from archsim.testing.strategies import (
    any_ops,
    chip_data,
    chips,
    conv_ops,
    descriptions,
    dims,
    elementwise_ops,
    fabrics,
    gemm_ops,
    mutated,
    mutated_text,
    ops,
    precisions,
    system_data,
    systems,
    traces,
    vector_ops,
)

__all__ = [
    "any_ops",
    "chip_data",
    "chips",
    "conv_ops",
    "descriptions",
    "dims",
    "elementwise_ops",
    "fabrics",
    "gemm_ops",
    "mutated",
    "mutated_text",
    "ops",
    "precisions",
    "system_data",
    "systems",
    "traces",
    "vector_ops",
]
