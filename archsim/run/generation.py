"""Text generation on top of the run path: ``--mode generate`` and the largest batch that fits.

**generate** (:func:`archsim.run.runner.run_generate`) is one request of a decoder language model
as a server runs it with static batching: every sequence of the batch takes a prefill of ``P``
prompt tokens (``--prompt-len``), then ``N`` decode steps (``--gen-len``) together. Nothing is priced twice or
anew: the request is split into a ``prefill`` run and a ``decode`` run of the same target, layout,
batch and options, each built and replayed by :func:`archsim.run.runner.build` and
:func:`~archsim.run.runner.replay_built` (so whatever the run path does on a chip or a system -- data
parallelism today -- generation does too), and the two results are combined (:func:`combined`):

* ``ttft_s``: the prefill's step time (time to first token);
* ``tpot_s``: the decode run's step time: one step at the generation's mean context
  (:mod:`archsim.workloads.decoder`: the ``t``-th step attends to ``P + t`` keys, attention work is
  linear in the context, so ``N`` steps at ``P + (N + 1) // 2`` keys cost what the ``N`` steps cost;
  exact for odd ``N``, half a key short of the mean for even ``N``). It is the mean time per output
  token over the decode steps;
* ``e2e_s = ttft_s + N * tpot_s``, the request's latency; it is ``step_time_s``;
* ``output_tokens_per_s = global_batch * N / e2e_s`` (``throughput``; the prefill's own logits
  are not counted as an output token) and ``tokens_per_s``: prompt and generated tokens together,
  ``global_batch * (P + N) / e2e_s``;
* FLOPs, op time by bound, energy, communication and link traffic: the prefill's plus ``N`` times
  the decode step's (``energy_per_sample_j`` per sequence, ``energy_per_token_j`` per generated
  token); memory: the larger of the two (the decode step holds the KV cache of ``P + N`` tokens);
  layers and collectives: the prefill's, then one decode step's after it, named ``prefill.*`` and
  ``decode.*``.

With no batch asked, each run's default batch is halved until its step fits and the smaller of the
two is used for both.

**max_batch** (:func:`max_batch`): the largest batch (per chip, or per data-parallel replica on a
system, as ``--batch`` counts it) whose steps fit the memory of the chips that run them -- weights,
activations and the KV cache (the prompt's for a prefill, ``P + N`` tokens for a decode step, both
for generate), checked exactly as a run checks them (:func:`archsim.memory_fit.trace_needs`,
:func:`~archsim.memory_fit.fits`): a run at ``max_batch`` fits, one at ``max_batch + 1`` is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from archsim import memory_fit
from archsim.errors import UsageError
from archsim.limits import MAX_ARGUMENT
from archsim.results.records import LinkRecord, Normalized, RunResult
from archsim.spec.chip import ChipSpec
from archsim.spec.common import StreamingMemory
from archsim.workloads.options import Recompute
from archsim.workloads.trace import Mode, Trace


def max_batch(
    chip: ChipSpec, streaming: StreamingMemory, rebuilds: Sequence[Callable[[int, Recompute], Trace] | None]
) -> int | None:
    """The largest batch at which the steps every ``rebuilds`` builds all fit on ``chip``.

    None when a workload fixes its batch (a rebuild is None, or a trace file that cannot be rebuilt).
    Decoder memory grows affinely with the batch, so two builds give a guess that two more confirm;
    should they not, a doubling-and-bisecting search over every batch decides.
    """
    if any(rebuild is None for rebuild in rebuilds):
        return None
    known: dict[int, bool] = {}

    def needs(batch: int) -> list[memory_fit.Need]:
        return [
            n
            for rebuild in rebuilds
            if rebuild is not None
            for n in memory_fit.trace_needs(rebuild(batch, Recompute.NONE))
        ]

    def fits(batch: int) -> bool:
        if batch not in known:
            known[batch] = all(memory_fit.fits(chip, streaming, n.bytes, n.update_only) for n in needs(batch))
        return known[batch]

    try:  # a trace file keeps its model's name but cannot be rebuilt at another batch
        guess = _affine_guess(chip, streaming, needs)
    except UsageError:
        return None
    if 1 <= guess < MAX_ARGUMENT and fits(guess) and not fits(guess + 1):
        return guess
    return memory_fit.largest_fitting(fits, MAX_ARGUMENT + 1)


def _affine_guess(chip: ChipSpec, streaming: StreamingMemory, needs: Callable[[int], list[memory_fit.Need]]) -> int:
    """The largest batch that fits were every need affine in the batch, from batches 1 and 2.

    :func:`archsim.memory_fit.batch_guess`; 0 when batch 1 does not fit, at most :data:`MAX_ARGUMENT`.
    """
    first = needs(1)
    limit = memory_fit.limit_bytes(chip, streaming)
    if any(memory_fit.held_bytes(chip, streaming, n.bytes, n.update_only) > limit for n in first):
        return 0
    guess = memory_fit.batch_guess(chip, streaming, first, needs(2), 2)
    return MAX_ARGUMENT if guess is None else min(guess, MAX_ARGUMENT)


def combined(prefill: RunResult, decode: RunResult, gen_len: int, chip: ChipSpec) -> RunResult:
    """The record of a prefill followed by ``gen_len`` decode steps like ``decode`` (module docstring)."""
    n, ttft, tpot = gen_len, prefill.step_time_s, decode.step_time_s
    e2e = ttft + n * tpot
    samples = decode.global_batch
    output_tps = samples * n / e2e
    chips = decode.num_chips
    energy_j = prefill.energy_j + n * decode.energy_j
    power_w = energy_j / chips / e2e if e2e > 0 else decode.static_power_w
    single, scaling, note = _scaling(prefill, decode, n, output_tps)
    return replace(
        decode,
        mode=Mode.GENERATE.value,
        step_time_s=e2e,
        throughput=output_tps,
        flops=prefill.flops + n * decode.flops,
        utilization=(prefill.utilization * ttft + n * decode.utilization * tpot) / e2e,
        normalized=Normalized.of(output_tps / chips, chip, power_w, decode.area_mm2),
        ops_time_s=prefill.ops_time_s + n * decode.ops_time_s,
        step_overhead_s=prefill.step_overhead_s + n * decode.step_overhead_s,
        input_wait_s=prefill.input_wait_s + n * decode.input_wait_s,
        time_by_bound={k: prefill.time_by_bound.get(k, 0.0) + n * v for k, v in decode.time_by_bound.items()},
        memory_bytes=max(prefill.memory_bytes, decode.memory_bytes),
        streaming_memory_bytes=max(prefill.streaming_memory_bytes, decode.streaming_memory_bytes),
        uncertainty=_larger(prefill.uncertainty, decode.uncertainty),
        extrapolation=tuple(dict.fromkeys(prefill.extrapolation + decode.extrapolation)),
        single_chip_throughput=single,
        scaling_efficiency=scaling,
        scaling_note=note,
        comm_s=prefill.comm_s + n * decode.comm_s,
        exposed_comm_s=prefill.exposed_comm_s + n * decode.exposed_comm_s,
        links=_links(prefill.links, decode.links, n, e2e),
        collectives=tuple(
            [replace(c, name=f"prefill.{c.name}") for c in prefill.collectives]
            + [
                replace(c, name=f"decode.{c.name}", start_s=c.start_s + ttft, end_s=c.end_s + ttft)
                for c in decode.collectives
            ]
        ),
        tokens_per_s=samples * ((decode.prompt_len or 0) + n) / e2e,
        ttft_s=ttft,
        tpot_s=tpot,
        e2e_s=e2e,
        output_tokens_per_s=output_tps,
        energy_j=energy_j,
        energy_per_sample_j=energy_j / samples,
        energy_per_token_j=energy_j / (samples * n),
        energy_breakdown_j={
            k: prefill.energy_breakdown_j.get(k, 0.0) + n * v for k, v in decode.energy_breakdown_j.items()
        },
        power_w=power_w,
        peak_power_w=max(prefill.peak_power_w, decode.peak_power_w),
        clock_scale=min(prefill.clock_scale, decode.clock_scale),
        voltage_scale=min(prefill.voltage_scale, decode.voltage_scale),
        layers=tuple(
            [replace(layer, name=f"prefill.{layer.name}") for layer in prefill.layers]
            + [
                replace(layer, name=f"decode.{layer.name}", start_s=layer.start_s + ttft, end_s=layer.end_s + ttft)
                for layer in decode.layers
            ]
        ),
    )


def _larger(a: float | None, b: float | None) -> float | None:
    """The larger of two error bars (None when either is unknown)."""
    return None if a is None or b is None else max(a, b)


def _scaling(
    prefill: RunResult, decode: RunResult, n: int, output_tps: float
) -> tuple[float | None, float | None, str | None]:
    """One chip running the same batch's prefill and decode steps alone, the scaling against it, why not."""
    if prefill.single_chip_throughput is None or decode.single_chip_throughput is None:
        return None, None, prefill.scaling_note or decode.scaling_note
    batch, prompt = decode.batch, decode.prompt_len or 0
    one_chip_s = batch * prompt / prefill.single_chip_throughput + n * batch / decode.single_chip_throughput
    single = batch * n / one_chip_s
    ratio = output_tps / (decode.num_chips * single)
    return single, 1.0 if 1.0 < ratio <= 1.0 + 1e-9 else ratio, None  # a rounding residue is cut


def _links(prefill: Sequence[LinkRecord], decode: Sequence[LinkRecord], n: int, e2e: float) -> tuple[LinkRecord, ...]:
    """Each class of links over the prefill and ``n`` decode steps: bytes and busy time summed."""
    merged: dict[tuple[str, str, str], LinkRecord] = {}
    for records, weight in ((prefill, 1), (decode, n)):
        for r in records:
            key = (r.tier, r.link, r.direction)
            seen = merged.get(key)
            busy, sent = weight * r.busy_s, weight * r.bytes
            if seen is not None:
                busy, sent = busy + seen.busy_s, sent + seen.bytes
            top = r.max_utilization if seen is None else max(seen.max_utilization, r.max_utilization)
            merged[key] = replace(r, bytes=sent, busy_s=busy, utilization=busy / e2e, max_utilization=top)
    return tuple(merged.values())
