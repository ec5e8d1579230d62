"""ResNet forward graphs: closed-form MACs and parameters, op structure, training and memory."""

from __future__ import annotations

import pytest

from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.spec.model import ModelSpec, ResNetSection
from archsim.workloads import build_trace
from archsim.workloads.resnet import resnet_graph
from archsim.workloads.trace import Mode, Op, OpKind, Phase, Role, Trace

RESNET50_MACS_PER_IMAGE = 4_089_184_256
"""conv + fc MACs of ResNet-50 v1.5 at 224x224 (closed form below; published as ~4.09 G)."""
RESNET50_PARAMETERS = 25_557_032
"""torchvision resnet50: convolutions, batchnorm gamma/beta, fc weight and bias."""


@pytest.fixture(scope="module")
def library() -> Library:
    return Library(use_env=False)


@pytest.fixture(scope="module")
def spec(library: Library) -> ModelSpec:
    return library.model("resnet50")


@pytest.fixture(scope="module")
def train256(library: Library) -> Trace:
    return build_trace("resnet50", library, Mode.TRAIN, 256, Precision.FP16, None)


def closed_form_macs(cfg: ResNetSection) -> int:
    """conv + fc MACs per image, layer by layer, independent of the builder."""
    size = cfg.image_size // 2  # 7x7 stride-2 stem, padding 3
    macs = size * size * cfg.stem_channels * cfg.in_channels * 7 * 7
    size //= 2  # 3x3 stride-2 max pool, padding 1
    cin = cfg.stem_channels
    for stage, (blocks, width) in enumerate(zip(cfg.blocks, cfg.widths, strict=True)):
        cout = width * cfg.expansion
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            out = size // stride
            first = size if cfg.stride_on_3x3 else out
            macs += first * first * width * cin + out * out * (width * width * 9 + cout * width)
            if block == 0:
                macs += out * out * cout * cin
            size, cin = out, cout
    return macs + cin * cfg.classes


def closed_form_parameters(cfg: ResNetSection) -> int:
    params = cfg.stem_channels * cfg.in_channels * 49 + 2 * cfg.stem_channels
    cin = cfg.stem_channels
    for blocks, width in zip(cfg.blocks, cfg.widths, strict=True):
        cout = width * cfg.expansion
        for block in range(blocks):
            params += cin * width + 9 * width * width + width * cout + 2 * (2 * width + cout)
            if block == 0:
                params += cin * cout + 2 * cout
            cin = cout
    return params + cin * cfg.classes + cfg.classes


def matrix_flops(ops: tuple[Op, ...], phase: Phase | None = None) -> int:
    return sum(op.flops for op in ops if op.kind.is_matrix and (phase is None or op.phase is phase))


def test_resnet50_forward_macs_per_image(spec: ModelSpec) -> None:
    assert spec.resnet is not None
    assert closed_form_macs(spec.resnet) == RESNET50_MACS_PER_IMAGE
    graph = resnet_graph(spec, Mode.INFER, 1, Precision.FP16)
    assert matrix_flops(graph.ops) == 2 * RESNET50_MACS_PER_IMAGE
    assert abs(RESNET50_MACS_PER_IMAGE / 4.09e9 - 1) < 0.01


@pytest.mark.parametrize("batch", [1, 3, 64])
def test_forward_macs_scale_with_batch(spec: ModelSpec, batch: int) -> None:
    graph = resnet_graph(spec, Mode.TRAIN, batch, Precision.BF16)
    assert matrix_flops(graph.ops) == 2 * batch * RESNET50_MACS_PER_IMAGE


def test_resnet_v1_puts_the_stride_on_the_first_1x1(spec: ModelSpec) -> None:
    assert spec.resnet is not None
    v1 = spec.model_copy(update={"resnet": spec.resnet.model_copy(update={"stride_on_3x3": False})})
    assert v1.resnet is not None
    graph = resnet_graph(v1, Mode.INFER, 1, Precision.FP16)
    assert matrix_flops(graph.ops) == 2 * closed_form_macs(v1.resnet) < 2 * RESNET50_MACS_PER_IMAGE
    conv1 = next(op for op in graph.ops if op.name == "layer2.0.conv1")
    assert conv1.conv is not None
    assert conv1.conv.stride == 2


def test_resnet50_parameters(spec: ModelSpec) -> None:
    assert spec.resnet is not None
    assert closed_form_parameters(spec.resnet) == RESNET50_PARAMETERS
    for mode in (Mode.TRAIN, Mode.INFER):
        assert resnet_graph(spec, mode, 2, Precision.FP16).parameters == RESNET50_PARAMETERS


def test_ops_are_named_like_torchvision_and_v15_strides_the_3x3(spec: ModelSpec) -> None:
    graph = resnet_graph(spec, Mode.INFER, 2, Precision.FP16)
    ops = {op.name: op for op in graph.ops}
    for name in (
        "conv1",
        "bn1",
        "relu",
        "maxpool",
        "layer1.0.downsample.0",
        "layer2.0.conv2",
        "layer2.0.bn2",
        "layer4.2.add",
        "avgpool",
        "fc",
    ):
        assert name in ops
    conv2 = ops["layer2.0.conv2"].conv
    assert conv2 is not None
    assert conv2.stride == 2
    assert (conv2.h, conv2.p) == (56, 28)
    assert ops["layer2.0.conv1"].conv is not None
    assert ops["layer2.0.conv1"].conv.stride == 1
    assert len([op for op in graph.ops if op.kind is OpKind.CONV]) == 53
    assert ops["bn1"].kind is OpKind.BATCHNORM
    assert ops["maxpool"].kind is OpKind.POOL
    assert "loss" not in ops


