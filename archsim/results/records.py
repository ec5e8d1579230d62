"""Result records of a run: one per layer, one for the whole step, and their JSON form.

The CLI's ``--json`` output is exactly :meth:`RunResult.to_dict` serialised by :func:`to_json`, so the
Python API and the CLI return the same records. Times are seconds, sizes bytes, rates per second.

A run on a multi-chip system (:func:`build_system_result`) fills the same record: ``layers`` are the
representative chip's ops (one per stage in a pipeline, with its ``stage``), and the system fields --
``num_chips``, ``data_parallel``, ``global_batch``, ``scaling_efficiency`` (throughput over ``num_chips``
times the throughput of one chip running the same per-chip micro-batch with the same options; None,
with the reason in ``scaling_note``, when one chip cannot hold that), ``comm_s``, ``exposed_comm_s``,
``bubble_s``, ``links`` (utilization per link class) and ``collectives`` -- say what the interconnect
did. A one-chip run has ``num_chips`` 1, ``scaling_efficiency`` 1 and no communication.

Memory is per chip and measured against the memory that must hold the step (:mod:`archsim.memory_fit`):
main memory, or In-Processor Memory on IPUs, named by ``memory_technology``; what an IPU keeps in
streaming memory is ``streaming_memory_bytes``.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import TYPE_CHECKING, Any

from archsim.engine.replay import OpTiming

__all__ = ["LayerRecord", "LinkRecord", "Normalized", "RunResult", "to_json"]
from archsim.spec.chip import ChipSpec
from archsim.workloads.memory import MemoryPerChip
from archsim.workloads.trace import Op

if TYPE_CHECKING:  # the types of fields a one-chip run leaves empty: their modules are not loaded for it
    from archsim.engine.records import CollectiveRecord
    from archsim.results.training import InputRecord, TimeToTrainRecord


@dataclass(frozen=True, slots=True)
class LayerRecord:
    """One replayed op."""

    name: str
    kind: str
    phase: str
    unit: str
    start_s: float
    end_s: float
    cycles: int
    """Duration in cycles of the chip's clock."""
    flops: int
    bytes: int
    """Main-memory bytes the op moved, as modelled (operand re-reads included)."""
    tensor_bytes: int
    """Bytes of the tensors the op reads and writes, each once."""
    roofline_s: float
    """The op's roofline time at the chip's nominal clock (a power-limit throttle leaves it there)."""
    bound: str
    stage: int = 0
    """Pipeline stage whose chip ran the op (0 without pipelining)."""
    energy_j: float = 0.0
    """Dynamic energy of the op on its chip (J), from its counts (:mod:`archsim.models.energy`)."""
    onchip_bytes: int = 0
    """Operand bytes read from an on-chip SRAM level (:attr:`archsim.models.base.OpCost.onchip_bytes`):
    staged from the L2 into shared memory by tiled GPU matrix kernels, or served by a systolic chip's
    on-chip cache; 0 elsewhere."""

    def with_energy(self, energy_j: float, clock_scale: float = 1.0) -> LayerRecord:
        """The record with ``energy_j`` set, its start and end at ``clock_scale`` of the nominal clock.

        ``clock_scale`` is a power-limit throttle's (the same cycles at a lower clock: times over it).
        As ``dataclasses.replace`` would, without walking the fields on each call: it runs once per
        layer of every run. tests/unit/test_records.py checks that no field is dropped.
        """
        return LayerRecord(
            self.name,
            self.kind,
            self.phase,
            self.unit,
            self.start_s / clock_scale,
            self.end_s / clock_scale,
            self.cycles,
            self.flops,
            self.bytes,
            self.tensor_bytes,
            self.roofline_s,
            self.bound,
            self.stage,
            energy_j,
            self.onchip_bytes,
        )

    @classmethod
    def of(cls, op: Op, timing: OpTiming, clock_hz: float, stage: int = 0) -> LayerRecord:
        """The record of ``op`` replayed with ``timing`` on a chip clocked at ``clock_hz``."""
        cost = timing.cost
        return cls(
            name=op.name,
            kind=op.kind.value,
            phase=op.phase.value,
            unit=cost.unit.value,
            start_s=timing.start_s,
            end_s=timing.end_s,
            cycles=round((timing.end_s - timing.start_s) * clock_hz),
            flops=op.flops,
            bytes=cost.dram_bytes,
            tensor_bytes=op.bytes,
            roofline_s=cost.roofline_s,
            bound=cost.bound.value,
            stage=stage,
            onchip_bytes=cost.onchip_bytes,
        )


