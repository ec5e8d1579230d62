"""The ONNX op types the importer supports, by how it maps them, with their FLOPs per element."""

from __future__ import annotations

from collections.abc import Mapping

from archsim.workloads.graph import ELEMENT_FLOPS

ELEMENTWISE_FLOPS: Mapping[str, tuple[int, int, str]] = {
    # op type: (forward, backward FLOPs per output element, what the backward saves: in, out or none)
    "Relu": (*ELEMENT_FLOPS["relu"], "out"),
    "Gelu": (*ELEMENT_FLOPS["gelu"], "in"),
    "FastGelu": (*ELEMENT_FLOPS["gelu"], "in"),
    "Tanh": (*ELEMENT_FLOPS["tanh"], "out"),
    "Sigmoid": (4, 3, "out"),
    "HardSigmoid": (2, 1, "in"),
    "HardSwish": (4, 3, "in"),
    "LeakyRelu": (2, 1, "in"),
    "PRelu": (2, 2, "in"),
    "Elu": (3, 2, "in"),
    "Selu": (4, 2, "in"),
    "Softplus": (3, 3, "in"),
    "Mish": (8, 12, "in"),
    "Erf": (8, 4, "in"),
    "Clip": (2, 1, "in"),
    "Add": (*ELEMENT_FLOPS["add"], "none"),
    "Sub": (1, 0, "none"),
    "Sum": (1, 0, "none"),  # per extra input
    "Mul": (1, 2, "in"),
    "Div": (1, 3, "in"),
    "Pow": (1, 3, "in"),
    "Max": (1, 1, "in"),
    "Min": (1, 1, "in"),
    "Mean": (1, 1, "none"),
    "Sqrt": (1, 2, "out"),
    "Reciprocal": (1, 2, "out"),
    "Exp": (1, 1, "out"),
    "Cos": (1, 1, "in"),
    "Sin": (1, 1, "in"),
    "Log": (1, 1, "in"),
    "Neg": (1, 1, "none"),
    "Abs": (1, 1, "in"),
    "Floor": (1, 0, "none"),
    "Mod": (1, 0, "none"),
    "Trilu": (1, 0, "none"),  # a select per element (a causal mask)
    "Ceil": (1, 0, "none"),
    "Round": (1, 0, "none"),
    "Sign": (1, 0, "none"),
    "Equal": (1, 0, "none"),
    "Less": (1, 0, "none"),
    "LessOrEqual": (1, 0, "none"),
    "Greater": (1, 0, "none"),
    "GreaterOrEqual": (1, 0, "none"),
    "Not": (1, 0, "none"),
    "And": (1, 0, "none"),
    "Or": (1, 0, "none"),
    "Softmax": (*ELEMENT_FLOPS["softmax"], "out"),
    "LogSoftmax": (*ELEMENT_FLOPS["softmax"], "out"),
    "Resize": (1, 1, "none"),
}
"""(forward, backward) FLOPs per output element of the element-wise ops, and the tensor the
backward reads besides the output gradient; modelling assumptions (one FLOP per multiply, add,
compare, exp or divide), the built-in models' where they have the op."""

REDUCTIONS = frozenset(
    {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceSumSquare", "ArgMax"}
)
"""Reductions: one FLOP per input element; the backward broadcasts, one per input element."""
MOVES = frozenset(
    {"Concat", "Split", "Slice", "Pad", "Tile", "Cast", "Where", "GatherElements", "ScatterND", "CumSum", "TopK"}
)
"""Data movement: no FLOPs (but ``TopK``: a compare per input element), every tensor read and written once."""
FREE = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Identity", "Expand"})
"""Views: no op; the output is the input under another name."""
SHAPE_OPS = frozenset({"Shape", "Size", "Constant", "ConstantOfShape", "Range", "EyeLike"})
"""Ops whose outputs are constants once the shapes are bound (folded, like the shape arithmetic they feed)."""
NORMS = frozenset({"LayerNormalization", "InstanceNormalization", "GroupNormalization", "RMSNormalization"})
POOLS = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"})
SUPPORTED = frozenset(
    {"Conv", "Gemm", "MatMul", "BatchNormalization", "Gather", "Dropout", "Attention"}
    | NORMS
    | set(ELEMENTWISE_FLOPS)
    | REDUCTIONS
    | MOVES
    | POOLS
    | FREE
    | SHAPE_OPS
)
"""Every ONNX op type (default domain) the importer turns into ops, folds or treats as a view."""
LABELS = "labels"
"""Name of the int32 label tensor of the training loss."""
