"""Hypothesis strategies for property-testing cost models: chips, ops, traces, systems and descriptions.

Use them to state invariants of your own models or chips::

    from hypothesis import given
    from archsim.testing.strategies import chips, gemm_ops

    @given(chip=chips("tensorcore"), op=gemm_ops())
    def test_never_below_roofline(chip, op): ...

* :func:`chips` / :func:`chip_data` -- valid variants of the built-in chips of a family: unit counts,
  clock, memory bandwidth and capacity, dataflow and efficiency overrides changed, with the published
  peaks moved to match (so the loader's peak check holds).
* :func:`gemm_ops`, :func:`conv_ops`, :func:`elementwise_ops`, :func:`vector_ops` -- single ops of one
  kind; :func:`ops` -- of every :class:`~archsim.workloads.trace.OpKind`, convolutions in every pass
  and training batch-norms included; :func:`any_ops` -- matrix products or element-wise ops.
* :func:`traces` -- small random DAGs of ops in topological order.
* :func:`systems` / :func:`system_data` -- valid variants of the built-in multi-chip systems;
  :func:`fabrics` -- small resolved fabrics for the collective models.
* :func:`descriptions`, :func:`mutated`, :func:`mutated_text` and :func:`mutated_bytes` -- the
  library's descriptions as YAML-ready data, and corrupted copies of such data, of any text or of a
  binary file (ONNX, Chakra ET), for fuzzing loaders (archsim's own fuzz test uses them).

This module needs hypothesis (``pip install 'archsim[testing]'``); nothing else in archsim imports it.
"""

from __future__ import annotations

import copy
import enum
import math
from typing import Any

try:
    from hypothesis import strategies as st
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError("archsim.testing.strategies needs hypothesis: pip install 'archsim[testing]'") from err

from archsim.models.interconnect import Fabric, Tier, TierKind
from archsim.spec.chip import NOT_PUBLISHED, ChipSpec
from archsim.spec.common import STORED_PRECISIONS, Precision
from archsim.spec.library import Library
from archsim.spec.registry import family_definition
from archsim.spec.system import SystemSpec, Topology
from archsim.spec.yamlio import validate
from archsim.testing.fuzz import ODD_VALUES as ODD_VALUES  # re-exported: the fuzz tests read it here
from archsim.testing.fuzz import builtin_library, descriptions, mutated, mutated_bytes, mutated_text
from archsim.units import Dimension, parse
from archsim.workloads.trace import COMPUTE_KINDS, ConvShape, Gemm, Mode, Op, OpKind, Phase, Role, TensorAccess, Trace

__all__ = [
    "any_ops",
    "chip_data",
    "chips",
    "conv_ops",
    "descriptions",
    "dims",
    "elementwise_ops",
    "fabrics",
    "gemm_ops",
    "mutated",
    "mutated_bytes",
    "mutated_text",
    "ops",
    "precisions",
    "system_data",
    "systems",
    "traces",
    "vector_ops",
]

dims = st.integers(min_value=1, max_value=8192)
"""A matrix dimension, 1 to 8192."""


def precisions() -> st.SearchStrategy[Precision]:
    """Any operand precision a tensor can be stored at (not the ``fp4`` request, which a chip resolves)."""
    return st.sampled_from(STORED_PRECISIONS)


@st.composite
def gemm_ops(draw: st.DrawFn, precision: Precision | str = Precision.FP16) -> Op:
    """A (batched) matrix product with its operand and result tensors."""
    batch = draw(st.integers(min_value=1, max_value=64))
    m, n, k = draw(dims), draw(dims), draw(dims)
    size = Precision(precision).nbytes
    return Op(
        name="gemm",
        kind=OpKind.MATMUL,
        phase=Phase.FORWARD,
        flops=2 * batch * m * n * k,
        reads=(TensorAccess("a", size(batch * m * k)), TensorAccess("b", size(batch * k * n), Role.WEIGHT)),
        writes=(TensorAccess("c", size(batch * m * n)),),
        gemm=Gemm(batch, m, n, k),
    )


