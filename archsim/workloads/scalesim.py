"""A trace's matrix ops as a SCALE-Sim topology (its convolution or ``M, N, K`` GEMM format).

SCALE-Sim knows neither padding nor batches. In the convolution format a padded convolution is
written with the input it effectively reads, ``H' = (P - 1) * stride + R`` rows (and the same for
columns): SCALE-Sim's output size ``ceil((H' - R + stride) / stride)`` is then exactly ``P``, and the
matrix product is the trace's ``m = P * Q, n = K, k = C * R * S``. A matrix product ``m x n x k`` is
written as a 1x1 convolution over an ``m x 1`` input of ``k`` channels. The convolution format needs
batch-1 forward ops; anything else (a batch folded into ``m``, backward ops, batched products) goes
to the GEMM format, one row per product of a batch. Names lose commas and spaces, and ``DP`` (which
makes SCALE-Sim treat a layer as depthwise) is written ``Dp``.
"""

from __future__ import annotations

import enum

from archsim.errors import UsageError
from archsim.spec.scalesim import TopologyLayer
from archsim.workloads.trace import Op, Phase, Trace


class TopologyFormat(enum.StrEnum):
    """Which SCALE-Sim topology format to write (``auto``: convolutions when every op allows it)."""

    AUTO = "auto"
    CONV = "conv"
    GEMM = "gemm"


def _name(name: str) -> str:
    return name.replace(",", "_").replace(" ", "_").replace("DP", "Dp")


def _conv_row(op: Op) -> TopologyLayer | None:
    """``op`` in the convolution format, or None when that format cannot express it."""
    g = op.gemm
    assert g is not None
    if op.phase is not Phase.FORWARD or g.batch != 1:
        return None
    c = op.conv
    if c is None:
        return TopologyLayer(_name(op.name), g.m, 1, 1, 1, g.k, g.n, 1)
    if c.n != 1 or (g.m, g.n, g.k) != (c.p * c.q, c.k, c.c * c.r * c.s):
        return None
    height = (c.p - 1) * c.stride + c.r
    width = (c.q - 1) * c.stride + c.s
    return TopologyLayer(_name(op.name), height, width, c.r, c.s, c.c, c.k, c.stride)


def distinct(layers: list[TopologyLayer]) -> list[TopologyLayer]:
    """The first layer of every distinct shape, in order (SCALE-Sim's cycles depend on shape only)."""
    seen: set[tuple[int, ...]] = set()
    shape: tuple[int, ...]
    kept = []
    for layer in layers:
        shape = (layer.ifmap_h, layer.ifmap_w, layer.filter_h, layer.filter_w, layer.channels)
        shape += (layer.num_filters, layer.stride)
        if shape not in seen:
            seen.add(shape)
            kept.append(layer)
    return kept


def topology_from_trace(trace: Trace, form: TopologyFormat = TopologyFormat.AUTO) -> tuple[list[TopologyLayer], bool]:
    """The matrix ops of ``trace`` as topology layers, and whether they are in the GEMM format."""
    ops = [op for op in trace.ops if op.gemm is not None]
    if not ops:
        raise UsageError(trace.name, "workload", "has no convolution or matrix product to export")
    if form is not TopologyFormat.GEMM:
        rows = [_conv_row(op) for op in ops]
        if all(row is not None for row in rows):
            return [row for row in rows if row is not None], False
        if form is TopologyFormat.CONV:
            bad = next(op for op, row in zip(ops, rows, strict=True) if row is None)
            raise UsageError(
                trace.name,
                "--format",
                f"op {bad.name} is not a batch-1 forward op, which the convolution format needs; use --format gemm",
            )
    layers = []
    for op in ops:
        g = op.gemm
        assert g is not None
        names = [_name(op.name)] if g.batch == 1 else [f"{_name(op.name)}#{i}" for i in range(g.batch)]
        layers += [TopologyLayer.gemm(name, g.m, g.n, g.k) for name in names]
    return layers, True
