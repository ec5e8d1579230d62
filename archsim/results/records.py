"""Result records of a run: one per layer, one for the whole step, and their JSON form.

The CLI's ``--json`` output is exactly :meth:`RunResult.to_dict` serialised by :func:`to_json`, so the
Python API and the CLI return the same records. Times are seconds, sizes bytes, rates per second.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from archsim.engine.replay import OpTiming
from archsim.models.base import Bound
from archsim.spec.chip import ChipSpec
from archsim.workloads.trace import Trace


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
    bound: str


@dataclass(frozen=True, slots=True)
class Normalized:
    """Throughput normalized per chip, per watt of TDP and per billion transistors (None if unknown)."""

    per_chip: float
    per_watt: float | None
    per_billion_transistors: float | None


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
    """Samples (images, sequences) per second for the whole target."""
    flops: int
    """FLOPs of one step, all chips together."""
    utilization: float
    """Achieved FLOP/s over the published peak of all chips at this precision."""
    normalized: Normalized
    ops_time_s: float
    """Time from the first op's start to the last op's end."""
    step_overhead_s: float
    time_by_bound: dict[str, float]
    """Seconds of op time by what bound each op."""
    memory_bytes: int
    """Device memory the step needs (per chip)."""
    memory_capacity_bytes: int
    layers: tuple[LayerRecord, ...]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; layers in trace order."""
        return asdict(self)


def to_json(result: RunResult) -> str:
    """Deterministic JSON text of a result (same inputs, same bytes)."""
    return json.dumps(result.to_dict(), indent=1, allow_nan=False)


def build_result(
    *,
    target: str,
    chip: ChipSpec,
    trace: Trace,
    timings: list[OpTiming],
    step_overhead_s: float,
    num_chips: int,
    capacity_bytes: int,
) -> RunResult:
    """Assemble the result of a replay."""
    layers = tuple(
        LayerRecord(
            name=op.name,
            kind=op.kind.value,
            phase=op.phase.value,
            unit=t.cost.unit.value,
            start_s=t.start_s,
            end_s=t.end_s,
            cycles=round((t.end_s - t.start_s) * chip.clock),
            flops=op.flops,
            bytes=t.cost.dram_bytes,
            tensor_bytes=op.bytes,
            roofline_s=t.cost.roofline_s,
            bound=t.cost.bound.value,
        )
        for op, t in zip(trace.ops, timings, strict=True)
    )
    ops_time_s = max((t.end_s for t in timings), default=0.0)
    step_time_s = ops_time_s + step_overhead_s
    by_bound = {b.value: 0.0 for b in Bound}
    for t in timings:
        by_bound[t.cost.bound.value] += t.end_s - t.start_s
    samples = trace.batch * num_chips
    throughput = samples / step_time_s
    flops = trace.flops * num_chips
    peak = chip.peak[trace.precision] * num_chips
    per_chip = throughput / num_chips
    return RunResult(
        target=target,
        workload=trace.name,
        mode=trace.mode.value,
        batch=trace.batch,
        precision=trace.precision.value,
        seq_len=trace.seq_len,
        num_chips=num_chips,
        step_time_s=step_time_s,
        throughput=throughput,
        flops=flops,
        utilization=flops / step_time_s / peak,
        normalized=Normalized(
            per_chip=per_chip,
            per_watt=per_chip / chip.tdp if chip.tdp else None,
            per_billion_transistors=per_chip / (chip.transistors / 1e9) if chip.transistors else None,
        ),
        ops_time_s=ops_time_s,
        step_overhead_s=step_overhead_s,
        time_by_bound=by_bound,
        memory_bytes=trace.memory_bytes,
        memory_capacity_bytes=capacity_bytes,
        layers=layers,
    )