@st.composite
def conv_ops(
    draw: st.DrawFn, precision: Precision | str = Precision.FP16, phases: tuple[Phase | str, ...] = (Phase.FORWARD,)
) -> Op:
    """A 2-D convolution pass of one of ``phases``, with the implicit-GEMM view of that pass.

    Forward: ``m = N*P*Q, n = K, k = C*R*S``; data gradient: ``m = N*H*W, n = C, k = K*R*S`` (stride 1)
    or ``m = N*P*Q, n = C*R*S, k = K`` (strided); weight gradient: ``m = C*R*S, n = K, k = N*P*Q``
    (the views of :mod:`archsim.workloads.training`).
    """
    r = draw(st.sampled_from([1, 3, 5, 7]))
    stride = draw(st.sampled_from([1, 2]))
    size = draw(st.integers(min_value=r, max_value=112))
    conv = ConvShape(
        n=draw(st.integers(min_value=1, max_value=32)),
        c=draw(st.integers(min_value=1, max_value=512)),
        h=size,
        w=size,
        k=draw(st.integers(min_value=1, max_value=512)),
        r=r,
        s=r,
        stride=stride,
        pad=(r - 1) // 2,
    )
    phase = Phase(draw(st.sampled_from(phases)))
    nbytes = Precision(precision).nbytes
    x = TensorAccess("x", nbytes(conv.n * conv.c * conv.h * conv.w))
    w = TensorAccess("w", nbytes(conv.k * conv.c * conv.r * conv.s), Role.WEIGHT)
    y = TensorAccess("y", nbytes(conv.n * conv.k * conv.p * conv.q))
    if phase is Phase.BACKWARD_DATA:
        if conv.stride == 1:
            gemm = Gemm(1, conv.n * conv.h * conv.w, conv.c, conv.k * conv.r * conv.s)
        else:
            gemm = Gemm(1, conv.n * conv.p * conv.q, conv.c * conv.r * conv.s, conv.k)
        reads, writes = (TensorAccess("y.grad", y.bytes), w), (TensorAccess("x.grad", x.bytes),)
    elif phase is Phase.BACKWARD_WEIGHT:
        gemm = Gemm(1, conv.c * conv.r * conv.s, conv.k, conv.n * conv.p * conv.q)
        reads, writes = (x, TensorAccess("y.grad", y.bytes)), (TensorAccess("w.grad", w.bytes, Role.GRADIENT),)
    else:
        gemm = Gemm(1, conv.n * conv.p * conv.q, conv.k, conv.c * conv.r * conv.s)
        reads, writes = (x, w), (y,)
    return Op(
        name="conv",
        kind=OpKind.CONV,
        phase=phase,
        flops=2 * gemm.macs,
        reads=reads,
        writes=writes,
        gemm=gemm,
        conv=conv,
    )


@st.composite
def vector_ops(
    draw: st.DrawFn, kind: OpKind | str = OpKind.ELEMENTWISE, precision: Precision | str = Precision.FP16
) -> Op:
    """A non-matrix op of ``kind`` over 1 to 2^28 elements, 1 to 8 FLOPs each, 1 to 3 inputs.

    A batch-norm is sometimes a training one: a forward pass that updates its running statistics,
    or a backward pass. Kinds and precisions are enums or their values (``"softmax"``, ``"bf16"``),
    as everywhere in this module.
    """
    kind = OpKind(kind)
    if kind.is_matrix:
        raise ValueError(f"{kind.value} is a matrix op: use gemm_ops or conv_ops")
    elements = draw(st.integers(min_value=1, max_value=2**28))
    flops_per = draw(st.integers(min_value=1, max_value=8))
    inputs = draw(st.integers(min_value=1, max_value=3))
    size = Precision(precision).nbytes
    role = Role.STATE if kind is OpKind.OPTIMIZER else Role.ACTIVATION
    phase = Phase.UPDATE if kind is OpKind.OPTIMIZER else Phase.FORWARD
    writes = [TensorAccess("y", size(elements), role)]
    if kind is OpKind.BATCHNORM and draw(st.booleans()):
        # training: batch statistics, computed in the forward pass (which updates the running
        # statistics) or reduced over in the backward pass
        phase = draw(st.sampled_from([Phase.FORWARD, Phase.BACKWARD_DATA]))
        if phase is Phase.FORWARD:
            writes.append(TensorAccess("running_stats", 8 * draw(st.integers(1, 4096)), Role.STATE))
    return Op(
        name=kind.value,
        kind=kind,
        phase=phase,
        flops=flops_per * elements,
        reads=tuple(TensorAccess(f"x{i}", size(elements), role) for i in range(inputs)),
        writes=tuple(writes),
    )


