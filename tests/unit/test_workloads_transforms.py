"""Trace transforms: gradient all-reduces inserted as communication ops, and the compute-only view."""

from __future__ import annotations

import pytest

from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.workloads import build_trace
from archsim.workloads.trace import CommGroup, CommKind, CommOp, Mode, OpKind, Phase, Role, Trace
from archsim.workloads.transforms import compute_only, gradient_buckets, with_gradient_all_reduces

BUCKET = 10 * 2**20


@pytest.fixture(scope="module")
def resnet_train(library: Library) -> Trace:
    return build_trace("resnet50", library, Mode.TRAIN, 2, Precision.FP16, None)


def test_one_all_reduce_per_bucket_right_after_its_last_writer(resnet_train: Trace) -> None:
    buckets = gradient_buckets(resnet_train.ops, BUCKET)
    step = with_gradient_all_reduces(resnet_train, BUCKET)
    step.check()
    reduces = [i for i, op in enumerate(step.ops) if op.kind is OpKind.COMM]
    assert len(reduces) == len(buckets) > 1
    assert len(step.ops) == len(resnet_train.ops) + len(buckets)
    compute = [i for i, op in enumerate(step.ops) if op.kind is not OpKind.COMM]
    assert [step.ops[i].name for i in compute] == [op.name for op in resnet_train.ops]
    for k, (i, bucket) in enumerate(zip(reduces, buckets, strict=True)):
        op = step.ops[i]
        assert op.name == f"all-reduce b{k}" and op.comm is not None
        assert op.comm == CommOp(CommKind.ALL_REDUCE, bucket.bytes, CommGroup.DATA_PARALLEL)
        assert op.deps == tuple(compute[w] for w in bucket.writers)
        assert max(op.deps) < i and all(step.ops[j].kind is OpKind.COMM for j in range(max(op.deps) + 1, i))
    gradients = {t.name: t.bytes for op in resnet_train.ops for t in op.writes if t.role is Role.GRADIENT}
    assert sum(step.ops[i].comm.bytes for i in reduces if step.ops[i].comm) == sum(gradients.values())
    updates = [op for op in step.ops if op.phase is Phase.UPDATE]
    assert updates and all(set(reduces) <= set(op.deps) for op in updates)


def test_without_overlap_every_all_reduce_waits_for_the_whole_backward_pass(resnet_train: Trace) -> None:
    step = with_gradient_all_reduces(resnet_train, BUCKET, overlap=False)
    step.check()
    writers = sorted({w for b in gradient_buckets(resnet_train.ops, BUCKET) for w in b.writers})
    reduces = [op for op in step.ops if op.kind is OpKind.COMM]
    assert all(op.deps == tuple(writers) for op in reduces)  # no op is inserted before the last writer


def test_compute_only_drops_the_all_reduces_and_keeps_every_wait(resnet_train: Trace) -> None:
    step = with_gradient_all_reduces(resnet_train, BUCKET)
    alone = compute_only(step)
    assert not alone.has_comm
    for op, original in zip(alone.ops, resnet_train.ops, strict=True):
        if op.phase is Phase.UPDATE:  # it waited for the all-reduces: now for their writers
            assert set(original.deps) <= set(op.deps)
        else:
            assert op == original
    assert compute_only(resnet_train) is resnet_train


def test_inference_has_no_gradient_to_reduce(library: Library) -> None:
    trace = build_trace("resnet50", library, Mode.INFER, 2, Precision.FP16, None)
    assert with_gradient_all_reduces(trace) is trace
