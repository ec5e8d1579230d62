"""Inline GEMM workloads (``gemm:MxNxK``, ``gemm:BxMxNxK``)."""

from __future__ import annotations

import pytest

from archsim.errors import UsageError
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.workloads import build_trace
from archsim.workloads.gemm import is_gemm, parse_gemm
from archsim.workloads.trace import Gemm, Mode, Phase, Role


@pytest.fixture(scope="module")
def library() -> Library:
    return Library(use_env=False)


def test_parse() -> None:
    assert parse_gemm("gemm:1024x512x256") == Gemm(1, 1024, 512, 256)
    assert parse_gemm("gemm:8x64x32x16") == Gemm(8, 64, 32, 16)
    assert is_gemm("GEMM:1x2x3")
    assert not is_gemm("resnet50")


@pytest.mark.parametrize("text", ["gemm:", "gemm:1x2", "gemm:0x2x3", "gemm:1x2x3x4x5", "gemm:ax2x3", "gemm:-1x2x3"])
def test_bad_shapes_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError, match="gemm:MxNxK"):
        parse_gemm(text)


def test_inference_is_one_matmul(library: Library) -> None:
    trace = build_trace("gemm:128x256x64", library, Mode.INFER, None, Precision.FP16, None)
    assert trace.batch == 1
    assert trace.seq_len is None
    (op,) = trace.ops
    assert op.gemm == Gemm(1, 128, 256, 64)
    assert op.flops == 2 * 128 * 256 * 64
    assert [t.role for t in op.reads] == [Role.ACTIVATION, Role.WEIGHT]
    assert op.reads[1].bytes == 64 * 256 * 2
    assert trace.parameters == 64 * 256
    assert trace.memory_bytes == 64 * 256 * 2 + (128 * 64 + 128 * 256) * 2


def test_training_is_forward_and_two_backward_products(library: Library) -> None:
    trace = build_trace("gemm:4x128x256x64", library, Mode.TRAIN, 1, Precision.BF16, None)
    trace.check()
    fwd, data, weight = trace.ops
    assert fwd.gemm == Gemm(4, 128, 256, 64)
    assert (data.phase, data.gemm) == (Phase.BACKWARD_DATA, Gemm(4, 128, 64, 256))
    assert (weight.phase, weight.gemm) == (Phase.BACKWARD_WEIGHT, Gemm(4, 64, 256, 128))
    assert trace.flops == 3 * fwd.flops
    assert trace.parameters == 4 * 64 * 256
    assert data.deps == weight.deps == (0,)  # dC arrives from outside, after the forward
    assert trace.name == "gemm:4x128x256x64"


def test_batch_and_seq_len_are_refused(library: Library) -> None:
    with pytest.raises(UsageError, match="gemm:BxMxNxK") as err:
        build_trace("gemm:8x8x8", library, Mode.TRAIN, 8, Precision.FP16, None)
    assert err.value.field == "--batch"
    with pytest.raises(UsageError) as err:
        build_trace("gemm:8x8x8", library, Mode.TRAIN, None, Precision.FP16, 128)
    assert err.value.field == "--seq-len"