def test_conv_gemm_view_and_bytes(spec: ModelSpec) -> None:
    batch, precision = 4, Precision.FP16
    graph = resnet_graph(spec, Mode.INFER, batch, precision)
    for op in graph.ops:
        if op.kind is OpKind.CONV:
            c, g = op.conv, op.gemm
            assert c is not None
            assert g is not None
            assert (g.batch, g.m, g.n, g.k) == (1, c.n * c.p * c.q, c.k, c.c * c.r * c.s)
            assert c.n == batch
            assert op.flops == 2 * g.macs
            x, w = op.reads
            assert x.bytes == c.n * c.c * c.h * c.w * 2
            assert x.role is Role.ACTIVATION
            assert w.bytes == c.k * c.c * c.r * c.s * 2
            assert w.role is Role.WEIGHT
            assert op.writes[0].bytes == c.n * c.k * c.p * c.q * 2
        if op.kind is OpKind.BATCHNORM:
            assert [t.role for t in op.reads] == [Role.ACTIVATION, Role.WEIGHT, Role.WEIGHT, Role.STATE]
            assert op.flops == 2 * op.writes[0].bytes // 2  # inference: one fused scale-shift
    fc = graph.ops[-1]
    assert fc.name == "fc"
    assert fc.gemm is not None
    assert (fc.gemm.m, fc.gemm.n, fc.gemm.k) == (batch, 1000, 2048)


def test_deps_point_to_producers(spec: ModelSpec) -> None:
    graph = resnet_graph(spec, Mode.TRAIN, 2, Precision.FP16)
    index = {op.name: i for i, op in enumerate(graph.ops)}
    add = graph.ops[index["layer1.1.add"]]
    assert add.deps == (index["layer1.0.relu3"], index["layer1.1.bn3"])
    assert graph.ops[index["layer1.0.add"]].deps == (index["layer1.0.bn3"], index["layer1.0.downsample.1"])


def test_training_trace_structure(train256: Trace) -> None:
    train256.check()
    ops = train256.ops
    names = {op.name for op in ops}
    convs = [op for op in ops if op.kind is OpKind.CONV and op.phase is Phase.FORWARD]
    for op in convs:
        assert f"{op.name}.bwd_weight" in names
        assert (f"{op.name}.bwd_data" in names) == (op.name != "conv1")  # the image needs no gradient
    assert "loss" in names
    assert "loss.bwd" in names
    assert ops[-1].kind is OpKind.OPTIMIZER
    assert ops[-1].phase is Phase.UPDATE
    assert train256.meta["optimizer"] == "sgd-momentum"


def test_conv_backward_views(train256: Trace) -> None:
    ops = {op.name: op for op in train256.ops}
    for name in ("layer1.0.conv2", "layer3.0.conv2", "layer3.0.downsample.0"):
        c = ops[name].conv
        assert c is not None
        data, weight = ops[f"{name}.bwd_data"], ops[f"{name}.bwd_weight"]
        assert data.conv == c
        assert weight.conv == c
        assert weight.gemm is not None
        assert (weight.gemm.m, weight.gemm.n, weight.gemm.k) == (
            c.c * c.r * c.s,
            c.k,
            c.n * c.p * c.q,
        )
        assert data.gemm is not None
        if c.stride == 1:
            assert (data.gemm.m, data.gemm.n, data.gemm.k) == (c.n * c.h * c.w, c.c, c.k * c.r * c.s)
        else:
            assert (data.gemm.m, data.gemm.n, data.gemm.k) == (c.n * c.p * c.q, c.c * c.r * c.s, c.k)
        assert data.flops == weight.flops == ops[name].flops  # same MACs as the forward
        assert weight.phase is Phase.BACKWARD_WEIGHT
        assert data.phase is Phase.BACKWARD_DATA


def test_training_flops_about_three_times_forward(train256: Trace, spec: ModelSpec) -> None:
    forward = matrix_flops(train256.ops, Phase.FORWARD)
    assert forward == 2 * 256 * RESNET50_MACS_PER_IMAGE
    stem = next(op for op in train256.ops if op.name == "conv1").flops
    assert matrix_flops(train256.ops) == 3 * forward - stem  # no dX for the image
    assert 2.95 < train256.flops / sum(op.flops for op in train256.ops if op.phase is Phase.FORWARD) < 3.05


def test_update_op(train256: Trace) -> None:
    update = train256.ops[-1]
    params = RESNET50_PARAMETERS
    assert update.flops == 6 * params
    assert update.bytes_read == params * (4 + 2 + 4)  # fp32 master, fp16 gradient, fp32 momentum
    assert update.bytes_written == params * (4 + 4 + 2)  # master, momentum, fp16 copy
    writers = [i for i, op in enumerate(train256.ops) if any(t.role is Role.GRADIENT for t in op.writes)]
    assert list(update.deps) == writers
    assert all(train256.ops[i].name.endswith((".bwd_weight", ".bwd")) for i in writers)


def test_resnet50_b256_fp16_training_fits_16_gib(train256: Trace) -> None:
    assert train256.memory_bytes < 16 * 2**30
    assert train256.memory_bytes > 8 * 2**30  # saved activations dominate: ~21 M elements per image
    weights_and_optimizer = RESNET50_PARAMETERS * (2 + 2 + 4 + 4)
    assert train256.memory_bytes > weights_and_optimizer


def test_inference_memory_is_small(library: Library) -> None:
    trace = build_trace("resnet50", library, Mode.INFER, 128, Precision.FP16, None)
    weights = RESNET50_PARAMETERS * 2
    largest_pair = 128 * (64 * 112 * 112) * 2 * 2  # stem conv output and bn output live together
    assert weights + largest_pair <= trace.memory_bytes < weights + 4 * largest_pair
