"""The input pipeline: whether a node's hosts feed its chips as fast as they train.

A training step needs ``global_batch`` fresh samples. A node (one copy of the system) prepares its
share, ``global_batch / nodes``, while the chips run the previous step (frameworks prefetch), so the
step takes the longer of the two: the chips' step, or the time the node needs to prepare a step's
samples. Preparing a sample means reading it from storage, decoding and augmenting it, and moving it
to its chip; each stage has a rate per node, and the slowest names the pipeline's limit:

=================  ==================================================================================
stage              samples per second per node
=================  ==================================================================================
``host-decode``    ``host_cores / host_decode_time`` (decoding on the host CPUs: ``--input-decode host``)
``device-decode``  ``chips / device_decode_time`` (decoding on the chips, DALI: ``--input-decode device``)
``host-link``      ``chips x link bandwidth / bytes per sample`` (decoded bytes after host decoding,
                   encoded bytes after device decoding)
``storage``        ``storage_bandwidth / encoded bytes per sample`` (when the system gives one)
=================  ==================================================================================

When the pipeline is slower, the step waits for its input: ``step_time_s`` becomes the input time,
``time_by_bound`` gains ``input`` (the wait), throughput and utilization fall accordingly, and
``input_pipeline.step_bound`` is ``input`` (``ops`` when the chips are the slower side). The numbers
come from the system's ``input_pipeline`` section and the workload's data set (``convergence/``);
nothing is fitted. Only image data sets (``format: jpeg``) are decoded; a token data set has no input
stage worth modelling and is refused.
"""

from __future__ import annotations

import enum
from dataclasses import replace

from archsim.errors import UsageError
from archsim.results.records import Normalized, RunResult
from archsim.results.training import InputRecord
from archsim.spec.chip import ChipSpec
from archsim.spec.convergence import ConvergenceSpec, DataFormat
from archsim.spec.library import Library
from archsim.spec.system import SystemSpec


class Decode(enum.StrEnum):
    """Where samples are decoded and augmented."""

    HOST = "host"
    DEVICE = "device"


def stage_rates(
    system: SystemSpec, library: Library, dataset: ConvergenceSpec, decode: Decode, nodes: int
) -> dict[str, float]:
    """Samples per second of each stage, all ``nodes`` nodes together (see the module docstring)."""
    pipeline = system.input_pipeline
    if pipeline is None:
        raise UsageError(system.name, "--input-decode", "the system describes no input_pipeline")
    data = dataset.dataset
    if data.format is not DataFormat.JPEG:
        raise UsageError(dataset.name, "--input-decode", f"{data.name} is {data.format.value}, not decoded images")
    assert data.encoded_sample_bytes is not None  # checked on load
    assert data.decoded_sample_bytes is not None
    chips = system.num_chips
    rates: dict[str, float] = {}
    if decode is Decode.HOST:
        rates["host-decode"] = pipeline.host_cores / pipeline.host_decode_time
        link_bytes = data.decoded_sample_bytes
    else:
        if pipeline.device_decode_time is None:
            raise UsageError(system.name, "--input-decode", "device: its chips do not decode (no device_decode_time)")
        rates["device-decode"] = chips / pipeline.device_decode_time
        link_bytes = data.encoded_sample_bytes
    rates["host-link"] = chips * library.link(pipeline.host_link).bandwidth / link_bytes
    if pipeline.storage_bandwidth is not None:
        rates["storage"] = pipeline.storage_bandwidth / data.encoded_sample_bytes
    return {stage: rate * nodes for stage, rate in rates.items()}


def with_input(result: RunResult, rates: dict[str, float], decode: Decode, chip: ChipSpec) -> RunResult:
    """``result`` with its step waiting for input when the pipeline (``rates``) is slower.

    The chips' own step is ``result.step_time_s``; the step becomes the longer of that and the time
    the pipeline needs for ``global_batch`` samples. Throughput, utilization, scaling efficiency and
    the normalized throughputs follow the longer step; ``time_by_bound["input"]`` is the wait, during
    which the chips draw their static power (added to the step's energy, average power from it).
    """
    limit = min(rates, key=lambda stage: (rates[stage], stage))
    rate = rates[limit]
    input_s = result.global_batch / rate
    ops_step = result.step_time_s
    step = max(ops_step, input_s)
    wait = step - ops_step
    record = InputRecord(
        decode=decode.value,
        samples_per_s=rate,
        limit=limit,
        stage_samples_per_s=dict(sorted(rates.items())),
        input_s=input_s,
        ops_step_s=ops_step,
        wait_s=wait,
        step_bound="input" if wait > 0 else "ops",
    )
    throughput = result.global_batch / step
    waiting_j = result.static_power_w * wait * result.num_chips  # the chips idle, leaking, while they wait
    energy_j = result.energy_j + waiting_j
    power_w = energy_j / result.num_chips / step if step > 0 else result.power_w
    breakdown = {**result.energy_breakdown_j}
    breakdown["static"] = breakdown.get("static", 0.0) + waiting_j
    scale = energy_j / result.energy_j if result.energy_j > 0 else 1.0
    return replace(
        result,
        step_time_s=step,
        throughput=throughput,
        utilization=result.utilization * ops_step / step,
        normalized=Normalized.of(throughput / result.num_chips, chip, power_w, result.area_mm2),
        energy_j=energy_j,
        energy_per_sample_j=result.energy_per_sample_j * scale,
        energy_per_token_j=None if result.energy_per_token_j is None else result.energy_per_token_j * scale,
        energy_breakdown_j=breakdown,
        power_w=power_w,
        time_by_bound={**result.time_by_bound, "input": wait},
        scaling_efficiency=None if result.scaling_efficiency is None else result.scaling_efficiency * ops_step / step,
        input_pipeline=record,
    )
