"""One run per configuration, many configurations at once: op costs, schedule, energy and results.

A family's op costs (its batch model, :mod:`archsim.models.batch`), the one-chip schedule, and the
energy and results of :mod:`archsim.results`, over numpy arrays of configurations.

Every configuration of a :class:`Group` runs the same trace with the same software and efficiencies on
a variant of the same chip; only the chip's numbers differ. The ops are walked once, in trace order,
and each step is the arithmetic of the one-configuration path applied to an array with one entry per
configuration, in the same order: the family model's ``cost`` (through its batch model, named by
:attr:`~archsim.spec.registry.FamilyDefinition.batch`), the framework's per-op time,
:func:`~archsim.engine.replay.list_schedule`, the sums of
:func:`~archsim.results.records.build_result` and :func:`~archsim.results.power.with_energy`. What is
the same for every configuration (error bars, memory fields, throttling) is then computed per
configuration with the scalar functions themselves. :func:`evaluate` returns each configuration's
:class:`~archsim.results.records.RunResult` (without per-layer records, which no sweep column
holds), or None for a configuration whose costs the per-configuration path would refuse (an op out
of range, an integer too large to price exactly): the caller runs those through the event path.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cached_property
from typing import cast

import numpy as np
import numpy.typing as npt

from archsim.errors import ArchsimError
from archsim.limits import MAX_OP_SECONDS
from archsim.models.base import Bound, Unit
from archsim.models.batch import BatchModel
from archsim.models.energy import BITS_PER_BYTE, SRAM_ACCESSES_PER_DRAM_BYTE, ChipEnergy
from archsim.results.assembly import (
    decoder_fields,
    generation_fields,
    input_wait,
    memory_fields,
    padding_fields,
    throughput_unit,
    tokens_per_sample,
)
from archsim.results.power import energy_per_token, throttled
from archsim.results.records import Normalized, RunResult
from archsim.spec.chip import ChipSpec
from archsim.spec.efficiency import Efficiency
from archsim.spec.registry import FamilyEfficiency, family_definition
from archsim.workloads.memory import MemoryPerChip, memory_per_chip, resident_bytes
from archsim.workloads.trace import Mode, Trace

Floats = npt.NDArray[np.float64]
_BOUNDS = list(Bound)


@dataclass
class Group:
    """Configurations that run one trace with one software stack and efficiency on variants of one chip."""

    trace: Trace
    efficiency: Efficiency
    software: str
    input_samples_per_s: float | None
    chips: list[ChipSpec]
    energies: list[ChipEnergy]
    """Each chip's per-action energies, area and static power (:func:`archsim.models.energy.chip_energy`)."""
    error_bars: tuple[float | None, tuple[str, ...]]
    """The runs' ``uncertainty`` and ``extrapolation`` (:func:`archsim.uncertainty.error_bars`): one chip name,
    software and workload setting, so the same for every configuration."""

    @cached_property
    def flops(self) -> int:
        """The trace's FLOPs (:attr:`archsim.workloads.trace.Trace.flops`, a sum over its ops), once."""
        return self.trace.flops

    @cached_property
    def memory_split(self) -> MemoryPerChip:
        """:func:`~archsim.workloads.memory.memory_per_chip` of the trace (a scan of its ops), once."""
        return memory_per_chip(self.trace)


def _bound(
    compute: Floats, memory: Floats, overhead: Floats, communication: Floats, fill: Floats
) -> npt.NDArray[np.int64]:
    """:func:`~archsim.models.base.bound_of` on arrays: the index in ``Bound`` of each op's largest term."""
    compute, overhead = compute - fill, overhead + fill
    largest, bound = compute, np.full(compute.shape, _BOUNDS.index(Bound.COMPUTE))
    for value, term in ((memory, Bound.MEMORY), (communication, Bound.COMMUNICATION), (overhead, Bound.OVERHEAD)):
        bigger = value > largest
        largest = np.where(bigger, value, largest)
        bound = np.where(bigger, _BOUNDS.index(term), bound)
    return bound


def batch_model(group: Group) -> tuple[BatchModel, FamilyEfficiency]:
    """The family's batch model of the group's chips (:attr:`~archsim.spec.registry.FamilyDefinition.batch`)."""
    chip = group.chips[0]
    definition = family_definition(chip.family)
    assert definition.batch is not None  # batch_reason let only such families through
    record = definition.efficiency.resolve(group.efficiency, chip.name)
    module = importlib.import_module(definition.batch)
    model = module.build_batch(group.chips, record, group.trace.precision, resident_bytes(group.trace))
    return cast(BatchModel, model), record