def elementwise_ops(precision: Precision | str = Precision.FP16) -> st.SearchStrategy[Op]:
    """An element-wise op (the most common non-matrix kind)."""
    return vector_ops(OpKind.ELEMENTWISE, precision)


def ops(
    precision: Precision | str = Precision.FP16, kinds: tuple[OpKind | str, ...] = COMPUTE_KINDS
) -> st.SearchStrategy[Op]:
    """An op of any of ``kinds`` (default: every kind a chip's cost model prices)."""
    choices: list[st.SearchStrategy[Op]] = []
    for kind in map(OpKind, kinds):
        if kind is OpKind.MATMUL:
            choices.append(gemm_ops(precision))
        elif kind is OpKind.CONV:
            choices.append(conv_ops(precision, (Phase.FORWARD, Phase.BACKWARD_DATA, Phase.BACKWARD_WEIGHT)))
        else:
            choices.append(vector_ops(kind, precision))
    return st.one_of(choices)


def any_ops(precision: Precision | str = Precision.FP16) -> st.SearchStrategy[Op]:
    """Matrix products or element-wise ops."""
    return st.one_of(gemm_ops(precision), elementwise_ops(precision))


@st.composite
def traces(draw: st.DrawFn, precision: Precision | str = Precision.FP16, max_ops: int = 12) -> Trace:
    """A small random DAG of 1 to ``max_ops`` matrix and element-wise ops, in topological order."""
    count = draw(st.integers(min_value=1, max_value=max_ops))
    ops_: list[Op] = []
    for index in range(count):
        op = draw(any_ops(precision))
        deps = draw(st.sets(st.integers(min_value=0, max_value=index - 1), max_size=3)) if index else set()
        ops_.append(Op(f"op{index}", op.kind, op.phase, op.flops, op.reads, op.writes, tuple(sorted(deps)), op.gemm))
    return Trace("random", Mode.INFER, 1, Precision(precision), tuple(ops_), parameters=0, memory_bytes=0)


def _quantity(text: str, dimension: Dimension, factor: float, unit: str) -> str:
    return f"{parse(text, dimension) * factor!r} {unit}"


@st.composite
def chip_data(draw: st.DrawFn, family: str | None = None, library: Library | None = None) -> dict[str, Any]:
    """YAML-ready data of a valid variant of a chip of ``family`` (None: any) from ``library``.

    Starts from a built-in chip (or any chip on ``library``'s search path) and changes the unit
    counts its family section's peak is linear in (:attr:`~archsim.spec.registry.FamilySection.peak_counts`),
    every choice of the section (an enum field, such as a systolic array's dataflow), the clock,
    main-memory bandwidth and capacity and efficiency overrides, moving the published peaks by the
    same factors so that the peak check still holds, and a published power limit up with them (a chip
    with four times the arrays leaks four times as much: at its original TDP its static power alone
    could pass the limit, which a run refuses). A section with in-processor memory (IPU) gets
    the chip's on-chip capacity set to match.
    """
    library = library or builtin_library()
    if family is not None:
        family_definition(family)  # an unknown family is a ValueError naming the known ones
    entries = [e for e in library.entries("chip") if family is None or e.data.get("family") == family]
    entry = draw(st.sampled_from(entries))
    data: dict[str, Any] = copy.deepcopy(entry.data)
    schema = family_definition(data["family"]).section
    section = data[data["family"]]
    peak_factor = 1.0
    for field in schema.peak_counts:
        old = section[field]
        new = draw(st.integers(min_value=1, max_value=4 * old))
        section[field] = new
        peak_factor *= new / old
    for field, info in schema.model_fields.items():
        if isinstance(info.annotation, type) and issubclass(info.annotation, enum.Enum):
            section[field] = draw(st.sampled_from([choice.value for choice in info.annotation]))
    in_processor = schema.model_validate(section).in_processor_bytes()
    if in_processor is not None and data["memory"].get("onchip") is not None:
        data["memory"]["onchip"]["capacity"] = f"{in_processor} B"
    clock_factor = draw(st.floats(min_value=0.5, max_value=2.0))
    data["clock"] = _quantity(data["clock"], Dimension.FREQUENCY, clock_factor, "Hz")
    peak_factor *= clock_factor
    data["peak"] = {p: _quantity(v, Dimension.THROUGHPUT, peak_factor, "OP/s") for p, v in sorted(data["peak"].items())}
    if data.get("tdp", NOT_PUBLISHED) != NOT_PUBLISHED:  # a power limit grows with the units it feeds
        data["tdp"] = _quantity(data["tdp"], Dimension.POWER, max(1.0, peak_factor), "W")
    main = data["memory"]["main"]
    bandwidth_factor = draw(st.floats(min_value=0.25, max_value=4.0))
    main["bandwidth"] = _quantity(main["bandwidth"], Dimension.BANDWIDTH, bandwidth_factor, "B/s")
    if bandwidth_factor > 1:
        main.pop("stacks", None)  # more bandwidth than the stacks of its technology allow
    capacity = int(parse(main["capacity"], Dimension.BYTES))
    main["capacity"] = f"{max(1, math.floor(capacity * draw(st.floats(min_value=0.5, max_value=4.0))))} B"
    overrides = draw(
        st.dictionaries(
            st.sampled_from(["compute", "memory_bandwidth", "vector"]),
            st.floats(min_value=0.05, max_value=1.0),
            max_size=3,
        )
    )
    data["efficiency"] = {**data.get("efficiency", {}), **overrides}
    data["name"] = f"{data['name']}-variant"
    data.pop("aliases", None)
    return data


