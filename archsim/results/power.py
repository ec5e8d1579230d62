"""Energy, power and area of a run: the energy model (:mod:`archsim.models.energy`) applied to a result.

:func:`with_energy` takes a finished :class:`RunResult` and fills its energy fields from the counts
it already holds: each layer's FLOPs, unit and main-memory bytes, each link class's bytes, and the
step time. Main-memory and link bits are priced at the ``energy_per_bit`` of the chip's memory
technology and of each link type, which :func:`priced` reads from the library; a description used
by the run without that field is refused in one line naming its file. On a multi-chip system the
layers are the representative chip's (one microbatch, every stage once), so their energy is scaled
by the chip's share of the step's FLOPs; each chip is taken to drive one link of every link class
the step used. When the chip's average power would pass its
published TDP the clock and the supply voltage throttle together (:func:`archsim.models.dvfs.throttle`):
the step's times (each layer's and collective's start and end too, its communication, bubble and
input wait: the same cycles at a lower clock), throughput and utilization say so through
``clock_scale``, and its energy, power and breakdown (each layer's too) are those at the lower
voltage. A layer's ``roofline_s`` stays the nominal clock's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from archsim.errors import LookupFailed, SpecError
from archsim.models.dvfs import Throttle, throttle
from archsim.models.energy import BITS_PER_BYTE, ChipEnergy, OpEnergy, chip_energy
from archsim.results.records import LayerRecord, Normalized, RunResult
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Precision
from archsim.spec.energy import EnergySpec
from archsim.spec.library import Library
from archsim.spec.link import LinkSpec
from archsim.spec.memory import MemorySpec

TECHNOLOGY = "cmos"
"""The energy technology (``energy/cmos.yaml``) every run is priced with; a user folder may shadow it."""

MATRIX_UNIT = "matrix"

CORE_PARTS = frozenset(("compute", "register", "sram", "l2", "activation", "instruction"))
"""The parts of ``energy_breakdown_j`` paid on the chip's own supply, which a throttle's lower voltage
lowers by ``(V/V0)^2``; ``dram`` and ``link`` are paid on their own supplies (:mod:`archsim.models.dvfs`)."""


def _layer_energy(energy: ChipEnergy, layers: tuple[LayerRecord, ...]) -> tuple[list[OpEnergy], dict[str, float]]:
    """Each layer's dynamic energy at nominal clock and voltage, and the layers' sum by part (one chip)."""
    parts = dict.fromkeys(("compute", "register", "sram", "l2", "dram", "activation", "instruction"), 0.0)
    ops = []
    for layer in layers:
        matrix = layer.unit == MATRIX_UNIT
        op = energy.op_energy(matrix, layer.flops, layer.bytes, layer.end_s - layer.start_s, layer.onchip_bytes)
        parts["compute"] += op.compute_j
        parts["register"] += op.register_j
        parts["sram"] += op.sram_j
        parts["l2"] += op.l2_j
        parts["dram"] += op.dram_j
        parts["activation"] += op.activation_j
        parts["instruction"] += op.instruction_j
        ops.append(op)
    return ops, parts


def throttled(
    parts: Mapping[str, float], energy: ChipEnergy, step_time_s: float, limit_w: float | None
) -> tuple[Throttle, dict[str, float]]:
    """The power limit's throttle of a step of dynamic energy ``parts`` per chip, and the parts at its voltage.

    ``parts`` are at nominal voltage; at the throttled one :data:`CORE_PARTS` are times ``(V/V0)^2``,
    the others as they are. The event path (:func:`with_energy`) and the batch sweep path
    (:mod:`archsim.sweep.batch_eval`) both throttle through it.
    """
    core_j = sum(joules for part, joules in parts.items() if part in CORE_PARTS)
    other_j = sum(joules for part, joules in parts.items() if part not in CORE_PARTS)
    limit = throttle(core_j, other_j, energy.static_w, step_time_s, limit_w, energy.voltage)
    volts = limit.core_energy_scale
    return limit, {part: joules * volts if part in CORE_PARTS else joules for part, joules in parts.items()}


def energy_per_token(
    per_sample_j: float, throughput_unit: str, seq_len: int | None, tokens_per_sequence: int | None
) -> float | None:
    """Energy per token: per sample where a token is the sample (``tokens/s``), else per token of a sequence.

    None without sequences. A sequence's tokens are its real ``tokens_per_sequence`` where its padding
    was left out, else ``seq_len``. Both the event path (:func:`with_energy`) and the batch path
    (:mod:`archsim.sweep.batch_eval`) use it.
    """
    if throughput_unit == "tokens/s":
        return per_sample_j
    tokens = tokens_per_sequence or seq_len
    return per_sample_j / tokens if tokens else None


def with_energy(
    result: RunResult,
    chip: ChipSpec,
    tech: EnergySpec,
    dram_bit_j: float,
    link_bit_j: Mapping[str, float],
    original: ChipSpec | None = None,
) -> RunResult:
    """``result`` with energy per step, power per chip, area and the power-normalized throughputs.

    ``dram_bit_j``: energy per bit of the chip's main memory; ``link_bit_j``: energy per bit of each
    link type the run used, by name. ``original``: the description ``chip`` is a variant of, if any
    (see :func:`archsim.models.energy.die_area`).
    """
    energy = chip_energy(chip, tech, Precision(result.precision), dram_bit_j, original)
    ops, parts = _layer_energy(energy, result.layers)
    recorded_flops = sum(layer.flops for layer in result.layers)
    # the recorded layers are one chip's ops once; the step runs the chip's share of all the FLOPs
    share = result.flops / result.num_chips / recorded_flops if recorded_flops else 1.0
    per_chip = {part: joules * share for part, joules in parts.items()}
    per_chip["link"] = sum(link.bytes * BITS_PER_BYTE * link_bit_j[link.link] for link in result.links)
    limit, per_chip = throttled(per_chip, energy, result.step_time_s, chip.tdp_w)
    volts = limit.core_energy_scale  # (V/V0)^2 on what the chip's own supply pays
    # every time of the step is over the throttle's clock_scale, each layer's too (the same cycles)
    layers = tuple(
        layer.with_energy(op.at_voltage(volts), limit.clock_scale) for layer, op in zip(result.layers, ops, strict=True)
    )
    step_time_s = limit.step_time_s
    per_chip["static"] = energy.static_w * step_time_s
    chips = result.num_chips
    energy_j = sum(per_chip.values()) * chips
    power_w = energy_j / chips / step_time_s if step_time_s > 0 else energy.static_w
    # each op's power at the throttled clock: its energy over its nominal time stretched (as the batch path)
    durations = [
        (layer.energy_j, nominal.end_s - nominal.start_s) for layer, nominal in zip(layers, result.layers, strict=True)
    ]
    peak_dynamic = max((j / (s / limit.clock_scale) for j, s in durations if s > 0), default=0.0)
    samples = result.global_batch or result.batch * chips
    per_sample = energy_j / samples
    throughput = result.throughput * limit.clock_scale
    single = result.single_chip_throughput  # taken to throttle as the step does
    return replace(
        result,
        layers=layers,
        step_time_s=step_time_s,
        ops_time_s=result.ops_time_s / limit.clock_scale,
        input_wait_s=result.input_wait_s / limit.clock_scale,
        comm_s=result.comm_s / limit.clock_scale,
        exposed_comm_s=result.exposed_comm_s / limit.clock_scale,
        bubble_s=result.bubble_s / limit.clock_scale,
        collectives=tuple(
            replace(c, start_s=c.start_s / limit.clock_scale, end_s=c.end_s / limit.clock_scale)
            for c in result.collectives
        ),
        time_by_bound={bound: seconds / limit.clock_scale for bound, seconds in result.time_by_bound.items()},
        step_overhead_s=result.step_overhead_s / limit.clock_scale,
        throughput=throughput,
        single_chip_throughput=None if single is None else single * limit.clock_scale,
        utilization=result.utilization * limit.clock_scale,
        mfu=None if result.mfu is None else result.mfu * limit.clock_scale,
        tokens_per_s=None if result.tokens_per_s is None else result.tokens_per_s * limit.clock_scale,
        ttft_s=None if result.ttft_s is None else result.ttft_s / limit.clock_scale,
        tpot_s=None if result.tpot_s is None else result.tpot_s / limit.clock_scale,
        normalized=Normalized.of(throughput / chips, chip, power_w, energy.area_mm2),
        energy_j=energy_j,
        energy_per_sample_j=per_sample,
        energy_per_token_j=energy_per_token(
            per_sample, result.throughput_unit, result.seq_len, result.tokens_per_sequence
        ),
        energy_breakdown_j={part: joules * chips for part, joules in per_chip.items()},
        power_w=power_w,
        peak_power_w=max(peak_dynamic + energy.static_w, power_w),
        static_power_w=energy.static_w,
        area_mm2=energy.area_mm2,
        area_source=energy.area_source,
        clock_scale=limit.clock_scale,
        voltage_scale=limit.voltage_scale,
    )


def _original(chip: ChipSpec, library: Library) -> ChipSpec | None:
    """The chip as its file describes it, when the library holds a variant of it (a sweep's), else None."""
    try:
        entry = library.find(["chip"], chip.name)
    except LookupFailed:  # a chip given by a path outside the library has no variant
        return None
    if library.spec(entry) is not chip:  # the name's entry holds another chip: this one is not its variant
        return None
    original: ChipSpec = library.file_spec(entry)
    return None if original == chip else original


def _energy_per_bit(library: Library, kind: str, name: str) -> float:
    """The ``energy_per_bit`` of a memory technology or link type; without one, a one-line SpecError."""
    entry = library.find([kind], name)
    spec: MemorySpec | LinkSpec = library.spec(entry)
    if spec.energy_per_bit is None:
        raise SpecError(entry.source, "energy_per_bit", f"needed to price the energy of a run over {kind} {name!r}")
    return spec.energy_per_bit


def dram_bit_j(library: Library, chip: ChipSpec) -> float:
    """The ``energy_per_bit`` of ``chip``'s main-memory technology (a one-line SpecError without one)."""
    return _energy_per_bit(library, "memory", chip.memory.main.technology)


def priced(result: RunResult, chip: ChipSpec, library: Library) -> RunResult:
    """``result`` with its energy fields, priced by the library's :data:`TECHNOLOGY`.

    Main memory and links at the ``energy_per_bit`` of the chip's memory and of each link type used.
    """
    tech: EnergySpec = library.spec(library.find(["energy"], TECHNOLOGY))
    links = {link.link: _energy_per_bit(library, "link", link.link) for link in result.links}
    return with_energy(result, chip, tech, dram_bit_j(library, chip), links, _original(chip, library))
