"""Inline convolution workloads: ``conv:N,C,H,W,K,R,S[,STRIDE[,PAD]]``, for operator-level studies.

One 2-D convolution of a batch of ``N`` images of ``C x H x W`` with ``K`` filters of ``C x R x S``;
``STRIDE`` defaults to 1 and ``PAD`` to ``(R - 1) // 2`` (the "same" padding of odd filters, as in
DeepBench's convolution set). The filter is the weight; the input and output are activations.
Its implicit-GEMM view is ``m = N*P*Q, n = K, k = C*R*S``.

In training the trace is the forward convolution and its two backward passes (data and weight
gradients), with the output gradient arriving from outside: no loss, no optimizer update, so that
each pass can be compared with a measured kernel on its own.
"""

from __future__ import annotations

from archsim.errors import LimitError, UsageError
from archsim.limits import MAX_DIM
from archsim.spec.common import Precision
from archsim.workloads.graph import ForwardGraph, GraphBuilder
from archsim.workloads.trace import ConvShape, Gemm

PREFIX = "conv:"
"""Workload names starting with this are inline convolutions."""
_FORM = (
    "expected conv:N,C,H,W,K,R,S[,STRIDE[,PAD]] with positive integers (PAD may be 0), e.g. conv:16,64,56,56,256,1,1"
)


def is_conv(workload: str) -> bool:
    """True when ``workload`` names an inline convolution (``conv:...``)."""
    return workload.lower().startswith(PREFIX)


def parse_conv(workload: str) -> ConvShape:
    """``"conv:N,C,H,W,K,R,S[,STRIDE[,PAD]]"`` -> :class:`ConvShape`; a malformed one is a UsageError."""
    parts = workload[len(PREFIX) :].split(",")
    if len(parts) not in (7, 8, 9) or not all(p.strip().isascii() and p.strip().isdigit() for p in parts):
        raise UsageError(workload, "workload", _FORM)
    if any(len(p.strip()) > len(str(MAX_DIM)) or int(p) > MAX_DIM for p in parts):
        raise LimitError(workload, "workload", f"a dimension exceeds the limit of {MAX_DIM}")
    n, c, h, w, k, r, s, *rest = (int(p) for p in parts)
    stride = rest[0] if rest else 1
    pad = rest[1] if len(rest) > 1 else (r - 1) // 2
    if min(n, c, h, w, k, r, s, stride) < 1:
        raise UsageError(workload, "workload", _FORM)
    shape = ConvShape(n, c, h, w, k, r, s, stride, pad)
    if shape.p < 1 or shape.q < 1:
        raise UsageError(workload, "workload", f"a {r}x{s} filter with pad {pad} does not fit a {h}x{w} input")
    return shape


def conv_graph(workload: str, precision: Precision) -> ForwardGraph:
    """The one-op forward graph of an inline convolution; its output gradient is seeded from outside."""
    conv = parse_conv(workload)
    name = f"conv:{conv.n},{conv.c},{conv.h},{conv.w},{conv.k},{conv.r},{conv.s},{conv.stride},{conv.pad}"
    g = GraphBuilder(name, precision)
    x = g.act("conv.in", conv.n * conv.c * conv.h * conv.w)
    weight = g.weight("conv.weight", conv.k * conv.c * conv.r * conv.s)
    out = g.act("conv.out", conv.n * conv.k * conv.p * conv.q)
    gemm = Gemm(1, conv.n * conv.p * conv.q, conv.k, conv.c * conv.r * conv.s)
    g.matmul("conv", gemm, (x, weight), out, conv=conv)
    return g.graph(
        grad_inputs=frozenset({x.name}), grad_outputs=frozenset({out.name}), meta={"workload": name, "launch": "kernel"}
    )
