"""The generic training derivation and the memory estimates, on small hand-built graphs."""

from __future__ import annotations

import pytest

from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.spec.model import Optimizer
from archsim.workloads import build_trace
from archsim.workloads.graph import BackwardRule, ForwardGraph, GraphBuilder, default_rule
from archsim.workloads.memory import inference_memory, peak_live_bytes, training_memory
from archsim.workloads.trace import Gemm, Mode, Op, OpKind, Phase, Role, TensorAccess
from archsim.workloads.training import OPTIMIZER_COST, training_ops


def mlp(precision: Precision = Precision.FP16, with_loss: bool = True) -> ForwardGraph:
    """input -> fc1 -> relu -> fc2 -> add(residual from relu) -> loss; batch 4, widths 8 -> 16 -> 16."""
    g = GraphBuilder("mlp", precision)
    x = TensorAccess("x", precision.nbytes(4 * 8))
    h = g.act("fc1.out", 4 * 16)
    g.matmul("fc1", Gemm(1, 4, 16, 8), (x, g.weight("fc1.weight", 8 * 16), g.weight("fc1.bias", 16)), h)
    r = g.act("relu.out", 4 * 16)
    g.elementwise("relu", "relu", (h,), r, 4 * 16, saved=(r.name,))
    y = g.act("fc2.out", 4 * 16)
    g.matmul("fc2", Gemm(1, 4, 16, 16), (r, g.weight("fc2.weight", 16 * 16)), y)
    s = g.act("add.out", 4 * 16)
    g.elementwise("add", "add", (y, r), s, 4 * 16)
    if not with_loss:
        return g.graph()
    loss, rule = g.loss_op("loss", (s, TensorAccess("labels", 16)), 4 * 16, (s.name, "labels"))
    return g.graph(loss, rule)


def by_name(ops: tuple[Op, ...]) -> dict[str, tuple[int, Op]]:
    return {op.name: (i, op) for i, op in enumerate(ops)}


def test_mlp_backward_ops_and_deps() -> None:
    graph = mlp()
    step = training_ops(graph, Optimizer.ADAM)
    ops, saved = step.ops, step.saved
    named = by_name(ops)
    expected = [
        "fc1",
        "relu",
        "fc2",
        "add",
        "loss",
        "loss.bwd",
        "add.bwd",
        "fc2.bwd_data",
        "fc2.bwd_weight",
        "relu.bwd",
        "fc1.bwd_weight",
        "adam.update",
    ]
    assert [op.name for op in ops] == expected  # fc1 has no bwd_data: x is a network input
    i_loss, _ = named["loss.bwd"]
    i_add, add = named["add.bwd"]
    assert add.deps == (i_loss,)
    assert {t.name for t in add.writes} == {"fc2.out.grad", "relu.out.grad"}
    i_d2, d2 = named["fc2.bwd_data"]
    # relu.out has two consumers: fc2's dX accumulates into the gradient add.bwd wrote
    assert "relu.out.grad" in {t.name for t in d2.reads}
    assert i_add in d2.deps
    assert d2.gemm == Gemm(1, 4, 16, 16)
    assert d2.flops == 2 * d2.gemm.macs
    _, w2 = named["fc2.bwd_weight"]
    assert w2.gemm == Gemm(1, 16, 16, 4)
    assert w2.phase is Phase.BACKWARD_WEIGHT
    assert named["relu"][0] in w2.deps  # reads the saved relu output
    _, relu = named["relu.bwd"]
    assert set(relu.deps) >= {i_add, i_d2}
    _, w1 = named["fc1.bwd_weight"]
    assert {t.name for t in w1.writes} == {"fc1.weight.grad", "fc1.bias.grad"}
    assert all(t.role is Role.GRADIENT for t in w1.writes)
    update = ops[-1]
    assert update.deps == (named["fc2.bwd_weight"][0], named["fc1.bwd_weight"][0])
    assert saved == {"x", "relu.out", "add.out", "labels"}


def test_matmul_backward_views_follow_the_brief() -> None:
    ops = training_ops(mlp(), None).ops
    named = by_name(ops)
    fc2 = named["fc2"][1].gemm
    assert fc2 is not None
    data, weight = named["fc2.bwd_data"][1].gemm, named["fc2.bwd_weight"][1].gemm
    assert data == Gemm(fc2.batch, fc2.m, fc2.k, fc2.n)  # dX: m=M, n=K, k=N
    assert weight == Gemm(fc2.batch, fc2.k, fc2.n, fc2.m)  # dW: m=K, n=N, k=M
    assert ops[-1].kind is not OpKind.OPTIMIZER  # no optimizer, no update