@dataclass(frozen=True, slots=True)
class LinkRecord:
    """Traffic on one class of identical links (one tier, one direction) over a step.

    By symmetry every link of the class carries what its representative carried; the numbers are
    means over the representative links simulated (``links`` of them), per link.
    """

    tier: str
    link: str
    """Link type."""
    direction: str
    """``+``/``-`` around a ring, ``out``/``in`` through a switch port."""
    links: int
    bytes: float
    """Bytes one link carried in the step."""
    busy_s: float
    """Seconds one link spent transferring."""
    utilization: float
    """``busy_s`` over the step time (mean over the class)."""
    max_utilization: float


@dataclass(frozen=True, slots=True)
class Normalized:
    """Throughput normalized per chip, per watt, per billion transistors and per mm^2 (None if unknown).

    ``per_watt`` divides by the modelled average power of a chip (:attr:`RunResult.power_w`);
    ``per_watt_tdp`` by its published TDP; ``per_mm2`` by its area (:attr:`RunResult.area_mm2`).
    """

    per_chip: float
    per_watt: float | None
    per_billion_transistors: float | None
    per_watt_tdp: float | None = None
    per_mm2: float | None = None

    @classmethod
    def of(
        cls, per_chip: float, chip: ChipSpec, power_w: float | None = None, area_mm2: float | None = None
    ) -> Normalized:
        """Normalize a per-chip throughput by modelled power and area, and ``chip``'s TDP and transistors."""
        return cls(
            per_chip=per_chip,
            per_watt=per_chip / power_w if power_w else None,
            per_billion_transistors=per_chip / (chip.transistors / 1e9) if chip.transistors else None,
            per_watt_tdp=per_chip / chip.tdp_w if chip.tdp_w else None,
            per_mm2=per_chip / area_mm2 if area_mm2 else None,
        )


