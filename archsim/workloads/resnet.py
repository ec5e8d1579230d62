"""The forward graph of a bottleneck ResNet (ResNet-50 v1.5 and relatives) from its ModelSpec.

Ops, named as torchvision names the modules (``conv1``, ``bn1``, ``layer2.0.conv2``,
``layer2.0.downsample.0``, ``fc``), in execution order:

* stem: 7x7 stride-2 convolution, batchnorm, ReLU, 3x3 stride-2 max pool (padding 1);
* per bottleneck block: 1x1 conv, bn, ReLU, 3x3 conv, bn, ReLU, 1x1 conv (expansion x width), bn,
  a projection shortcut (1x1 conv + bn) in the first block of each stage, the residual add, ReLU.
  The first block of every stage but the first downsamples by 2, on the 3x3 convolution when
  ``stride_on_3x3`` (v1.5) and on the first 1x1 otherwise (v1);
* global average pool, fully connected layer (with bias) to ``classes`` logits;
* for training, a softmax-cross-entropy loss (appended by the training derivation).

Each convolution carries its :class:`~archsim.workloads.trace.ConvShape` and the implicit-GEMM view
``m = N*P*Q, n = K, k = C*R*S``; convolutions have no bias (batchnorm follows). FLOPs: 2 per MAC for
conv and fc; batchnorm 5 per element in training (batch statistics) and 2 in inference (running
statistics folded into one scale-shift); ReLU and the residual add 1 per element; max pool 8 compares
per output; average pool 1 per input element. Batchnorm gamma and beta are weights (trainable); the
running mean and variance are fp32 state, not parameters. ResNet-50 v1.5 at 224x224 comes to
4,089,184,256 conv+fc MACs per image and 25,557,032 parameters.
"""

from __future__ import annotations

from archsim.spec.common import Precision
from archsim.spec.model import ModelSpec, ResNetSection
from archsim.workloads.graph import ELEMENT_FLOPS, INT_BYTES, STAT_BYTES, BackwardRule, ForwardGraph, GraphBuilder
from archsim.workloads.trace import ConvShape, Gemm, Mode, OpKind, Role, TensorAccess

INPUT = "input"
"""Name of the image batch tensor (``N x C x H x W``), the network input."""
LABELS = "labels"
"""Name of the int32 class-label tensor read by the loss."""


