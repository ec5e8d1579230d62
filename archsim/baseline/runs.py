"""The runs a baseline records: their text form, the default set, and what is kept of each result.

A run is written ``TARGET:WORKLOAD[:OPTIONS]``:

* ``TARGET`` -- a chip or system name, alias or YAML path (everything before the first ``:``), or
  the slice of a pod ``SYSTEM:AxBxC`` (a ``:`` followed by a shape belongs to the target);
* ``WORKLOAD`` -- a model name, a trace file, ``gemm:MxNxK`` or any other workload ``archsim run``
  takes (it may itself contain ``:``);
* ``OPTIONS`` -- after the last ``:``, comma-separated ``key=value`` pairs: ``mode`` (``infer`` or
  ``train``, default ``infer``), ``batch``, ``precision`` and ``seq_len`` (each default: what
  ``archsim run`` picks), ``software`` (a ``software/`` name, default the chip's), ``fusion``
  (``none`` or ``norm-act``) and ``recompute`` (``true`` or ``false``), the last two by default what
  the software does, and ``streaming_memory`` (``none``, ``optimizer-state`` or ``all``, default
  ``none``).

``v100:resnet50``, ``a100:bert-base:mode=train,batch=8,seq_len=128``, ``tpu-v3:gemm:2048x2048x2048``
and ``tpu-v4-pod:2x2x4:resnet50:mode=train`` are runs. :attr:`RunSpec.id` is the canonical text
(``mode`` always given, then the options that are set, in the order above; ``streaming_memory=none``
is the default and left out), which the baseline file stores.

The default set (:func:`default_runs`) is every chip on the search path with every model, in
inference and training, then every system in training (where its links carry the gradient
all-reduce) with one model of each architecture (the first by name: ``bert-base``, ``gpt2``,
``resnet50``), all at batch :data:`DEFAULT_BATCH`. Of the decoder language models (a dozen, most
too large for one chip) chips run only the first by name, ``gpt2``, as systems do. It covers every
cost model, both passes and every system description, in seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from archsim.errors import ArchsimError, UsageError
from archsim.limits import MAX_ARGUMENT
from archsim.run.request import RunRequest
from archsim.run.runner import run
from archsim.spec.common import Fusion, Precision, StreamingMemory, is_shape
from archsim.spec.library import Library
from archsim.spec.model import Architecture
from archsim.workloads.trace import Mode

DEFAULT_BATCH = 2
"""Per-chip batch of the default runs: small, so that the whole set runs in seconds."""
DEFAULT_MODES = {"chip": (Mode.INFER, Mode.TRAIN), "system": (Mode.TRAIN,)}
"""Kinds of description that are targets of the default set, with the modes each runs in (a kind the
library lacks adds nothing)."""
OPTION_KEYS = ("mode", "batch", "precision", "seq_len", "software", "fusion", "recompute", "streaming_memory")
"""Options of a run, in the order its canonical text gives them."""

Value = str | int | float | None
"""One cell of a baseline: a name, a count, a quantity in SI units, or nothing."""

RUN_COLUMNS: tuple[tuple[str, type], ...] = (
    ("target", str),
    ("workload", str),
    ("mode", str),
    ("batch", int),
    ("precision", str),
    ("seq_len", int),
    ("num_chips", int),
    ("step_time_s", float),
    ("throughput", float),
    ("utilization", float),
    ("flops", int),
    ("memory_bytes", int),
    ("layers", int),
)
"""What is kept of a run's result, with the type of each column (``seq_len`` may be None)."""
LAYER_COLUMNS: tuple[tuple[str, type], ...] = (
    ("index", int),
    ("name", str),
    ("kind", str),
    ("phase", str),
    ("unit", str),
    ("bound", str),
    ("time_s", float),
    ("cycles", int),
    ("flops", int),
    ("bytes", int),
)
"""What is kept of each layer: its identity, what bound it, its duration, cycles, FLOPs and bytes.

Start times are left out: one slower layer would move every later one, and the diff would bury it."""


@dataclass(frozen=True)
class RunSpec:
    """One run of a baseline: what ``archsim run`` would be given."""

    target: str
    workload: str
    mode: str = Mode.INFER.value
    batch: int | None = None
    precision: str | None = None
    seq_len: int | None = None
    software: str | None = None
    """The software stack, or None for the chip's default."""
    fusion: str | None = None
    """``none`` or ``norm-act``, or None for what the software does."""
    recompute: bool | None = None
    """True or False, or None for what the software does."""
    streaming_memory: str | None = None
    """What an IPU may keep in streaming memory (``optimizer-state``, ``all``), or None for nothing."""

    def request(self) -> RunRequest:
        """The run request this run asks for (checked as every request is)."""
        return RunRequest.of(
            self.target,
            self.workload,
            self.mode,
            self.batch,
            self.precision,
            self.seq_len,
            software=self.software,
            fusion=self.fusion,
            recompute=self.recompute,
            streaming_memory=self.streaming_memory,
        )

    @property
    def id(self) -> str:
        """The canonical ``TARGET:WORKLOAD:OPTIONS`` text; :func:`parse_run` reads it back equal."""
        options = [f"mode={self.mode}"]
        options += [
            f"{key}={str(value).lower() if isinstance(value, bool) else value}"
            for key in OPTION_KEYS[1:]
            if (value := getattr(self, key)) is not None
        ]
        return f"{self.target}:{self.workload}:{','.join(options)}"