@dataclass(frozen=True)
class RunResult:
    """The outcome of replaying one workload on one target."""

    target: str
    workload: str
    mode: str
    batch: int
    """Per-chip batch."""
    precision: str
    seq_len: int | None
    num_chips: int
    step_time_s: float
    throughput: float
    """Samples (images, sequences) per second for the whole target; tokens per second in the
    ``prefill`` and ``decode`` modes (``throughput_unit`` says which)."""
    flops: int
    """FLOPs of one step, all chips together."""
    utilization: float
    """Achieved FLOP/s over the published peak of all chips at this precision."""
    normalized: Normalized
    ops_time_s: float
    """Time from the first op's start to the last op's end."""
    step_overhead_s: float
    time_by_bound: dict[str, float]
    """Seconds of op time by what bound each op; on a pipelined system, of the recorded ``layers``
    (one microbatch through every stage) and the exposed communication, so it sums to less than the step."""
    memory_bytes: int
    """Bytes of the step (per chip) held in the memory ``memory_capacity_bytes`` measures."""
    memory_capacity_bytes: int
    """Capacity of the memory that must hold the step: main memory, In-Processor Memory on IPUs."""
    memory_technology: str
    """Which memory that is (a ``memory/`` name, e.g. ``hbm2``, ``ipu-in-processor-memory``)."""
    streaming_memory_bytes: int = field(default=0, kw_only=True)
    """Bytes of the step an IPU keeps in streaming memory (``--streaming-memory``; 0 elsewhere)."""
    software: str | None = field(default=None, kw_only=True)
    """The software stack that ran the graph (a ``software/`` name)."""
    uncertainty: float | None = field(default=None, kw_only=True)
    """Cross-validated error of the calibration rows like this run, a fraction (:mod:`archsim.uncertainty`)."""
    extrapolation: tuple[str, ...] = field(default=(), kw_only=True)
    """Which of ``chip``, ``software``, ``workload shape``, ``scale`` the calibration does not cover."""
    input_wait_s: float = field(default=0.0, kw_only=True)
    """Time the step waits for its input pipeline (the software's ``input_pipeline``), in ``step_time_s``."""
    system: str | None = field(default=None, kw_only=True)
    """The multi-chip system (None for a single chip)."""
    nodes: int = field(default=1, kw_only=True)
    data_parallel: int = field(default=1, kw_only=True)
    """Replicas of the model (chips / pipeline stages)."""
    pipeline_stages: int = field(default=1, kw_only=True)
    microbatches: int = field(default=1, kw_only=True)
    schedule: str | None = field(default=None, kw_only=True)
    collective: str | None = field(default=None, kw_only=True)
    """All-reduce algorithm used for gradients."""
    global_batch: int = field(default=0, kw_only=True)
    """Samples per step, all replicas: ``batch * data_parallel``."""
    single_chip_throughput: float | None = field(default=None, kw_only=True)
    """Samples per second of one chip running the same per-chip micro-batch alone (None: it cannot hold it)."""
    scaling_efficiency: float | None = field(default=1.0, kw_only=True)
    """``throughput / (num_chips * single_chip_throughput)``, never above 1 (None: no one-chip reference)."""
    scaling_note: str | None = field(default=None, kw_only=True)
    """Why ``scaling_efficiency`` is None (None when it is a number)."""
    comm_s: float = field(default=0.0, kw_only=True)
    """Seconds during which any inter-chip transfer was in flight."""
    exposed_comm_s: float = field(default=0.0, kw_only=True)
    """Step time added by communication (step time minus the same step with free links)."""
    bubble_s: float = field(default=0.0, kw_only=True)
    """Pipeline bubble: mean idle seconds per stage before the flush."""
    bubble_fraction: float = field(default=0.0, kw_only=True)
    """``bubble_s`` over the time to the pipeline flush."""
    links: tuple[LinkRecord, ...] = field(default=(), kw_only=True)
    collectives: tuple[CollectiveRecord, ...] = field(default=(), kw_only=True)
    chip_not_published: tuple[str, ...] = field(default=(), kw_only=True)
    """The chip's figures its description says are not published (``tdp``, ``die_area``, ``process``): the
    normalized throughputs they would give are None, and shown as ``not published``."""
    throughput_unit: str = field(default="samples/s", kw_only=True)
    """What :attr:`throughput` counts per second, from the workload (see :func:`throughput_unit`)."""
    padding: str | None = field(default=None, kw_only=True)
    """How the sequences' padding was left out: ``removed`` (each at its real length) or ``packed``
    (into packs of ``seq_len`` tokens); None when every sequence was computed at ``seq_len``
    (:mod:`archsim.workloads.padding`)."""
    tokens_per_sequence: int | None = field(default=None, kw_only=True)
    """Real tokens per sequence where ``padding`` is set (the data set's mean at ``seq_len``), else None."""
    tokens_per_s: float | None = field(default=None, kw_only=True)
    """Tokens per second, whole target: prompt tokens processed (prefill), new tokens generated
    (decode); None in other modes."""
    ttft_s: float | None = field(default=None, kw_only=True)
    """Prefill: time to first token, the step time (the prompt's forward pass); None otherwise."""
    tpot_s: float | None = field(default=None, kw_only=True)
    """Decode: time per output token, the step time (one token per sequence at the mean context)."""
    prompt_len: int | None = field(default=None, kw_only=True)
    gen_len: int | None = field(default=None, kw_only=True)
    """Decode: tokens generated per sequence (the mean context and the KV cache follow from it)."""
    interleave: int = field(default=1, kw_only=True)
    """Model chunks per pipeline stage (interleaved 1F1B; 1: plain); layers' ``stage`` is then the
    virtual stage ``k``, on chip ``k mod pipeline_stages``."""
    tensor_parallel: int = field(default=1, kw_only=True)
    """Chips that split each layer of a decoder model (Megatron-LM tensor parallelism; 1: none)."""
    sequence_parallel: bool = field(default=False, kw_only=True)
    """Sequence parallelism within the tensor-parallel group."""
    expert_parallel: int = field(default=1, kw_only=True)
    """Chips of the data-parallel group that share a mixture of experts' experts (1: none)."""
    bn_group: int = field(default=1, kw_only=True)
    """Consecutive chips that share their batch-norm statistics (1: each chip its own)."""
    mfu: float | None = field(default=None, kw_only=True)
    """Model FLOPs utilization: the model's FLOPs of the step as Megatron-LM and PaLM count them
    (:func:`archsim.workloads.decoder.matrix_flops`: matrix products only, no recomputation) over
    ``step_time_s x num_chips x`` the chip's peak at the run's precision; None but for decoder models."""
    kv_cache_bytes: int = field(default=0, kw_only=True)
    """Bytes of the KV cache per chip, part of ``memory_bytes`` (prefill: the prompt's; decode: prompt
    and generated tokens)."""
    e2e_s: float | None = field(default=None, kw_only=True)
    """Generate: the request's latency, ``ttft_s + gen_len * tpot_s`` (the step time); None otherwise."""
    output_tokens_per_s: float | None = field(default=None, kw_only=True)
    """Generate: generated tokens per second, whole target, ``global_batch * gen_len / e2e_s``."""
    max_batch: int | None = field(default=None, kw_only=True)
    """Prefill, decode and generate: the largest batch (as ``batch`` counts it) whose steps fit the chip's
    memory with their KV cache (:mod:`archsim.run.generation`); None otherwise."""
    zero: int = field(default=0, kw_only=True)
    """ZeRO stage of a data-parallel training step (0: plain data parallelism; :mod:`archsim.workloads.zero`)."""
    memory_per_chip: MemoryPerChip | None = field(default=None, kw_only=True)
    """What one chip holds, by part (:class:`~archsim.workloads.memory.MemoryPerChip`); its ``total``
    is the figure memory fit checks: ``memory_bytes + streaming_memory_bytes`` (the chip of a pipeline
    that holds the most; with ZeRO, after sharding)."""
    input_pipeline: InputRecord | None = field(default=None, kw_only=True)
    """The input pipeline of the step, when the run models it (``--input-decode``)."""
    time_to_train: TimeToTrainRecord | None = field(default=None, kw_only=True)
    """Time to train as MLPerf measures it, when asked (``--time-to-train``)."""
    energy_j: float = field(default=0.0, kw_only=True)
    """Energy of one step, all chips (J): dynamic energy of every op, link traffic and static power."""
    energy_per_sample_j: float = field(default=0.0, kw_only=True)
    """``energy_j`` over the samples of the step (``global_batch``)."""
    energy_per_token_j: float | None = field(default=None, kw_only=True)
    """``energy_per_sample_j`` over ``seq_len``, or itself when a sample is a token (``tokens/s``); None
    without a sequence length."""
    energy_breakdown_j: dict[str, float] = field(default_factory=dict, kw_only=True)
    """``energy_j`` by where it went: ``compute``, ``register``, ``sram``, ``dram``, ``activation``, ``link``,
    ``static``."""
    power_w: float = field(default=0.0, kw_only=True)
    """Average power of one chip over the step (W)."""
    peak_power_w: float = field(default=0.0, kw_only=True)
    """Highest power of one chip while any single op runs: its dynamic energy over its time, plus static."""
    static_power_w: float = field(default=0.0, kw_only=True)
    """Leakage and idle power of one chip (W), part of ``power_w``."""
    area_mm2: float = field(default=0.0, kw_only=True)
    """Die area of one chip: published where the chip's description gives it, else modelled."""
    area_source: str = field(default="", kw_only=True)
    """``published`` or ``modelled`` (MAC units and SRAM bitcells at the chip's node)."""
    clock_scale: float = field(default=1.0, kw_only=True)
    """Fraction of the nominal clock the chip ran at: below 1 when its modelled power passed its TDP and
    the clock throttled (the step's times and throughput include it; the layers are at nominal clock)."""
    voltage_scale: float = field(default=1.0, kw_only=True)
    """Fraction of the nominal supply voltage the chip's DVFS pairs with ``clock_scale``
    (:mod:`archsim.models.dvfs`); the energies are those at it."""
    layers: tuple[LayerRecord, ...]

    def missing(self, figure: str) -> str:
        """How to show a normalized throughput that needs ``figure`` (``tdp``, ``transistors``) and is None."""
        return "not published" if figure in self.chip_not_published else "n/a"

    def batch_scope(self) -> str:
        """``batch`` with what it is per: ``8 per chip``, or on a system ``512 per replica (4 pipeline chips)``."""
        if self.system is None:
            return f"{self.batch} per chip"
        if self.tensor_parallel > 1:
            chips = self.pipeline_stages * self.tensor_parallel
            scope = f"{self.batch} per replica ({chips} chips: {self.pipeline_stages} stages x {self.tensor_parallel})"
        elif self.pipeline_stages > 1:
            scope = f"{self.batch} per replica ({self.pipeline_stages} pipeline chips)"
        else:
            scope = f"{self.batch} per chip"
        if self.microbatches > 1:
            scope += f" in {self.microbatches} microbatches"
        if self.data_parallel > 1:
            scope += f", global {self.global_batch} over {self.data_parallel} replicas"
        return scope

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, equal to :func:`dataclasses.asdict`'s; layers in trace order.

        A layer holds only strings and numbers, so its dict is read off its fields: asdict's copy of
        each of them took about half the time of a ``--json`` run's output (5 ms of ResNet-50's 9 ms).
        """
        layers = tuple({name: getattr(layer, name) for name in _LAYER_FIELDS} for layer in self.layers)
        return {f.name: layers if f.name == "layers" else _plain(getattr(self, f.name)) for f in fields(self)}


_LAYER_FIELDS = tuple(f.name for f in fields(LayerRecord))


def _plain(value: Any) -> Any:
    """``value`` copied as :func:`dataclasses.asdict` copies a field's value."""
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, list | tuple):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return type(value)((_plain(k), _plain(v)) for k, v in value.items())
    return copy.deepcopy(value)


