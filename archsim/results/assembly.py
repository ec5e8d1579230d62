"""Assembling a run's :class:`~archsim.results.records.RunResult` from its replay.

:func:`build_result` for one chip, :func:`build_system_result` for a step on a multi-chip system (see
:mod:`archsim.results.records` for what the fields mean); the helpers compute the fields both share
(throughput unit, input wait, text-generation and memory fields).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from archsim.engine.replay import OpTiming
from archsim.memory_fit import capacity_bytes, capacity_technology, split_bytes
from archsim.models.base import Bound
from archsim.results.records import LayerRecord, LinkRecord, Normalized, RunResult
from archsim.spec.chip import ChipSpec
from archsim.workloads.memory import MemoryPerChip, memory_per_chip
from archsim.workloads.trace import Mode, Op, Phase, Trace

if TYPE_CHECKING:
    from archsim.engine.records import CollectiveRecord


def throughput_unit(trace: Trace) -> str:
    """What a run of ``trace`` counts per second, e.g. ``sequences/s``.

    ``tokens/s`` in the ``prefill`` and ``decode`` modes; else the trace's ``meta["sample"]`` when it
    names one, else ``sequence`` for a workload with a sequence length, else ``sample``.
    """
    if trace.mode.is_generation:
        return "tokens/s"
    sample = trace.meta.get("sample") or ("sequence" if trace.seq_len is not None else "sample")
    return f"{sample}s/s"


def padding_fields(trace: Trace) -> dict[str, Any]:
    """``padding`` and ``tokens_per_sequence``: how ``trace`` left its sequences' padding out (None: padded)."""
    tokens = trace.meta.get("tokens_per_sequence")
    return {"padding": trace.meta.get("padding"), "tokens_per_sequence": None if tokens is None else int(tokens)}


def input_wait(samples: int, busy_s: float, input_samples_per_s: float | None) -> float:
    """Seconds a step of ``samples`` that keeps the chip busy ``busy_s`` waits for its input (0: none)."""
    if input_samples_per_s is None:
        return 0.0
    return max(0.0, samples / input_samples_per_s - busy_s)


def _ratio(throughput: float, linear: float) -> float:
    """Throughput over linear scaling; a rounding residue above 1 (same ops summed in another order) is cut."""
    ratio = throughput / linear
    return 1.0 if 1.0 < ratio <= 1.0 + 1e-9 else ratio


def tokens_per_sample(trace: Trace) -> int:
    """What one sample counts for in ``throughput``.

    Its prompt's tokens (prefill), its one new token (decode), or 1 (a sample, in the other modes).
    """
    if trace.mode is Mode.PREFILL and trace.seq_len is not None:
        return trace.seq_len
    return 1


def generation_fields(trace: Trace, throughput: float, step_time_s: float) -> dict[str, Any]:
    """The text-generation fields of a record (prefill and decode; empty otherwise)."""
    if not trace.mode.is_generation:
        return {}
    decode = trace.mode is Mode.DECODE
    return {
        "tokens_per_s": throughput,
        "ttft_s": None if decode else step_time_s,
        "tpot_s": step_time_s if decode else None,
        "prompt_len": trace.seq_len,
        "gen_len": int(trace.meta["gen_len"]) if decode else None,
        "kv_cache_bytes": int(trace.meta.get("kv_cache_bytes", "0")),
    }


def decoder_fields(trace: Trace, steps: int, throughput: float, step_time_s: float, peak: float) -> dict[str, Any]:
    """A decoder model's fields: MFU, tensor, sequence and expert parallelism, and tokens/s when training or inferring.

    ``steps`` is how many times the trace's batch the step runs over the whole target (microbatches
    times replicas); ``peak`` is the whole target's peak FLOP/s at the run's precision.
    """
    model_flops = trace.meta.get("model_flops")
    if model_flops is None:
        return {}
    fields: dict[str, Any] = {
        "mfu": int(model_flops) * steps / (step_time_s * peak),
        "tensor_parallel": int(trace.meta.get("tensor_parallel", "1")),
        "sequence_parallel": trace.meta.get("sequence_parallel") == "true",
        "expert_parallel": int(trace.meta.get("expert_parallel", "1")),
    }
    if not trace.mode.is_generation and trace.seq_len is not None:
        fields["tokens_per_s"] = throughput * trace.seq_len
    return fields