def _count(text: str, key: str, run: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 10 or not 1 <= int(text) <= MAX_ARGUMENT:
        raise UsageError(run, key, f"expected a positive integer up to {MAX_ARGUMENT}, got {text[:40]!r}")
    return int(text)


def parse_run(text: str) -> RunSpec:
    """``TARGET:WORKLOAD[:OPTIONS]`` -> RunSpec; anything malformed is a UsageError naming the run."""
    target, colon, rest = text.partition(":")
    shape, _, after = rest.partition(":")
    if shape and is_shape(shape):  # SYSTEM:AxBxC, a slice of a pod (archsim run takes it as a target)
        target, rest = f"{target}:{shape}", after
    if not colon or not target.strip() or not rest.strip():
        raise UsageError(text, "RUNS", "expected TARGET:WORKLOAD[:mode=...,batch=...,precision=...,seq_len=...]")
    workload, options = rest, ""
    head, colon, last = rest.rpartition(":")
    if colon and "=" in last:
        workload, options = head, last
    if not workload:
        raise UsageError(text, "RUNS", "the workload is missing")
    values: dict[str, str] = {}
    for pair in filter(None, options.split(",")):
        key, equals, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not equals or key not in OPTION_KEYS:
            raise UsageError(text, "RUNS", f"unknown option {pair[:40]!r}; options are {', '.join(OPTION_KEYS)}")
        if key in values:
            raise UsageError(text, key, "given twice")
        values[key] = value.strip()
    mode = values.get("mode", Mode.INFER.value)
    if mode not in {m.value for m in Mode}:
        raise UsageError(text, "mode", f"{mode[:40]!r} is not one of {', '.join(m.value for m in Mode)}")
    precision = values.get("precision")
    if precision is not None and precision not in {p.value for p in Precision}:
        known = ", ".join(p.value for p in Precision)
        raise UsageError(text, "precision", f"{precision[:40]!r} is not one of {known}")
    batch = _count(values["batch"], "batch", text) if "batch" in values else None
    seq_len = _count(values["seq_len"], "seq_len", text) if "seq_len" in values else None
    fusion = values.get("fusion")
    if fusion is not None and fusion not in {f.value for f in Fusion}:
        raise UsageError(text, "fusion", f"{fusion[:40]!r} is not one of {', '.join(f.value for f in Fusion)}")
    recompute = values.get("recompute")
    if recompute not in (None, "true", "false"):
        raise UsageError(text, "recompute", f"expected true or false, got {recompute[:40]!r}")
    streaming = values.get("streaming_memory", StreamingMemory.NONE.value)
    if streaming not in {s.value for s in StreamingMemory}:
        known = ", ".join(s.value for s in StreamingMemory)
        raise UsageError(text, "streaming_memory", f"{streaming[:40]!r} is not one of {known}")
    return RunSpec(
        target,
        workload,
        mode,
        batch,
        precision,
        seq_len,
        values.get("software") or None,
        fusion,
        None if recompute is None else recompute == "true",
        None if streaming == StreamingMemory.NONE.value else streaming,
    )


def parse_runs(texts: Sequence[str]) -> list[RunSpec]:
    """Parse every run; the same run twice (by canonical text) is a UsageError."""
    specs = [parse_run(text) for text in texts]
    seen: set[str] = set()
    for spec in specs:
        if spec.id in seen:
            raise UsageError(spec.id, "RUNS", "given twice")
        seen.add(spec.id)
    return specs


def default_runs(library: Library) -> list[RunSpec]:
    """Chips with every model, systems with one model per architecture, in the :data:`DEFAULT_MODES`."""
    models = [entry.name for entry in library.entries("model")]
    first_per_architecture: dict[str, str] = {}
    for name in models:
        first_per_architecture.setdefault(library.model(name).architecture.value, name)
    first = set(first_per_architecture.values())
    decoder = Architecture.DECODER
    models = [name for name in models if name in first or library.model(name).architecture is not decoder]
    workloads = {"chip": models, "system": sorted(first)}
    return [
        RunSpec(entry.name, workload, mode.value, DEFAULT_BATCH)
        for kind, modes in DEFAULT_MODES.items()
        for entry in library.entries(kind)
        for workload in workloads[kind]
        for mode in modes
    ]


@dataclass(frozen=True)
class RunRecord:
    """What a baseline keeps of one run: its columns and layers, or the error it failed with."""

    run: str
    """The run's canonical text (:attr:`RunSpec.id`)."""
    values: tuple[Value, ...] = ()
    """One value per :data:`RUN_COLUMNS` entry; empty when the run failed."""
    layers: tuple[tuple[Value, ...], ...] = ()
    """One row per layer in trace order, one value per :data:`LAYER_COLUMNS` entry."""
    error: str | None = None
    """The one-line error of a run that failed (kept only where failing is allowed)."""


def record_run(spec: RunSpec, library: Library, keep_errors: bool) -> RunRecord:
    """Simulate ``spec`` and keep its columns; an ArchsimError is kept as the record's error if asked."""
    try:
        result = run(spec.request(), library)
    except ArchsimError as err:
        if not keep_errors:
            raise
        return RunRecord(spec.id, error=err.line())
    values: tuple[Value, ...] = (
        result.target,
        result.workload,
        result.mode,
        result.batch,
        result.precision,
        result.seq_len,
        result.num_chips,
        result.step_time_s,
        result.throughput,
        result.utilization,
        result.flops,
        result.memory_bytes,
        len(result.layers),
    )
    layers = tuple(
        (
            index,
            layer.name,
            layer.kind,
            layer.phase,
            layer.unit,
            layer.bound,
            layer.end_s - layer.start_s,
            layer.cycles,
            layer.flops,
            layer.bytes,
        )
        for index, layer in enumerate(result.layers)
    )
    return RunRecord(spec.id, values, layers)