def chips(family: str | None = None, library: Library | None = None) -> st.SearchStrategy[ChipSpec]:
    """A valid, loaded variant of a chip of ``family`` (see :func:`chip_data`)."""
    return chip_data(family, library).map(lambda data: validate(ChipSpec, data, f"chip {data['name']}"))


@st.composite
def system_data(draw: st.DrawFn, library: Library | None = None) -> dict[str, Any]:
    """YAML-ready data of a valid variant of a built-in system (or any system on ``library``'s path).

    Changes the chip to any chip of the library, the number of links of each level, the size of each
    switch, ring and full-mesh level (2 to 16 members) and the shape of each torus (2 to 8 per
    dimension); graph levels and link types are kept.
    """
    library = library or builtin_library()
    entry = draw(st.sampled_from(library.entries("system")))
    data: dict[str, Any] = copy.deepcopy(entry.data)
    data["chip"] = draw(st.sampled_from([e.name for e in library.entries("chip")]))
    levels = data["levels"]
    for level in levels.values() if isinstance(levels, dict) else levels:
        topology = Topology(level["topology"])
        if topology is Topology.GRAPH:
            continue
        level["links"] = draw(st.integers(min_value=1, max_value=8))
        if topology is Topology.TORUS:
            shape = [draw(st.integers(min_value=2, max_value=8)) for _ in level["shape"]]
            level["shape"] = shape
            level["size"] = math.prod(shape)
        else:
            level["size"] = draw(st.integers(min_value=2, max_value=16))
    data["name"] = f"{data['name']}-variant"
    data.pop("aliases", None)
    return data


def systems(library: Library | None = None) -> st.SearchStrategy[SystemSpec]:
    """A valid, loaded variant of a system (see :func:`system_data`)."""
    return system_data(library).map(lambda data: validate(SystemSpec, data, f"system {data['name']}"))


@st.composite
def fabrics(draw: st.DrawFn, max_tiers: int = 2) -> Fabric:
    """A small multi-chip fabric: 1 to ``max_tiers`` tiers of rings or switched pools of 2 to 6 members."""
    count = draw(st.integers(min_value=1, max_value=max_tiers))
    tiers = []
    below = 1
    for index in range(count):
        size = draw(st.integers(min_value=2, max_value=6))
        tiers.append(
            Tier(
                name=f"t{index}",
                level_index=index,
                kind=draw(st.sampled_from(list(TierKind))),
                size=size,
                chips_per_member=below,
                link="test-link",
                link_bytes_per_s=draw(st.floats(min_value=1e9, max_value=400e9)),
                latency_s=draw(st.floats(min_value=1e-7, max_value=1e-5)),
                lanes=draw(st.integers(min_value=1, max_value=4)),
            )
        )
        below *= size
    return Fabric("random", "chip", 1, below, tuple(tiers), "hierarchical")
