"""Hypothesis strategies for ops and small traces used by the property tests."""

from __future__ import annotations

from hypothesis import strategies as st

from archsim.spec.common import Precision
from archsim.workloads.trace import Gemm, Mode, Op, OpKind, Phase, Role, TensorAccess, Trace

dims = st.integers(min_value=1, max_value=8192)


@st.composite
def gemm_ops(draw: st.DrawFn, precision: Precision = Precision.FP16) -> Op:
    """A (batched) matrix product with its operand and result tensors."""
    batch = draw(st.integers(min_value=1, max_value=64))
    m, n, k = draw(dims), draw(dims), draw(dims)
    e = precision.bytes
    return Op(
        name="gemm",
        kind=OpKind.MATMUL,
        phase=Phase.FORWARD,
        flops=2 * batch * m * n * k,
        reads=(TensorAccess("a", batch * m * k * e), TensorAccess("b", batch * k * n * e, Role.WEIGHT)),
        writes=(TensorAccess("c", batch * m * n * e),),
        gemm=Gemm(batch, m, n, k),
    )


@st.composite
def elementwise_ops(draw: st.DrawFn, precision: Precision = Precision.FP16) -> Op:
    """An element-wise op over ``elements`` values with 1 to 8 FLOPs each."""
    elements = draw(st.integers(min_value=1, max_value=2**28))
    flops_per = draw(st.integers(min_value=1, max_value=8))
    inputs = draw(st.integers(min_value=1, max_value=3))
    e = precision.bytes
    return Op(
        name="eltwise",
        kind=OpKind.ELEMENTWISE,
        phase=Phase.FORWARD,
        flops=flops_per * elements,
        reads=tuple(TensorAccess(f"x{i}", elements * e) for i in range(inputs)),
        writes=(TensorAccess("y", elements * e),),
    )


def any_ops(precision: Precision = Precision.FP16) -> st.SearchStrategy[Op]:
    """Matrix or element-wise ops."""
    return st.one_of(gemm_ops(precision), elementwise_ops(precision))


@st.composite
def traces(draw: st.DrawFn, precision: Precision = Precision.FP16) -> Trace:
    """A small random DAG of ops in topological order."""
    count = draw(st.integers(min_value=1, max_value=12))
    ops = []
    for index in range(count):
        op = draw(any_ops(precision))
        deps = draw(st.sets(st.integers(min_value=0, max_value=index - 1), max_size=3)) if index else set()
        ops.append(Op(f"op{index}", op.kind, op.phase, op.flops, op.reads, op.writes, tuple(sorted(deps)), op.gemm))
    return Trace("random", Mode.INFER, 1, precision, tuple(ops), parameters=0, memory_bytes=0)