def evaluate(group: Group) -> list[RunResult | None]:
    """Each configuration's result, or None where the event path must decide (see the module docstring)."""
    trace, chips = group.trace, group.chips
    model, eff = batch_model(group)
    n = len(chips)
    framework_s = eff.framework_overhead
    ok = np.ones(n, dtype=bool)
    energy = {
        name: np.array([getattr(x, name) for x in group.energies])
        for name in (
            "mac_j",
            "vector_op_j",
            "register_mac_j",
            "sram_bit_j",
            "l2_bit_j",
            "vector_l2_bit_j",
            "dram_bit_j",
            "matrix_active_w",
            "vector_active_w",
            "matrix_instruction_j",
            "vector_instruction_j",
        )
    }
    parts = {part: np.zeros(n) for part in ("compute", "register", "sram", "l2", "dram", "activation", "instruction")}
    by_bound = np.zeros((len(_BOUNDS), n))
    ends: list[Floats] = []
    unit_free: dict[Unit, Floats] = {}
    durations: list[tuple[Floats, Floats, Floats]] = []
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for index, op in enumerate(trace.ops):
            cost = model.cost(op)
            if cost is None:
                return [None] * n
            time, overhead, dram = cost.time_s, cost.overhead_s, cost.dram_bytes
            if framework_s:
                time, overhead = time + framework_s, overhead + framework_s
            bound = _bound(cost.compute_s, cost.memory_s, overhead, cost.communication_s, cost.fill_s)
            for value in (time, cost.compute_s, cost.memory_s, overhead, cost.roofline_s, cost.communication_s):
                ok &= np.isfinite(value) & (value >= 0.0) & (value <= MAX_OP_SECONDS)
            ok &= dram >= 0
            # the list scheduler (engine/replay.py), on every configuration
            unit = cost.unit if model.separate_units else Unit.MATRIX
            waits = [ends[d] for d in op.deps]
            if eff.host_overhead > 0.0:
                waits.append(np.full(n, (index + 1) * eff.host_overhead))
            if unit in unit_free:
                waits.append(unit_free[unit])
            start = np.zeros(n)
            for wait in waits:
                start = np.maximum(start, wait)
            end = start + time
            unit_free[unit] = end
            ends.append(end)
            duration = end - start
            for b in range(len(_BOUNDS)):
                by_bound[b] = np.where(bound == b, by_bound[b] + duration, by_bound[b])
            # with_energy's per-layer energy (results/power.py), in the same order
            matrix = cost.unit is Unit.MATRIX
            compute_j = op.flops / 2 * energy["mac_j"] if matrix else op.flops * energy["vector_op_j"]
            register_j = op.flops / 2 * energy["register_mac_j"] if matrix else np.zeros(n)
            bits = dram * BITS_PER_BYTE
            staged = cost.onchip_bytes * BITS_PER_BYTE
            sram_j = SRAM_ACCESSES_PER_DRAM_BYTE * (bits + staged) * energy["sram_bit_j"]
            l2_j = staged * energy["l2_bit_j"] + (0.0 if matrix else bits * energy["vector_l2_bit_j"])
            dram_j = bits * energy["dram_bit_j"]
            activation_j = duration * (energy["matrix_active_w"] if matrix else energy["vector_active_w"])
            if matrix:
                instruction_j = op.flops / 2 * energy["matrix_instruction_j"]
            else:
                instruction_j = op.flops * energy["vector_instruction_j"]
            parts["compute"] += compute_j
            parts["register"] += register_j
            parts["sram"] += sram_j
            parts["l2"] += l2_j
            parts["dram"] += dram_j
            parts["activation"] += activation_j
            parts["instruction"] += instruction_j
            total_j = compute_j + register_j + sram_j + l2_j + dram_j + activation_j + instruction_j
            durations.append((total_j, dram_j, duration))
    ops_time = np.zeros(n)
    for end in ends:
        ops_time = np.maximum(ops_time, end)
    runs = [_run(group, chips[i], i, float(ops_time[i]), by_bound[:, i], parts) if ok[i] else None for i in range(n)]
    clock_scale = np.array([1.0 if r is None else r.limit.clock_scale for r in runs])
    volts = np.array([1.0 if r is None else r.limit.core_energy_scale for r in runs])
    peak = np.full(n, -np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        for total_j, dram_j, seconds in durations:
            joules = np.where(volts == 1.0, total_j, (total_j - dram_j) * volts + dram_j)  # OpEnergy.at_voltage
            peak = np.maximum(peak, np.where(seconds > 0, joules / (seconds / clock_scale), -np.inf))
    peak_dynamic = np.where(peak == -np.inf, 0.0, peak)  # max(..., default=0.0) of with_energy
    return [None if r is None else r.result(float(peak_dynamic[i])) for i, r in enumerate(runs)]


def _run(
    group: Group, chip: ChipSpec, i: int, ops_time_s: float, by_bound_row: Floats, parts: dict[str, Floats]
) -> _Run | None:
    """The configuration's run, or None when it is refused (a TDP below the static power, say)."""
    try:
        return _Run(group, chip, i, ops_time_s, by_bound_row, parts)
    except ArchsimError:
        return None


class _Run:
    """build_result, then with_energy (results/records.py, results/power.py), for one configuration."""

    def __init__(
        self, group: Group, chip: ChipSpec, i: int, ops_time_s: float, by_bound_row: Floats, parts: dict[str, Floats]
    ) -> None:
        self.group, self.chip, self.energy = group, chip, group.energies[i]
        trace = group.trace
        step_overhead_s = group.efficiency.step_overhead if trace.mode is Mode.TRAIN else 0.0
        assert step_overhead_s is not None
        self.ops_time_s, self.step_overhead_s = ops_time_s, step_overhead_s
        self.input_wait_s = input_wait(trace.batch, ops_time_s + step_overhead_s, group.input_samples_per_s)
        self.step_time_s = ops_time_s + step_overhead_s + self.input_wait_s
        self.throughput = trace.batch * tokens_per_sample(trace) / self.step_time_s
        self.by_bound = {b.value: float(by_bound_row[k]) for k, b in enumerate(_BOUNDS)}
        flops = group.flops  # trace.flops, summed once for the group
        recorded_flops = flops  # the recorded layers are the trace's ops: the same sum
        share = flops / 1 / recorded_flops if recorded_flops else 1.0
        per_part: dict[str, float] = {part: float(joules[i]) * share for part, joules in parts.items()}
        per_part["link"] = 0  # one chip drives no link: sum() of nothing
        self.limit, self.per_part = throttled(per_part, self.energy, self.step_time_s, chip.tdp_w)  # at its voltage

    def result(self, peak_dynamic_w: float) -> RunResult:
        """The run's result; ``peak_dynamic_w``: the largest of its ops' dynamic power at the throttled clock."""
        trace, chip, energy, limit = self.group.trace, self.chip, self.energy, self.limit
        step_time_s = limit.step_time_s
        per_part = dict(self.per_part)
        per_part["static"] = energy.static_w * step_time_s
        energy_j = sum(per_part.values()) * 1
        power_w = energy_j / 1 / step_time_s if step_time_s > 0 else energy.static_w
        per_sample = energy_j / (trace.batch or trace.batch * 1)
        throughput = self.throughput * limit.clock_scale
        unit = throughput_unit(trace)
        padding = padding_fields(trace)
        generation = generation_fields(trace, throughput, step_time_s)  # at the throttled clock, as the event path
        return RunResult(
            software=self.group.software,
            input_wait_s=self.input_wait_s / limit.clock_scale,
            target=chip.name,
            workload=trace.name,
            mode=trace.mode.value,
            batch=trace.batch,
            precision=trace.precision.value,
            seq_len=trace.seq_len,
            num_chips=1,
            step_time_s=step_time_s,
            throughput=throughput,
            flops=self.group.flops,
            utilization=self.group.flops / self.step_time_s / chip.peak_flops(trace.precision) * limit.clock_scale,
            normalized=Normalized.of(throughput / 1, chip, power_w, energy.area_mm2),
            ops_time_s=self.ops_time_s / limit.clock_scale,
            step_overhead_s=self.step_overhead_s / limit.clock_scale,
            time_by_bound={bound: seconds / limit.clock_scale for bound, seconds in self.by_bound.items()},
            **memory_fields(chip, trace.memory_bytes),
            **generation,
            **decoder_fields(trace, 1, throughput, step_time_s, chip.peak_flops(trace.precision)),
            memory_per_chip=self.group.memory_split,
            global_batch=trace.batch,
            single_chip_throughput=self.throughput / 1 * limit.clock_scale,
            throughput_unit=unit,
            **padding,
            chip_not_published=chip.not_published(),
            layers=(),
            energy_j=energy_j,
            energy_per_sample_j=per_sample,
            energy_per_token_j=energy_per_token(per_sample, unit, trace.seq_len, padding["tokens_per_sequence"]),
            energy_breakdown_j={part: joules * 1 for part, joules in per_part.items()},
            power_w=power_w,
            peak_power_w=max(peak_dynamic_w + energy.static_w, power_w),
            static_power_w=energy.static_w,
            area_mm2=energy.area_mm2,
            area_source=energy.area_source,
            clock_scale=limit.clock_scale,
            voltage_scale=limit.voltage_scale,
            uncertainty=self.group.error_bars[0],
            extrapolation=self.group.error_bars[1],
        )