def memory_fields(chip: ChipSpec, needed: int) -> dict[str, Any]:
    """The memory fields of a record for a chip whose step needs ``needed`` bytes."""
    held, streamed = split_bytes(chip, needed)
    fields = {"memory_bytes": held, "memory_capacity_bytes": capacity_bytes(chip), "streaming_memory_bytes": streamed}
    return fields | {"memory_technology": capacity_technology(chip)}


def build_result(
    *,
    target: str,
    chip: ChipSpec,
    trace: Trace,
    timings: list[OpTiming],
    step_overhead_s: float,
    num_chips: int,
    software: str | None = None,
    input_samples_per_s: float | None = None,
) -> RunResult:
    """Assemble the result of a replay.

    ``input_samples_per_s`` caps the chip's rate at what its input pipeline delivers: a step lasts
    at least ``batch / input_samples_per_s`` (the wait is ``input_wait_s``).
    """
    layers = tuple(LayerRecord.of(op, t, chip.clock) for op, t in zip(trace.ops, timings, strict=True))
    ops_time_s = max((t.end_s for t in timings), default=0.0)
    input_wait_s, step_time_s, by_bound = _step(trace.batch, ops_time_s, step_overhead_s, input_samples_per_s, timings)
    samples = trace.batch * num_chips
    throughput = samples * tokens_per_sample(trace) / step_time_s
    flops = trace.flops * num_chips
    peak = chip.peak_flops(trace.precision) * num_chips
    per_chip = throughput / num_chips
    return RunResult(
        software=software,
        input_wait_s=input_wait_s,
        target=target,
        workload=trace.name,
        mode=trace.mode.value,
        batch=trace.batch,
        precision=trace.precision.value,
        seq_len=trace.seq_len,
        **padding_fields(trace),
        num_chips=num_chips,
        step_time_s=step_time_s,
        throughput=throughput,
        flops=flops,
        utilization=flops / step_time_s / peak,
        normalized=Normalized.of(per_chip, chip),
        ops_time_s=ops_time_s,
        step_overhead_s=step_overhead_s,
        time_by_bound=by_bound,
        **memory_fields(chip, trace.memory_bytes),
        **generation_fields(trace, throughput, step_time_s),
        **decoder_fields(trace, num_chips, throughput, step_time_s, peak),
        memory_per_chip=memory_per_chip(trace),
        global_batch=samples,
        single_chip_throughput=per_chip,
        throughput_unit=throughput_unit(trace),
        chip_not_published=chip.not_published(),
        layers=layers,
    )


def _step(
    batch: int,
    ops_time_s: float,
    step_overhead_s: float,
    input_samples_per_s: float | None,
    timings: Sequence[OpTiming],
) -> tuple[float, float, dict[str, float]]:
    """A step's input wait, its time (ops, step overhead, input wait) and the ops' seconds by bound."""
    input_wait_s = input_wait(batch, ops_time_s + step_overhead_s, input_samples_per_s)
    by_bound = {b.value: 0.0 for b in Bound}
    for t in timings:
        by_bound[t.cost.bound.value] += t.end_s - t.start_s
    return input_wait_s, ops_time_s + step_overhead_s + input_wait_s, by_bound


