"""Inline GEMM workloads: ``gemm:MxNxK`` and the batched ``gemm:BxMxNxK``.

``gemm:MxNxK`` is one matmul ``C[M, N] = A[M, K] @ W[K, N]`` (Gemm ``batch = 1``);
``gemm:BxMxNxK`` is ``B`` independent products of those shapes (Gemm ``batch = B``), each with its
own ``K x N`` operand. The right operand ``W`` is the weight (``B*K*N`` parameters), ``A`` and ``C``
are activations. An inline GEMM has no batch of samples: its trace's batch is 1.

In training the trace is the forward product and its two backward products, ``dA = dC @ W^T``
(Gemm ``(B, M, K, N)``, phase ``bwd_data``) and ``dW = A^T @ dC`` (``(B, K, N, M)``,
``bwd_weight``), with ``dC`` arriving from outside; there is no loss and no optimizer update, so
the memory is weights, gradients, the saved ``A`` and the transient ``dC``/``dA``.
"""

from __future__ import annotations

from archsim.errors import LimitError, UsageError
from archsim.limits import MAX_DIM
from archsim.spec.common import Precision, parse_shape
from archsim.workloads.graph import ForwardGraph, GraphBuilder
from archsim.workloads.trace import Gemm

PREFIX = "gemm:"
"""Workload names starting with this are inline GEMMs."""


def is_gemm(workload: str) -> bool:
    """True when ``workload`` names an inline GEMM (``gemm:...``)."""
    return workload.lower().startswith(PREFIX)


def parse_gemm(workload: str) -> Gemm:
    """``"gemm:MxNxK"`` or ``"gemm:BxMxNxK"`` -> :class:`Gemm`.

    A malformed shape is a UsageError, a dimension above :data:`~archsim.limits.MAX_DIM` a LimitError.
    """
    text = workload[len(PREFIX) :]
    for rank in (3, 4):
        try:
            dims = parse_shape(text, rank)
        except ValueError:
            continue
        if max(dims) > MAX_DIM:
            raise LimitError(workload, "workload", f"a dimension of {max(dims)} exceeds the limit of {MAX_DIM}")
        return Gemm(1, *dims) if rank == 3 else Gemm(*dims)
    raise UsageError(
        workload, "workload", "expected gemm:MxNxK or gemm:BxMxNxK with positive integers, e.g. gemm:4096x4096x4096"
    )


def gemm_graph(workload: str, precision: Precision) -> ForwardGraph:
    """The one-op forward graph of an inline GEMM; ``dC`` is seeded from outside for training."""
    shape = parse_gemm(workload)
    b, m, n, k = shape.batch, shape.m, shape.n, shape.k
    name = f"gemm:{m}x{n}x{k}" if b == 1 else f"gemm:{b}x{m}x{n}x{k}"
    g = GraphBuilder(name, precision)
    a = g.act("gemm.a", b * m * k)
    w = g.weight("gemm.w", b * k * n)
    c = g.act("gemm.c", b * m * n)
    g.matmul("gemm", shape, (a, w), c)
    return g.graph(
        grad_inputs=frozenset({a.name}), grad_outputs=frozenset({c.name}), meta={"workload": name, "launch": "kernel"}
    )
