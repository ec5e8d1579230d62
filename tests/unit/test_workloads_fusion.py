"""Fusion of element-wise epilogues into normalizations (--fusion norm-act)."""

from __future__ import annotations

import pytest

from archsim import simulate
from archsim.errors import UsageError
from archsim.spec.common import Fusion, Precision
from archsim.spec.library import Library
from archsim.workloads import TraceOptions, build_trace
from archsim.workloads.fusion import fuse
from archsim.workloads.graph import ELEMENT_FLOPS, BackwardRule, GraphBuilder
from archsim.workloads.trace import Mode, OpKind, Phase, Role, TensorAccess

LIBRARY = Library(use_env=False)
FUSED = TraceOptions(Fusion.NORM_ACT)


def resnet(mode: Mode, options: TraceOptions | None = None, batch: int = 4):
    return build_trace("resnet50", LIBRARY, mode, batch, Precision.FP16, None, options)


def test_resnet50_inference_fuses_every_norm_with_its_relu_and_residual_add() -> None:
    plain, fused = resnet(Mode.INFER), resnet(Mode.INFER, FUSED)
    kinds = [op.kind for op in fused.ops]
    # 53 convolutions, 53 batch-norms that took in the 49 ReLUs and 16 adds, 2 pools, the fc
    assert len(fused.ops) == 109 == len(plain.ops) - 49 - 16
    assert kinds.count(OpKind.ELEMENTWISE) == 0
    assert kinds.count(OpKind.BATCHNORM) == 53
    names = {op.name for op in fused.ops}
    assert {"bn1+relu", "layer1.0.bn1+relu1", "layer1.0.bn3+add+relu3"} <= names
    assert fused.flops == plain.flops
    assert fused.meta["fusion"] == "norm-act"
    fused.check()


def test_fused_op_reads_both_branches_and_writes_only_the_last_output() -> None:
    fused = resnet(Mode.INFER, FUSED)
    op = next(op for op in fused.ops if op.name == "layer1.0.bn3+add+relu3")
    read = {t.name for t in op.reads}
    assert {"layer1.0.conv3.out", "layer1.0.downsample.1.out"} <= read
    assert [t.name for t in op.writes] == ["layer1.0.relu3.out"]
    # the tensors passed inside the chain never reach memory
    assert "layer1.0.bn3.out" not in read
    assert "layer1.0.add.out" not in read
    # it runs where the add ran: after the shortcut's batch-norm
    index = [o.name for o in fused.ops].index(op.name)
    assert [o.name for o in fused.ops].index("layer1.0.downsample.1") < index


def test_fusion_cuts_main_memory_traffic_and_the_step_time() -> None:
    plain, fused = resnet(Mode.INFER), resnet(Mode.INFER, FUSED)
    assert sum(op.bytes for op in fused.ops) < sum(op.bytes for op in plain.ops)
    slow = simulate("v100", "resnet50", batch=4, library=LIBRARY, fusion="none")
    fast = simulate("v100", "resnet50", batch=4, library=LIBRARY, fusion="norm-act")
    assert fast.step_time_s < slow.step_time_s
    assert fast.flops == slow.flops


def test_training_derives_one_backward_op_per_fused_op() -> None:
    fused = resnet(Mode.TRAIN, FUSED)
    names = {op.name for op in fused.ops}
    assert "layer1.0.bn3+add+relu3.bwd" in names
    assert not any(n.endswith("relu3.bwd") and "+" not in n for n in names)
    bwd = next(op for op in fused.ops if op.name == "layer1.0.bn3+add+relu3.bwd")
    # it writes the gradients of both branches, the scale and the shift
    written = {t.name for t in bwd.writes}
    assert {"layer1.0.conv3.out.grad", "layer1.0.downsample.1.out.grad"} <= written
    assert {"layer1.0.bn3.weight.grad", "layer1.0.bn3.bias.grad"} <= written
    plain = resnet(Mode.TRAIN)
    assert sum(op.flops for op in fused.ops) == sum(op.flops for op in plain.ops)
    fused.check()


def test_a_chain_whose_backward_needs_an_inside_tensor_is_not_fused() -> None:
    g = GraphBuilder("t", Precision.FP16)
    x = TensorAccess("x", 64)
    gamma = g.weight("ln.weight", 16)
    normed = g.act("ln.out", 32)
    g.add("ln", OpKind.LAYERNORM, 160, (x, gamma), (normed,), rule=BackwardRule(("x",), 320))
    out = g.act("tanh.out", 32)
    # tanh's backward reads its input, which fusion would keep out of memory
    g.add("tanh", OpKind.ELEMENTWISE, 128, (normed,), (out,), rule=BackwardRule(("ln.out",), 96))
    graph = g.graph(grad_outputs=frozenset({"tanh.out"}))
    assert fuse(graph, Fusion.NORM_ACT) is graph


def test_a_norm_output_with_two_readers_is_not_fused() -> None:
    g = GraphBuilder("t", Precision.FP16)
    x = TensorAccess("x", 64)
    normed = g.act("ln.out", 32)
    g.add("ln", OpKind.LAYERNORM, 160, (x,), (normed,))
    relu = g.act("relu.out", 32)
    g.elementwise("relu", "relu", (normed,), relu, 32, saved=("relu.out",))
    g.elementwise("add", "add", (normed, relu), g.act("add.out", 32), 32)
    graph = g.graph()
    fused = fuse(graph, Fusion.NORM_ACT)
    assert [op.name for op in fused.ops] == ["ln", "relu", "add"]


def test_fused_rule_sums_flops_and_saves_the_union() -> None:
    g = GraphBuilder("t", Precision.FP16)
    x = TensorAccess("x", 64)
    gamma = g.weight("bn.weight", 2)
    stats = TensorAccess("bn.saved_stats", 16)
    running = TensorAccess("bn.running_stats", 16, Role.STATE)
    normed = g.act("bn.out", 32)
    g.add(
        "bn",
        OpKind.BATCHNORM,
        160,
        (x, gamma, running),
        (normed, stats, running),
        rule=BackwardRule(("x", "bn.weight", "bn.saved_stats"), 320),
    )
    relu = g.act("relu.out", 32)
    g.elementwise("relu", "relu", (normed,), relu, 32, saved=("relu.out",))
    fused = fuse(g.graph(grad_outputs=frozenset({"relu.out"})), Fusion.NORM_ACT)
    (op,) = fused.ops
    assert op.flops == 160 + ELEMENT_FLOPS["relu"][0] * 32
    assert [t.name for t in op.writes] == ["relu.out", "bn.saved_stats", "bn.running_stats"]
    rule = fused.rule(0)
    assert rule.saved == ("x", "bn.weight", "bn.saved_stats", "relu.out")
    assert rule.flops == 320 + ELEMENT_FLOPS["relu"][1] * 32
    assert op.phase is Phase.FORWARD


def test_fusion_is_refused_for_a_trace_file_and_unknown_values(tmp_path) -> None:
    from archsim.workloads import write_trace

    path = tmp_path / "t.yaml"
    write_trace(resnet(Mode.INFER), path)
    with pytest.raises(UsageError, match="already built"):
        build_trace(str(path), LIBRARY, Mode.INFER, None, Precision.FP16, None, FUSED)
    with pytest.raises(UsageError, match="--fusion"):
        simulate("v100", "resnet50", batch=1, library=LIBRARY, fusion="everything")
