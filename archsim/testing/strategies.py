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
import math
from functools import cache
from typing import Any

try:
    from hypothesis import strategies as st
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError("archsim.testing.strategies needs hypothesis: pip install 'archsim[testing]'") from err

from archsim.models.interconnect import Fabric, Tier, TierKind
from archsim.spec.chip import ChipSpec, Dataflow, Family
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.spec.system import SystemSpec, Topology
from archsim.spec.yamlio import validate
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


@cache
def _builtin() -> Library:
    return Library(use_env=False)


def precisions() -> st.SearchStrategy[Precision]:
    """Any operand precision."""
    return st.sampled_from(list(Precision))


@st.composite
def gemm_ops(draw: st.DrawFn, precision: Precision | str = Precision.FP16) -> Op:
    """A (batched) matrix product with its operand and result tensors."""
    batch = draw(st.integers(min_value=1, max_value=64))
    m, n, k = draw(dims), draw(dims), draw(dims)
    e = Precision(precision).bytes
    return Op(
        name="gemm",
        kind=OpKind.MATMUL,
        phase=Phase.FORWARD,
        flops=2 * batch * m * n * k,
        reads=(TensorAccess("a", batch * m * k * e), TensorAccess("b", batch * k * n * e, Role.WEIGHT)),
        writes=(TensorAccess("c", batch * m * n * e),),
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
    e = Precision(precision).bytes
    x = TensorAccess("x", conv.n * conv.c * conv.h * conv.w * e)
    w = TensorAccess("w", conv.k * conv.c * conv.r * conv.s * e, Role.WEIGHT)
    y = TensorAccess("y", conv.n * conv.k * conv.p * conv.q * e)
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
    e = Precision(precision).bytes
    role = Role.STATE if kind is OpKind.OPTIMIZER else Role.ACTIVATION
    phase = Phase.UPDATE if kind is OpKind.OPTIMIZER else Phase.FORWARD
    writes = [TensorAccess("y", elements * e, role)]
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
        reads=tuple(TensorAccess(f"x{i}", elements * e, role) for i in range(inputs)),
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


_UNIT_COUNTS = {
    Family.TENSORCORE: ("sm_count",),
    Family.IPU: ("tiles",),
    Family.CUBE: ("ai_cores",),
    Family.SYSTOLIC: ("cores", "arrays_per_core", "array_rows", "array_cols"),
}
"""Counts of each family's section that the peak is linear in."""


@st.composite
def chip_data(draw: st.DrawFn, family: Family | str | None = None, library: Library | None = None) -> dict[str, Any]:
    """YAML-ready data of a valid variant of a chip of ``family`` (None: any) from ``library``.

    Starts from a built-in chip (or any chip on ``library``'s search path) and changes its unit
    counts, clock, main-memory bandwidth and capacity, dataflow (systolic) and efficiency overrides,
    moving the published peaks by the same factors so that the peak check still holds.
    """
    library = library or _builtin()
    entries = [e for e in library.entries("chip") if family is None or e.data.get("family") == Family(family).value]
    entry = draw(st.sampled_from(entries))
    data: dict[str, Any] = copy.deepcopy(entry.data)
    chip_family = Family(data["family"])
    section = data[chip_family.value]
    peak_factor = 1.0
    for field in _UNIT_COUNTS[chip_family]:
        old = section[field]
        new = draw(st.integers(min_value=1, max_value=4 * old))
        section[field] = new
        peak_factor *= new / old
    if chip_family is Family.SYSTOLIC:
        section["dataflow"] = draw(st.sampled_from([d.value for d in Dataflow]))
    if chip_family is Family.IPU and data["memory"].get("onchip") is not None:
        tile_bytes = int(parse(section["tile_sram"], Dimension.BYTES))
        data["memory"]["onchip"]["capacity"] = f"{section['tiles'] * tile_bytes} B"
    clock_factor = draw(st.floats(min_value=0.5, max_value=2.0))
    data["clock"] = _quantity(data["clock"], Dimension.FREQUENCY, clock_factor, "Hz")
    peak_factor *= clock_factor
    data["peak"] = {p: _quantity(v, Dimension.THROUGHPUT, peak_factor, "OP/s") for p, v in sorted(data["peak"].items())}
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


def chips(family: Family | str | None = None, library: Library | None = None) -> st.SearchStrategy[ChipSpec]:
    """A valid, loaded variant of a chip of ``family`` (see :func:`chip_data`)."""
    return chip_data(family, library).map(lambda data: validate(ChipSpec, data, f"chip {data['name']}"))


@st.composite
def system_data(draw: st.DrawFn, library: Library | None = None) -> dict[str, Any]:
    """YAML-ready data of a valid variant of a built-in system (or any system on ``library``'s path).

    Changes the chip to any chip of the library, the number of links of each level, the size of each
    switch, ring and full-mesh level (2 to 16 members) and the shape of each torus (2 to 8 per
    dimension); graph levels and link types are kept.
    """
    library = library or _builtin()
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


def descriptions(kind: str, library: Library | None = None) -> st.SearchStrategy[dict[str, Any]]:
    """A deep copy of the data of one description of ``kind`` (``chip``, ``model``, ...) in the library."""
    entries = (library or _builtin()).entries(kind)
    if not entries:
        raise ValueError(f"the library has no description of kind {kind!r}")
    return st.sampled_from(entries).map(lambda entry: copy.deepcopy(entry.data))


ODD_VALUES: tuple[Any, ...] = (
    None,
    True,
    0,
    -1,
    1,
    2**31,
    2**53,
    2**53 + 1,
    2**63,
    10**30,
    10**400,
    1e-300,
    1e308,
    float("inf"),
    float("nan"),
    "",
    "x" * 300,
    "900",
    "1e400 GHz",
    "-5 GB/s",
    "0 s",
    "1e-300 Hz",
    "1e300 B",
    "1 parsec",
    "NaN TFLOPS",
    "1e12 TFLOPS",
    "2 GB",
    "16x16",
    [],
    {},
    [1, 2, 3],
    {"x": 1},
)
"""Values that a loader must refuse or survive: wrong types, extremes, non-finite numbers, bad units."""


def _odd_values() -> st.SearchStrategy[Any]:
    return st.one_of(
        # a copy: a list or mapping put into the data may be edited by a later change of the same draw
        st.sampled_from(ODD_VALUES).map(copy.deepcopy),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(),
        st.text(max_size=12),
    )


def _slots(data: Any) -> list[tuple[Any, Any]]:
    """Every (container, key or index) inside ``data``, in a stable order."""
    found: list[tuple[Any, Any]] = []
    stack = [data]
    while stack:
        node = stack.pop()
        items = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
        for key, value in items:
            found.append((node, key))
            if isinstance(value, dict | list) and value:
                stack.append(value)
    return found


def _scaled(value: Any, power: int) -> Any:
    """``value`` with its magnitude moved by ``10**power`` (numbers and the number of a quantity)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value * 10**power if power >= 0 else value // 10**-power
    if isinstance(value, float):
        return value * 10.0**power
    if isinstance(value, str) and value[:1].isdigit():
        number, _, unit = value.partition(" ")
        return f"{number}e{power} {unit}".rstrip()
    return value


@st.composite
def mutated(draw: st.DrawFn, data: dict[str, Any], max_changes: int = 3) -> dict[str, Any]:
    """A copy of ``data`` with 1 to ``max_changes`` random changes: deleted, replaced, scaled or added values.

    Replacements come from :data:`ODD_VALUES` and arbitrary integers, floats and strings; scaling
    moves a number (or a quantity's number) by up to 10^30 either way. Most results are invalid.
    """
    data = copy.deepcopy(data)
    for _ in range(draw(st.integers(min_value=1, max_value=max_changes))):
        slots = _slots(data)
        action = draw(st.sampled_from(["delete", "replace", "scale", "add"] if slots else ["add"]))
        if action == "add" or not slots:
            container = draw(st.sampled_from([data] + [c for c, _ in slots if isinstance(c, dict)]))
            container[draw(st.sampled_from(["extra", "name", "kind", "schema_version", "x"]))] = draw(_odd_values())
            continue
        container, key = draw(st.sampled_from(slots))
        if action == "delete":
            del container[key]
        elif action == "replace":
            container[key] = draw(_odd_values())
        else:
            container[key] = _scaled(container[key], draw(st.integers(min_value=-30, max_value=30)))
    return data


TEXT_TOKENS = (
    "!!python/object/apply:os.system ['true']",
    "!!python/name:os.system",
    "&a ",
    "*a",
    "<<: *a\n",
    "[",
    "]",
    "{",
    "}",
    ": ",
    "- ",
    "? ",
    "|\n",
    "---\n",
    "%YAML 1.1\n",
    "\t",
    "\x00",
    "\ufeff",
    "\\N",
    "'",
    '"',
    ",",
    "=",
    "#",
    "\n",
    "nan",
    "inf",
    "-1",
    "0",
    "1e400",
    "9" * 120,
    "[" * 80,
    "2001-02-30",
    "0x" + "f" * 40,
)
"""Fragments that break YAML, TSV, CSV and INI files in instructive ways."""


@st.composite
def mutated_text(draw: st.DrawFn, text: str, max_changes: int = 3) -> str:
    """``text`` with 1 to ``max_changes`` random edits: tokens inserted, spans deleted, lines duplicated or cut."""
    for _ in range(draw(st.integers(min_value=1, max_value=max_changes))):
        position = draw(st.integers(min_value=0, max_value=len(text)))
        action = draw(st.sampled_from(["insert", "delete", "duplicate", "truncate", "swap-digit"]))
        if action == "insert":
            token = draw(st.one_of(st.sampled_from(TEXT_TOKENS), st.text(max_size=4)))
            text = text[:position] + token + text[position:]
        elif action == "delete":
            text = text[:position] + text[position + draw(st.integers(min_value=1, max_value=40)) :]
        elif action == "duplicate":
            start = text.rfind("\n", 0, position) + 1
            end = text.find("\n", position)
            line = text[start : len(text) if end < 0 else end + 1]
            text = text[:start] + line + text[start:]
        elif action == "truncate":
            text = text[:position]
        else:
            digits = [i for i, c in enumerate(text) if c.isdigit()]
            if digits:
                index = draw(st.sampled_from(digits))
                text = text[:index] + draw(st.sampled_from(["0", "-1", "99999999999", "1e30", "x"])) + text[index + 1 :]
    return text


BYTE_TOKENS = (
    b"\x00",
    b"\xff",
    b"\x80" * 12,  # a varint that never ends
    b"\xff\xff\xff\xff\x0f",  # a varint of 2^32 - 1: a huge length prefix
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # the largest 64-bit varint
    b"\x1f\x8b",  # the gzip magic
    b"\x08\x00",
    b"\x0a\x00",
    b"\x12\x7f",
)
"""Fragments that break length-delimited binary formats (protobuf, Chakra ET) in instructive ways."""


@st.composite
def mutated_bytes(draw: st.DrawFn, data: bytes, max_changes: int = 3) -> bytes:
    """``data`` with 1 to ``max_changes`` random edits: bytes flipped, inserted or deleted, ranges duplicated or cut."""
    for _ in range(draw(st.integers(min_value=1, max_value=max_changes))):
        position = draw(st.integers(min_value=0, max_value=len(data)))
        action = draw(st.sampled_from(["insert", "delete", "duplicate", "truncate", "flip", "set"]))
        if action == "insert":
            token = draw(st.one_of(st.sampled_from(BYTE_TOKENS), st.binary(min_size=1, max_size=8)))
            data = data[:position] + token + data[position:]
        elif action == "delete":
            data = data[:position] + data[position + draw(st.integers(min_value=1, max_value=40)) :]
        elif action == "duplicate":
            chunk = data[position : position + draw(st.integers(min_value=1, max_value=256))]
            data = data[:position] + chunk + data[position:]
        elif action == "truncate":
            data = data[:position]
        elif position < len(data):
            old = data[position]
            new = (
                old ^ (1 << draw(st.integers(min_value=0, max_value=7)))
                if action == "flip"
                else draw(st.integers(0, 255))
            )
            data = data[:position] + bytes([new]) + data[position + 1 :]
    return data