class _ResNet:
    """Builds the ops of one ResNet forward pass; ``x`` is the running activation and its shape."""

    def __init__(self, spec: ModelSpec, cfg: ResNetSection, mode: Mode, batch: int, precision: Precision) -> None:
        self.g = GraphBuilder(spec.name, precision)
        self.cfg = cfg
        self.train = mode is Mode.TRAIN
        self.n = batch

    def conv(
        self, name: str, x: TensorAccess, shape: tuple[int, int, int], k: int, r: int, stride: int, pad: int
    ) -> tuple[TensorAccess, tuple[int, int, int]]:
        """Convolution without bias; returns the output tensor and its (channels, height, width)."""
        c, h, w = shape
        conv = ConvShape(self.n, c, h, w, k, r, r, stride, pad)
        p, q = conv.p, conv.q
        weight = self.g.weight(f"{name}.weight", k * c * r * r)
        out = self.g.act(f"{name}.out", self.n * k * p * q)
        self.g.matmul(name, Gemm(1, self.n * p * q, k, c * r * r), (x, weight), out, conv=conv)
        return out, (k, p, q)

    def bn(self, name: str, x: TensorAccess, shape: tuple[int, int, int]) -> TensorAccess:
        """Batchnorm: batch statistics in training (saved for backward), running ones in inference."""
        g = self.g
        c = shape[0]
        elements = self.n * c * shape[1] * shape[2]
        gamma = g.weight(f"{name}.weight", c)
        beta = g.weight(f"{name}.bias", c)
        running = TensorAccess(f"{name}.running_stats", 2 * c * STAT_BYTES, Role.STATE)
        out = g.act(f"{name}.out", elements)
        if not self.train:
            flops = ELEMENT_FLOPS["norm_infer"][0] * elements
            g.add(name, OpKind.BATCHNORM, flops, (x, gamma, beta, running), (out,))
            return out
        stats = TensorAccess(f"{name}.saved_stats", 2 * c * STAT_BYTES)
        fwd, bwd = ELEMENT_FLOPS["norm"]
        rule = BackwardRule((x.name, gamma.name, stats.name), bwd * elements)
        g.add(name, OpKind.BATCHNORM, fwd * elements, (x, gamma, beta, running), (out, stats, running), rule=rule)
        return out

    def relu(self, name: str, x: TensorAccess) -> TensorAccess:
        """ReLU; its backward needs only its output (so an in-place ReLU saves no extra copy)."""
        out = self.g.act(f"{name}.out", self.g.elements(x))
        self.g.elementwise(name, "relu", (x,), out, self.g.elements(x), saved=(out.name,))
        return out

    def conv_bn(
        self, conv: str, bn: str, x: TensorAccess, shape: tuple[int, int, int], k: int, r: int, stride: int
    ) -> tuple[TensorAccess, tuple[int, int, int]]:
        """Convolution (padding ``r // 2``) followed by batchnorm."""
        y, shape = self.conv(conv, x, shape, k, r, stride, r // 2)
        return self.bn(bn, y, shape), shape

    def bottleneck(
        self, prefix: str, x: TensorAccess, shape: tuple[int, int, int], width: int, stride: int
    ) -> tuple[TensorAccess, tuple[int, int, int]]:
        """One bottleneck block; a projection shortcut when the stride or channel count changes."""
        cout = width * self.cfg.expansion
        s1, s3 = (1, stride) if self.cfg.stride_on_3x3 else (stride, 1)
        y, s = self.conv_bn(f"{prefix}.conv1", f"{prefix}.bn1", x, shape, width, 1, s1)
        y = self.relu(f"{prefix}.relu1", y)
        y, s = self.conv_bn(f"{prefix}.conv2", f"{prefix}.bn2", y, s, width, 3, s3)
        y = self.relu(f"{prefix}.relu2", y)
        y, s = self.conv_bn(f"{prefix}.conv3", f"{prefix}.bn3", y, s, cout, 1, 1)
        shortcut = x
        if stride != 1 or shape[0] != cout:
            shortcut, _ = self.conv_bn(f"{prefix}.downsample.0", f"{prefix}.downsample.1", x, shape, cout, 1, stride)
        elements = self.g.elements(y)
        total = self.g.act(f"{prefix}.add.out", elements)
        self.g.elementwise(f"{prefix}.add", "add", (y, shortcut), total, elements)
        return self.relu(f"{prefix}.relu3", total), s

    def pools_and_head(self, x: TensorAccess, shape: tuple[int, int, int]) -> ForwardGraph:
        """Global average pool, fc and the loss; returns the finished graph."""
        g, n = self.g, self.n
        c, h, w = shape
        pooled = g.act("avgpool.out", n * c)
        g.add("avgpool", OpKind.POOL, n * c * h * w, (x,), (pooled,), rule=BackwardRule((), n * c * h * w))
        classes = self.cfg.classes
        weight = g.weight("fc.weight", classes * c)
        bias = g.weight("fc.bias", classes)
        logits = g.act("fc.out", n * classes)
        g.matmul("fc", Gemm(1, n, classes, c), (pooled, weight, bias), logits)
        labels = TensorAccess(LABELS, n * INT_BYTES)
        loss, rule = g.loss_op("loss", (logits, labels), n * classes, (logits.name, labels.name))
        return g.graph(loss, rule)

    def build(self) -> ForwardGraph:
        """Every op of the forward pass."""
        cfg, g, n = self.cfg, self.g, self.n
        shape = (cfg.in_channels, cfg.image_size, cfg.image_size)
        x = TensorAccess(INPUT, g.size(n * shape[0] * shape[1] * shape[2]))
        y, shape = self.conv_bn("conv1", "bn1", x, shape, cfg.stem_channels, 7, 2)
        y = self.relu("relu", y)
        pool = ConvShape(n, shape[0], shape[1], shape[2], shape[0], 3, 3, 2, 1)
        shape = (shape[0], pool.p, pool.q)
        outputs = n * shape[0] * pool.p * pool.q
        pooled = g.act("maxpool.out", outputs)
        rule = BackwardRule((y.name, pooled.name), outputs)
        g.add("maxpool", OpKind.POOL, 8 * outputs, (y,), (pooled,), rule=rule)
        y = pooled
        for stage, (blocks, width) in enumerate(zip(cfg.blocks, cfg.widths, strict=True)):
            for block in range(blocks):
                stride = 2 if stage > 0 and block == 0 else 1
                y, shape = self.bottleneck(f"layer{stage + 1}.{block}", y, shape, width, stride)
        return self.pools_and_head(y, shape)


def resnet_graph(spec: ModelSpec, mode: Mode, batch: int, precision: Precision) -> ForwardGraph:
    """The forward graph of the ResNet ``spec`` for ``batch`` images (batchnorm depends on ``mode``)."""
    if spec.resnet is None:
        raise ValueError(f"model {spec.name} is not a resnet")
    return _ResNet(spec, spec.resnet, mode, batch, precision).build()