def to_json(result: RunResult) -> str:
    """Deterministic JSON text of a result (same inputs, same bytes).

    Byte for byte ``json.dumps(result.to_dict(), indent=1, allow_nan=False)``. With an indent,
    :func:`json.dumps` takes its pure-Python encoder; the layers, most of the text (a Megatron run's
    2.5 MB), are written by the C encoder instead, one flat dict at a time, then indented (that run's
    text in 158 ms instead of 239, ``to_dict`` included). A layer's values are strings and numbers
    (:class:`LayerRecord`), which both encoders write alike (``float.__repr__``, ``int.__repr__``,
    ASCII-escaped strings), and a string's quotes are escaped, so ``, "`` in a layer's one-line text
    only ever separates two fields.
    """
    data = result.to_dict()
    layers = data["layers"]
    if not layers:
        return json.dumps(data, indent=1, allow_nan=False)
    text = json.dumps({**data, "layers": []}, indent=1, allow_nan=False)
    # the top-level "layers" line, found once: strings escape their newlines, nested keys are indented further
    before, _, after = text.partition('\n "layers": []')
    encode = _FLAT_ENCODER.encode
    body = ",\n  ".join("{\n   " + encode(layer)[1:-1].replace(', "', ',\n   "') + "\n  }" for layer in layers)
    return f'{before}\n "layers": [\n  {body}\n ]{after}'


_FLAT_ENCODER = json.JSONEncoder(allow_nan=False)
"""The C encoder (no indent), with ``json.dumps``'s separators ``", "`` and ``": "``."""
