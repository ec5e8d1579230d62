"""Graph rewrites of software stacks (archsim/workloads/rewrites.py) on the built-in networks."""

from __future__ import annotations

from archsim import simulate
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.spec.software import Rewrite
from archsim.workloads import build_trace
from archsim.workloads.options import TraceOptions
from archsim.workloads.trace import Mode, OpKind, Trace

LIBRARY = Library(use_env=False)


def build(workload: str, mode: Mode, *rewrites: Rewrite, batch: int = 2) -> Trace:
    options = TraceOptions(rewrites=frozenset(rewrites))
    seq = 128 if workload.startswith("bert") else None
    return build_trace(workload, LIBRARY, mode, batch, Precision.FP16, seq, options)


def kinds(trace: Trace) -> list[OpKind]:
    return [op.kind for op in trace.ops]


def test_fold_batchnorm_removes_every_inference_batchnorm_after_a_convolution() -> None:
    plain = build("resnet50", Mode.INFER)
    folded = build("resnet50", Mode.INFER, Rewrite.FOLD_BATCHNORM)
    batchnorms = kinds(plain).count(OpKind.BATCHNORM)
    assert batchnorms == 53 and kinds(folded).count(OpKind.BATCHNORM) == 0
    assert len(folded.ops) == len(plain.ops) - batchnorms
    bn_flops = sum(op.flops for op in plain.ops if op.kind is OpKind.BATCHNORM)
    assert folded.flops == plain.flops - bn_flops
    assert sum(op.bytes for op in folded.ops) < sum(op.bytes for op in plain.ops)
    # every consumer still finds the tensor it reads: a folded convolution writes the batch-norm's output
    written = {t.name for op in folded.ops for t in op.writes}
    assert all(t.name in written for op in folded.ops for t in op.reads if t.name.endswith(".out"))


def test_fold_batchnorm_leaves_training_alone() -> None:
    plain = build("resnet50", Mode.TRAIN)
    assert kinds(build("resnet50", Mode.TRAIN, Rewrite.FOLD_BATCHNORM)) == kinds(plain)


def test_fuse_elementwise_joins_activations_to_their_producers() -> None:
    plain = build("resnet50", Mode.INFER, Rewrite.FOLD_BATCHNORM)
    fused = build("resnet50", Mode.INFER, Rewrite.FOLD_BATCHNORM, Rewrite.FUSE_ELEMENTWISE)
    assert kinds(fused).count(OpKind.ELEMENTWISE) == 0 < kinds(plain).count(OpKind.ELEMENTWISE)
    assert fused.flops == plain.flops
    assert sum(op.bytes for op in fused.ops) < sum(op.bytes for op in plain.ops)


def test_in_training_no_matrix_op_takes_an_epilogue() -> None:
    plain = build("bert-base", Mode.TRAIN)
    fused = build("bert-base", Mode.TRAIN, Rewrite.FUSE_ELEMENTWISE)
    matrix = [op for op in fused.ops if op.kind.is_matrix]
    assert len(matrix) == len([op for op in plain.ops if op.kind.is_matrix])
    assert all("+" not in op.name for op in matrix)
    assert len(fused.ops) < len(plain.ops)
    assert fused.flops == plain.flops


def test_fuse_attention_keeps_the_score_matrix_out_of_memory() -> None:
    plain = build("bert-base", Mode.INFER)
    fused = build("bert-base", Mode.INFER, Rewrite.FUSE_ATTENTION)
    assert kinds(fused).count(OpKind.SOFTMAX) == 0 < kinds(plain).count(OpKind.SOFTMAX)
    attention = [op for op in fused.ops if op.name.endswith(".fused_attention")]
    assert len(attention) == kinds(plain).count(OpKind.SOFTMAX) == 12
    assert fused.flops == plain.flops
    written = {t.name for op in fused.ops for t in op.writes}
    assert not any(name.endswith((".scores.out", ".softmax.out")) for name in written)


def test_tensorrt_inference_is_faster_than_the_framework_on_the_same_chip() -> None:
    framework = simulate("a100", "resnet50", batch=64, precision="int8", library=LIBRARY, software="mxnet")
    engine = simulate("a100", "resnet50", batch=64, precision="int8", library=LIBRARY, software="tensorrt")
    assert engine.step_time_s < framework.step_time_s
    assert len(engine.layers) < len(framework.layers)