def build_system_result(
    *,
    target: str,
    system: str,
    nodes: int,
    chip: ChipSpec,
    trace: Trace,
    batch: int,
    entries: Sequence[tuple[Op, OpTiming, int]],
    ops_time_s: float,
    step_overhead_s: float,
    num_chips: int,
    data_parallel: int,
    pipeline_stages: int,
    microbatches: int,
    schedule: str | None,
    collective: str | None,
    memory: MemoryPerChip,
    single_chip_step_s: float | None,
    scaling_note: str | None,
    comm_s: float,
    exposed_comm_s: float,
    stream_exposed_s: float = 0.0,
    bubble_s: float,
    bubble_fraction: float,
    links: Sequence[LinkRecord],
    collectives: Sequence[CollectiveRecord],
    software: str | None = None,
    input_samples_per_s: float | None = None,
    zero: int = 0,
) -> RunResult:
    """Assemble the result of a step on a system.

    ``trace`` is one microbatch's (the per-chip batch when not pipelined); ``batch`` is the per-replica
    batch; ``entries`` the representative ops with their timings and stages; ``single_chip_step_s``
    the step time of one chip running the same per-replica batch alone, or None with ``scaling_note``
    saying why one chip cannot; ``memory`` what the chip that holds the most holds. ``exposed_comm_s``
    is what the links add to the step and ``stream_exposed_s`` what the in-stream collectives add (whose
    ops already count under ``communication`` in ``time_by_bound``): the result's ``exposed_comm_s`` is both.
    """
    layers = tuple(LayerRecord.of(op, t, chip.clock, stage) for op, t, stage in entries)
    timings = [t for _, t, _ in entries]
    input_wait_s, step_time_s, by_bound = _step(batch, ops_time_s, step_overhead_s, input_samples_per_s, timings)
    by_bound[Bound.COMMUNICATION.value] += exposed_comm_s
    update_flops = sum(op.flops for op in trace.ops if op.phase is Phase.UPDATE)
    replica_flops = (trace.flops - update_flops) * microbatches + update_flops
    tensor_parallel = int(trace.meta.get("tensor_parallel", "1"))
    flops = replica_flops * data_parallel * tensor_parallel  # every chip of a tensor-parallel group runs a shard
    samples = batch * data_parallel
    throughput = samples * tokens_per_sample(trace) / step_time_s
    per_chip = throughput / num_chips
    single = None if single_chip_step_s is None else batch * tokens_per_sample(trace) / single_chip_step_s
    peak = chip.peak_flops(trace.precision) * num_chips
    return RunResult(
        software=software,
        input_wait_s=input_wait_s,
        target=target,
        workload=trace.name,
        mode=trace.mode.value,
        batch=batch,
        precision=trace.precision.value,
        seq_len=trace.seq_len,
        **padding_fields(trace),
        bn_group=int(trace.meta.get("bn_group", "1")),
        num_chips=num_chips,
        step_time_s=step_time_s,
        throughput=throughput,
        flops=flops,
        utilization=flops / step_time_s / peak,
        normalized=Normalized.of(per_chip, chip),
        ops_time_s=ops_time_s,
        step_overhead_s=step_overhead_s,
        time_by_bound=by_bound,
        **memory_fields(chip, memory.total),
        **generation_fields(trace, throughput, step_time_s),
        **decoder_fields(trace, microbatches * data_parallel, throughput, step_time_s, peak),
        memory_per_chip=memory,
        zero=zero,
        system=system,
        nodes=nodes,
        data_parallel=data_parallel,
        pipeline_stages=pipeline_stages,
        microbatches=microbatches,
        schedule=schedule,
        collective=collective,
        global_batch=samples,
        single_chip_throughput=single,
        scaling_efficiency=None if single is None else _ratio(throughput, num_chips * single),
        scaling_note=scaling_note,
        comm_s=comm_s,
        exposed_comm_s=exposed_comm_s + stream_exposed_s,
        bubble_s=bubble_s,
        bubble_fraction=bubble_fraction,
        links=tuple(links),
        collectives=tuple(collectives),
        throughput_unit=throughput_unit(trace),
        chip_not_published=chip.not_published(),
        layers=layers,
    )