def test_every_gradient_read_was_written_by_a_dependency(library: Library) -> None:
    for workload, seq in (("resnet50", None), ("bert-base", 32)):
        trace = build_trace(workload, library, Mode.TRAIN, 2, Precision.FP16, seq)
        trace.check()
        writers: dict[str, list[int]] = {}
        producers: dict[str, int] = {}
        for index, op in enumerate(trace.ops):
            for t in op.reads:
                if t.name.endswith(".grad") and t.role is Role.ACTIVATION:
                    assert set(writers[t.name]) <= set(op.deps), (op.name, t.name)
                elif t.role is Role.ACTIVATION and op.phase is not Phase.FORWARD and t.name in producers:
                    assert producers[t.name] in op.deps, (op.name, t.name)
            for t in op.writes:
                writers.setdefault(t.name, []).append(index)
                if op.phase is Phase.FORWARD:
                    producers.setdefault(t.name, index)


def test_optimizer_costs_and_fp32_has_no_master_copy() -> None:
    graph = mlp(Precision.FP32)
    params = graph.parameters
    assert params == 8 * 16 + 16 + 16 * 16
    for optimizer, (state, flops) in OPTIMIZER_COST.items():
        ops = training_ops(graph, optimizer).ops
        update = ops[-1]
        assert update.phase is Phase.UPDATE
        assert update.flops == flops * params
        assert update.bytes_read == params * (4 + 4 + state)
        assert update.bytes_written == params * (4 + state)
    assert OPTIMIZER_COST[Optimizer.SGD_MOMENTUM][0] == 4
    assert OPTIMIZER_COST[Optimizer.ADAM][0] == 8


def test_default_rule_reads_every_input() -> None:
    op = Op(
        "x", OpKind.ELEMENTWISE, Phase.FORWARD, 7, (TensorAccess("a", 4), TensorAccess("b", 4)), (TensorAccess("c", 4),)
    )
    assert default_rule(op) == BackwardRule(("a", "b"), 7)


def test_graph_without_rules_uses_the_default() -> None:
    g = GraphBuilder("imported", Precision.FP16)
    a = TensorAccess("a", 32)
    w = g.weight("w", 16)
    b = g.act("b", 16)
    g.matmul("mm", Gemm(1, 4, 4, 4), (a, w), b)
    c = g.act("c", 16)
    g.add("tanh", OpKind.ELEMENTWISE, 64, (b,), (c,))  # no rule given
    graph = g.graph(grad_outputs=frozenset({"c"}))
    step = training_ops(graph, None)
    ops, saved = step.ops, step.saved
    tanh = by_name(ops)["tanh.bwd"][1]
    assert tanh.flops == 64
    assert {t.name for t in tanh.reads} == {"c.grad", "b"}
    assert saved == {"a", "b"}


def test_memory_training_counts_persistent_saved_and_transient() -> None:
    graph = mlp()
    step = training_ops(graph, Optimizer.SGD_MOMENTUM)
    ops, saved = step.ops, step.saved
    params = graph.parameters
    saved_bytes = 4 * 8 * 2 + 2 * (4 * 16 * 2) + 16  # x, relu.out, add.out, labels
    transient = max(
        sum(
            {
                t.name: t.bytes for t in (*op.reads, *op.writes) if t.role is Role.ACTIVATION and t.name not in saved
            }.values()
        )
        for op in ops
    )
    expected = params * (2 + 2 + 4 + 4) + saved_bytes + transient
    assert training_memory(graph, step, Optimizer.SGD_MOMENTUM) == expected


def test_peak_live_bytes() -> None:
    graph = mlp(with_loss=False)
    # x (64) is dead after fc1; fc1.out (128) after relu; relu.out (128) lives until add
    assert peak_live_bytes(graph.ops) == 128 * 3
    assert inference_memory(graph) == graph.parameters * 2 + 128 * 3


@pytest.mark.parametrize(
    ("precision", "bits"), [(Precision.FP32, 32), (Precision.BF16, 16), (Precision.INT8, 8), (Precision.INT4, 4)]
)
def test_bytes_follow_precision(precision: Precision, bits: int) -> None:
    graph = mlp(precision)
    fc1 = graph.ops[0]
    assert fc1.reads[1].bytes == 8 * 16 * bits // 8
    assert fc1.writes[0].bytes == 4 * 16 * bits // 8
