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


def test_channels_first_transposes_each_convolution_in_and_out() -> None:
    plain = build("resnet50", Mode.INFER)
    nchw = build("resnet50", Mode.INFER, Rewrite.CHANNELS_FIRST)
    convs = [op for op in plain.ops if op.kind is OpKind.CONV]
    assert len(convs) == 53
    assert len(nchw.ops) == len(plain.ops) + 2 * len(convs)
    assert nchw.flops == plain.flops  # a transpose computes nothing
    by_name = {op.name: op for op in nchw.ops}
    for conv in convs:
        before, after = by_name[f"{conv.name}.nchw_to_nhwc"], by_name[f"{conv.name}.nhwc_to_nchw"]
        assert before.kind is after.kind is OpKind.ELEMENTWISE
        assert before.flops == after.flops == 0
        x, y = conv.reads[0], conv.writes[0]
        assert [t.bytes for t in (*before.reads, *before.writes)] == [x.bytes, x.bytes]
        assert [t.bytes for t in (*after.reads, *after.writes)] == [y.bytes, y.bytes]
        # the convolution reads the transposed copy, its consumers the output transposed back
        assert by_name[conv.name].reads[0].name == before.writes[0].name
        assert after.writes[0].name == y.name
        assert nchw.ops.index(before) < nchw.ops.index(by_name[conv.name]) < nchw.ops.index(after)


def test_channels_first_transposes_the_gradients_too_and_leaves_transformers_alone() -> None:
    nchw = build("resnet50", Mode.TRAIN, Rewrite.CHANNELS_FIRST)
    transposes = [op for op in nchw.ops if ".nchw_to_nhwc" in op.name or ".nhwc_to_nchw" in op.name]
    forward = [op for op in transposes if not op.phase.is_backward]
    backward = [op for op in transposes if op.phase.is_backward]
    assert len(forward) == 2 * 53
    # every transpose's gradient is transposed back, but the image's: the input needs no gradient
    assert len(backward) == 2 * 53 - 1 and "conv1.nchw_to_nhwc.bwd" not in {op.name for op in backward}
    # every op keeps its FLOPs; a transposed gradient that meets another at a branch adds them up
    flops = {op.name: op.flops for op in nchw.ops}
    assert all(flops[op.name] == op.flops for op in build("resnet50", Mode.TRAIN).ops)
    assert all(op.flops == 0 for op in forward)
    bert = build("bert-base", Mode.TRAIN, Rewrite.CHANNELS_FIRST)
    assert [op.name for op in bert.ops] == [op.name for op in build("bert-base", Mode.TRAIN).ops]


def test_the_stacks_keep_nchw_at_tf32_only() -> None:
    tf32 = simulate("a100", "resnet50", mode="train", batch=32, precision="tf32", library=LIBRARY, software="pytorch")
    fp16 = simulate("a100", "resnet50", mode="train", batch=32, precision="fp16", library=LIBRARY, software="pytorch")
    transposes = [layer for layer in tf32.layers if layer.name.endswith("nchw_to_nhwc")]
    assert transposes and all(layer.flops == 0 for layer in transposes)
    assert not any(layer.name.endswith("nchw_to_nhwc") for layer in fp16.layers)
    for name in ("pytorch", "mxnet", "tensorflow-xla"):
        stack = LIBRARY.software(name)
        assert Rewrite.CHANNELS_FIRST in stack.rewrites_for("train", Precision.TF32)
        assert Rewrite.CHANNELS_FIRST not in stack.rewrites_for("train", Precision.FP16)
