"""Trace files (``kind: trace``): write a :class:`Trace` to YAML and read it back, exactly.

Layout (``schema_version: 1``)::

    schema_version: 1
    kind: trace
    name: resnet50
    mode: train              # train | infer
    batch: 256               # per chip
    precision: fp16
    seq_len: 128             # sequence models only
    parameters: 25557032     # trainable elements
    memory_bytes: 12345678   # bytes
    meta: {optimizer: sgd-momentum}
    op_count: 161            # how many op lines follow: a file cut short is refused
    ops:
    - {"name": "conv1", "kind": "conv2d", "phase": "fwd", "flops": 1, "reads": [{"name": "input",
       "bytes": 2, "role": "activation"}], "writes": [...], "deps": [], "gemm": {"batch": 1, ...},
       "conv": {"n": 1, "c": 3, "h": 224, "w": 224, "k": 64, "r": 7, "s": 7, "stride": 2, "pad": 3}}

Each op is one flow mapping on one line (written in the JSON subset of YAML, which reads fast; any
YAML spelling is accepted); ``deps``, ``gemm`` and ``conv`` may be left out, as may a tensor's
``role`` (default ``activation``). ``op_count`` proves the file whole: a copy cut at a line
boundary would otherwise read as a shorter trace. A file without it (written before it existed) is
read only when it can still be proven whole: a training step whose last op is its optimizer update
(nothing follows the update); any other is refused. On read, unknown keys, wrong types, negative counts,
unknown enum values and deps that do not point to an earlier op are errors: a
:class:`~archsim.errors.SpecError` naming the file and the field (``ops[12].deps``). Strings are
written double-quoted with YAML escapes, so any name survives the round trip.

Sizes are bounded (:mod:`archsim.limits`): byte and FLOP counts at most 2^63 - 1, each dimension of a
``gemm`` or ``conv`` at most 2^31 - 1, at most 100,000 ops, and a file not in the one-op-per-line
form at most 4 MiB.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, StrictInt, StrictStr, field_validator, model_validator

from archsim.errors import SpecError, UsageError
from archsim.limits import MAX_DIM, MAX_INT, check_trace_ops
from archsim.outfile import write_file
from archsim.spec.common import Count, Name, Precision, Spec
from archsim.spec.yamlio import MAX_FILE_BYTES, parse_yaml_text, read_yaml, validate
from archsim.workloads.trace import ConvShape, Gemm, Mode, Op, OpKind, Phase, Role, TensorAccess, Trace

NonNegative = Annotated[StrictInt, Field(ge=0, le=MAX_INT)]
Dim = Annotated[StrictInt, Field(gt=0, le=MAX_DIM)]
"""One dimension of a matrix product or convolution (at most :data:`~archsim.limits.MAX_DIM`)."""


class TensorEntry(Spec):
    """One tensor access of an op."""

    name: Annotated[StrictStr, Field(min_length=1)]
    bytes: NonNegative
    role: Role = Role.ACTIVATION


class GemmEntry(Spec):
    """The Gemm view ``C[batch, m, n] += A[batch, m, k] @ B[batch, k, n]``."""

    batch: Dim
    m: Dim
    n: Dim
    k: Dim


class ConvEntry(Spec):
    """A 2-D convolution shape (see :class:`~archsim.workloads.trace.ConvShape`)."""

    n: Dim
    c: Dim
    h: Dim
    w: Dim
    k: Dim
    r: Dim
    s: Dim
    stride: Dim = 1
    pad: NonNegative = 0


class OpEntry(Spec):
    """One op."""

    name: Annotated[StrictStr, Field(min_length=1)]
    kind: OpKind
    phase: Phase
    flops: NonNegative
    reads: tuple[TensorEntry, ...]
    writes: tuple[TensorEntry, ...]
    deps: tuple[NonNegative, ...] = ()
    gemm: GemmEntry | None = None
    conv: ConvEntry | None = None

    @model_validator(mode="after")
    def _conv_kind(self) -> OpEntry:
        if self.conv is not None and self.kind is not OpKind.CONV:
            raise ValueError(f"a conv shape is allowed only on {OpKind.CONV.value} ops, this op is {self.kind.value}")
        if self.kind.is_comm:
            raise ValueError("a trace file holds one chip's compute ops; communication is not written in one")
        return self


class TraceFile(Spec):
    """A whole trace file."""

    schema_version: Literal[1]
    kind: Literal["trace"]
    name: Annotated[StrictStr, Field(min_length=1)]
    aliases: tuple[Name, ...] = ()
    description: str = ""
    mode: Mode
    batch: Count
    precision: Precision
    seq_len: Count | None = None
    parameters: NonNegative
    memory_bytes: NonNegative
    meta: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    op_count: Count | None = None
    """How many ops follow (None only in files written before it was recorded)."""
    ops: Annotated[tuple[OpEntry, ...], Field(min_length=1)]  # a step of no op has no time to divide by

    @field_validator("precision")
    @classmethod
    def _a_format(cls, value: Precision) -> Precision:
        if value.is_generic:
            raise ValueError("fp4 is a request a chip resolves; a trace holds a format, nvfp4 or mxfp4")
        return value


def _check_whole(spec: TraceFile, source: str) -> None:
    """Refuse a trace file that may have been cut short at a line boundary (see the module docstring)."""
    held = len(spec.ops)
    if spec.op_count is not None:
        if spec.op_count != held:
            raise SpecError(
                source, "op_count", f"says {spec.op_count} ops but the file holds {held}: cut short or edited"
            )
        return
    if spec.mode is Mode.TRAIN and spec.ops[-1].phase is Phase.UPDATE:
        return
    raise SpecError(
        source,
        "op_count",
        f"missing, so the file cannot be proven complete (a copy cut at a line reads as a shorter trace): "
        f"add op_count: {held} if its {held} ops are all there, or write it again (archsim trace import)",
    )


def _check_deps(entries: tuple[OpEntry, ...], source: str) -> None:
    for index, op in enumerate(entries):
        for dep in op.deps:
            if dep >= index:
                raise SpecError(
                    source, f"ops[{index}].deps", f"op {index} ({op.name}) depends on op {dep}, which is not earlier"
                )


def _tensor(entry: TensorEntry) -> TensorAccess:
    return TensorAccess(entry.name, entry.bytes, entry.role)


def _op(entry: OpEntry) -> Op:
    gemm = entry.gemm
    conv = entry.conv
    return Op(
        entry.name,
        entry.kind,
        entry.phase,
        entry.flops,
        tuple(_tensor(t) for t in entry.reads),
        tuple(_tensor(t) for t in entry.writes),
        entry.deps,
        Gemm(gemm.batch, gemm.m, gemm.n, gemm.k) if gemm is not None else None,
        ConvShape(conv.n, conv.c, conv.h, conv.w, conv.k, conv.r, conv.s, conv.stride, conv.pad)
        if conv is not None
        else None,
    )


def trace_from_data(data: Any, source: str) -> Trace:
    """Validate parsed YAML ``data`` (from ``source``) as a trace file and build the Trace."""
    if isinstance(data, dict) and isinstance(data.get("ops"), list):
        check_trace_ops(len(data["ops"]), source)
    spec = validate(TraceFile, data, source)
    _check_whole(spec, source)
    _check_deps(spec.ops, source)
    return Trace(
        name=spec.name,
        mode=spec.mode,
        batch=spec.batch,
        precision=spec.precision,
        ops=tuple(_op(e) for e in spec.ops),
        parameters=spec.parameters,
        memory_bytes=spec.memory_bytes,
        seq_len=spec.seq_len,
        meta=dict(spec.meta),
    )


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping: dict[str, Any] = {}
    for key, value in pairs:
        if key in mapping:
            raise ValueError(f"duplicate key {key!r}")
        mapping[key] = value
    return mapping


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not YAML")  # JSON's NaN and Infinity: let YAML decide


def parse_trace_text(text: str, source: str) -> dict[str, Any]:
    """Parse a description's YAML text, reading a trace's op lines fast where it can.

    YAML construction in PyYAML runs in Python and takes about half a second for a 1000-op trace.
    The ops this module writes are one flow mapping per line in the JSON subset of YAML (quoted
    keys, only escapes both share), so when every line after ``ops:`` is ``- {...}`` and valid JSON,
    those lines are read with :mod:`json` (duplicate keys still rejected) and only the header with
    YAML; anything else is parsed as YAML throughout, with the same result.
    """
    head, marker, body = text.partition("\nops:\n")
    if marker and not head.startswith("ops:"):
        lines = body.splitlines()
        if all(line.startswith("- {") for line in lines):
            check_trace_ops(len(lines), source)  # before parsing: each op line costs memory and time
            try:
                ops = [
                    json.loads(line[2:], object_pairs_hook=_unique_keys, parse_constant=_no_constant) for line in lines
                ]
            except ValueError:
                ops = None
            if ops is not None:
                data = parse_yaml_text(head + "\nops: []\n", source)
                if isinstance(data, dict) and data.get("ops") == []:
                    data["ops"] = ops
                    return data
    data = parse_yaml_text(text, source)
    if data is None:
        raise SpecError(source, "", "file is empty")
    if not isinstance(data, dict):
        raise SpecError(source, "", f"expected a mapping at the top level, got {type(data).__name__}")
    return data


def read_description(path: Path) -> dict[str, Any]:
    """Read a YAML description file as :func:`~archsim.spec.yamlio.read_yaml` does, traces fast."""
    source = str(path)
    try:
        regular = path.is_file() and path.stat().st_size <= MAX_FILE_BYTES
    except (OSError, ValueError):  # a name too long for the OS, or holding a NUL
        regular = False
    if not regular:
        return read_yaml(path)  # its messages for a missing, special, oversized or unreadable file
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return read_yaml(path)
    return parse_trace_text(text, source)


def read_trace(path: str | os.PathLike[str]) -> Trace:
    """Read and validate a trace file; every problem is a SpecError naming the file and field."""
    return trace_from_data(read_description(Path(path)), str(path))


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_SPECIAL = "\x85\u2028\u2029\ufeff"  # YAML line breaks and the byte-order mark: always escaped


def _plain(char: str) -> bool:
    """True when ``char`` may appear unescaped in a YAML double-quoted scalar."""
    code = ord(char)
    if code < 0x7F:
        return code >= 0x20 and char not in '"\\'
    return (0xA0 <= code <= 0xD7FF or 0xE000 <= code <= 0xFFFD or code >= 0x10000) and char not in _SPECIAL


def _quote(text: str) -> str:
    r"""``text`` as a double-quoted scalar that YAML and JSON both read back to exactly ``text``.

    Only escapes the two share are used (``\"``, ``\\``, ``\n``, ``\t``, ``\r``,
    ``\uXXXX``); characters above U+FFFF are printable in YAML and are written as they are.
    """
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    parts = []
    for char in text:
        if char in _ESCAPES:
            parts.append(_ESCAPES[char])
        elif _plain(char):
            parts.append(char)
        elif 0xD800 <= ord(char) <= 0xDFFF:
            raise ValueError(f"{text!r} holds a lone surrogate, which neither UTF-8 nor YAML can store")
        else:
            parts.append(f"\\u{ord(char):04x}")
    return '"' + "".join(parts) + '"'


def _tensors(tensors: tuple[TensorAccess, ...]) -> str:
    return (
        "["
        + ", ".join(f'{{"name": {_quote(t.name)}, "bytes": {t.bytes}, "role": "{t.role.value}"}}' for t in tensors)
        + "]"
    )


def _op_line(op: Op) -> str:
    """One op as a flow mapping on one line, in the JSON subset of YAML (see :func:`parse_trace_text`)."""
    parts = [
        f'"name": {_quote(op.name)}',
        f'"kind": "{op.kind.value}"',
        f'"phase": "{op.phase.value}"',
        f'"flops": {op.flops}',
        f'"reads": {_tensors(op.reads)}',
        f'"writes": {_tensors(op.writes)}',
        f'"deps": [{", ".join(map(str, op.deps))}]',
    ]
    if op.gemm is not None:
        g = op.gemm
        parts.append(f'"gemm": {{"batch": {g.batch}, "m": {g.m}, "n": {g.n}, "k": {g.k}}}')
    if op.conv is not None:
        c = op.conv
        parts.append(
            f'"conv": {{"n": {c.n}, "c": {c.c}, "h": {c.h}, "w": {c.w}, "k": {c.k}, "r": {c.r}, "s": {c.s}, '
            f'"stride": {c.stride}, "pad": {c.pad}}}'
        )
    return "- {" + ", ".join(parts) + "}"


def dump_trace(trace: Trace) -> str:
    """The YAML text of a trace file for ``trace`` (compute ops only: a trace with communication is refused)."""
    if trace.has_comm:
        raise UsageError(trace.name, "", "has communication ops: a trace file holds one chip's compute ops")
    lines = [
        "schema_version: 1",
        "kind: trace",
        f"name: {_quote(trace.name)}",
        f"mode: {trace.mode.value}",
        f"batch: {trace.batch}",
        f"precision: {trace.precision.value}",
    ]
    if trace.seq_len is not None:
        lines.append(f"seq_len: {trace.seq_len}")
    lines += [f"parameters: {trace.parameters}", f"memory_bytes: {trace.memory_bytes}"]
    if trace.meta:
        lines.append("meta:")
        lines += [f"  {_quote(key)}: {_quote(value)}" for key, value in sorted(trace.meta.items())]
    lines.append(f"op_count: {len(trace.ops)}")
    lines.append("ops:" if trace.ops else "ops: []")
    lines += [_op_line(op) for op in trace.ops]
    return "\n".join(lines) + "\n"


def write_trace(trace: Trace, path: str | os.PathLike[str]) -> None:
    """Write ``trace`` to ``path`` as a trace file (UTF-8); :func:`read_trace` reads it back equal.

    The file is written atomically (:func:`archsim.outfile.write_file`): a failed write raises
    UsageError and leaves nothing behind. Raises ValueError for a name holding a lone surrogate (no
    UTF-8 file can store one).
    """
    write_file(path, dump_trace(trace))
