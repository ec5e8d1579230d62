"""Where a step's data lives on one chip, and the one-line refusal of a step that does not fit.

A GPU, an Ascend or a TPU holds a step in its main memory (HBM): a step that needs more is refused.
An IPU runs a program whose data lives in its In-Processor Memory, the SRAM of its tiles (``tiles x
tile_sram``, the memory the IPU model spreads the data over). Its main memory is streaming memory:
DDR behind the IPU-Gateway, reached over a PCIe link about 3,000 times slower than the tiles' SRAM.
Poplar refuses at compile time a program that does not fit In-Processor Memory unless the program
places data in streaming memory, so archsim does the same: what an IPU may keep in streaming memory
is the run's :class:`~archsim.spec.common.StreamingMemory` option, ``none`` by default.

* ``none``: the whole step (weights, gradients, master weights, optimizer state, activations) must fit
  In-Processor Memory.
* ``optimizer-state``: the state only the optimizer update touches
  (:func:`~archsim.workloads.memory.update_only_bytes`) may live in streaming memory; the rest must fit.
  The IPU model keeps that state in the SRAM the rest leaves free and streams the remainder in and out
  for the update.
* ``all``: anything may; what does not fit In-Processor Memory is streamed by every op that touches it
  (the streaming-memory cliff), up to both memories together.

The option is a permission: a chip without streaming memory (every other family) holds the whole step
in its main memory whatever it says, so one sweep can set it for GPUs and IPUs alike.

A refused step names the largest batch that fits and the options that would make the asked batch fit
(:func:`check_needs`). All sizes are bytes per chip.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from archsim.errors import CapacityError
from archsim.spec.chip import ChipSpec
from archsim.spec.common import StreamingMemory
from archsim.units import format_bytes
from archsim.workloads.memory import trace_recompute, update_only_bytes
from archsim.workloads.options import Recompute
from archsim.workloads.trace import Mode, Trace

ONCHIP_NAME = "In-Processor Memory"


def has_streaming_memory(chip: ChipSpec) -> bool:
    """True for chips whose main memory is streaming memory behind on-chip program memory (IPUs)."""
    return chip.section.in_processor_bytes() is not None


def capacity_bytes(chip: ChipSpec) -> int:
    """The memory a step's data is measured against: In-Processor Memory on IPUs, main memory elsewhere."""
    in_processor = chip.section.in_processor_bytes()
    return chip.memory.main.capacity if in_processor is None else in_processor


def capacity_technology(chip: ChipSpec) -> str:
    """The technology (a ``memory/`` name) of the memory :func:`capacity_bytes` measures."""
    if has_streaming_memory(chip) and chip.memory.onchip is not None:
        return chip.memory.onchip.technology
    return chip.memory.main.technology


def held_bytes(chip: ChipSpec, streaming: StreamingMemory, needed: int, update_only: int) -> int:
    """Bytes of a step that must fit :func:`limit_bytes` (``update_only``: state only the update touches)."""
    if has_streaming_memory(chip) and streaming is StreamingMemory.OPTIMIZER_STATE:
        return max(0, needed - update_only)
    return needed


def limit_bytes(chip: ChipSpec, streaming: StreamingMemory) -> int:
    """What :func:`held_bytes` may reach: the capacity, plus streaming memory when anything may stream."""
    if has_streaming_memory(chip) and streaming is StreamingMemory.ALL:
        return capacity_bytes(chip) + chip.memory.main.capacity
    return capacity_bytes(chip)


def fits(chip: ChipSpec, streaming: StreamingMemory, needed: int, update_only: int) -> bool:
    """True when a step needing ``needed`` bytes (``update_only`` of them update-only state) can run."""
    return held_bytes(chip, streaming, needed, update_only) <= limit_bytes(chip, streaming)


def split_bytes(chip: ChipSpec, needed: int) -> tuple[int, int]:
    """``needed`` bytes as (in the measured memory, in streaming memory): IPUs fill their SRAM first."""
    if has_streaming_memory(chip):
        held = min(needed, capacity_bytes(chip))
        return held, needed - held
    return needed, 0


def memory_name(chip: ChipSpec, streaming: StreamingMemory) -> str:
    """How a refusal names the memory that was too small."""
    if not has_streaming_memory(chip):
        return f"{chip.memory.main.technology} memory"
    if streaming is StreamingMemory.ALL:
        return f"{ONCHIP_NAME} and streaming memory"
    return ONCHIP_NAME


def largest_fitting(fits_batch: Callable[[int], bool], below: int, guess: int | None = None) -> int:
    """The largest batch in ``1 .. below - 1`` for which ``fits_batch`` holds (0: none); memory grows with batch.

    Without ``guess``: doubling from 1, then bisecting, about ``2 log2(answer)`` calls, however large
    ``below`` is. With ``guess`` (an estimate of the answer, :func:`batch_guess`): galloping from it
    to the nearest batch that does (not) fit, then bisecting, a few calls when the guess is close.
    As memory grows with batch, the answer is the same either way; the guess only saves calls.
    """
    if below <= 1 or not fits_batch(1):
        return 0
    if guess is not None and 1 < guess < below:
        low, high = _bracket(fits_batch, below, guess)
    else:
        low, high = 1, 2  # every batch up to low fits, high does not (once the doubling stops)
        while high < below and fits_batch(high):
            low, high = high, 2 * high
    high = min(high, below)
    while high - low > 1:
        mid = (low + high) // 2
        if fits_batch(mid):
            low = mid
        else:
            high = mid
    return low


def _bracket(fits_batch: Callable[[int], bool], below: int, guess: int) -> tuple[int, int]:
    """``(low, high)`` around ``guess``: ``low`` fits, ``high`` does not (or is at least ``below``).

    Steps away from ``guess`` double (1, 2, 4, ...), so a guess off by ``d`` costs about ``2 log2(d)`` calls.
    """
    step = 1
    if fits_batch(guess):
        low, high = guess, guess + 1
        while high < below and fits_batch(high):
            low, step = high, 2 * step
            high = guess + step
        return low, high
    high, low = guess, guess - 1
    while low > 1 and not fits_batch(low):
        high, step = low, 2 * step
        low = max(1, guess - step)
    return low, high


def batch_guess(
    chip: ChipSpec, streaming: StreamingMemory, first: Sequence[Need], last: Sequence[Need], batch: int
) -> int | None:
    """The batch at which a step's chips reach their memory, held bytes taken as affine in batch.

    ``first`` and ``last`` are what the chips of the step hold at batch 1 and at ``batch`` (above 1);
    each chip whose bytes grow reaches the limit at its own batch, and the smallest is the guess (None:
    no chip grows, or the steps differ in their chips). An estimate for :func:`largest_fitting`, never
    its answer.
    """
    if len(first) != len(last):
        return None
    limit = limit_bytes(chip, streaming)
    guesses = []
    for one, many in zip(first, last, strict=True):
        start = held_bytes(chip, streaming, one.bytes, one.update_only)
        end = held_bytes(chip, streaming, many.bytes, many.update_only)
        if end > start:
            guesses.append(1 + (limit - start) * (batch - 1) // (end - start))
    return min(guesses, default=None)


@dataclass(frozen=True, slots=True)
class Need:
    """What one chip of a step holds: ``bytes`` in all, ``update_only`` of them touched by the update only."""

    what: str
    """The step or stage, for the message (``batch 32``, ``stage 0 with 4 micro-batches of 2 in flight``)."""
    bytes: int
    update_only: int


def trace_needs(trace: Trace) -> list[Need]:
    """The one chip of a step that runs ``trace`` whole."""
    kv_cache = int(trace.meta.get("kv_cache_bytes", "0"))
    cache = f" with a {format_bytes(kv_cache)} KV cache" if kv_cache else ""
    return [Need(f"batch {trace.batch}{cache}", trace.memory_bytes, update_only_bytes(trace.ops))]


def one_chip_cannot_hold(chip: ChipSpec, trace: Trace) -> str | None:
    """Why one chip is no reference for a run of ``trace`` split over several (None: it is one).

    The reference holds the whole step in its memory with nothing in streaming memory: a chip that
    streams part of it (even only the optimizer state) runs slower than its share of several chips,
    which together hold more, and would put their scaling above linear.
    """
    need = trace_needs(trace)[0]
    if fits(chip, StreamingMemory.NONE, need.bytes, need.update_only):
        return None
    return (
        f"one {chip.name} cannot hold {trace.name} at micro-batch {trace.batch}: it needs "
        f"{format_bytes(need.bytes)}, more than its {format_bytes(capacity_bytes(chip))} "
        f"of {memory_name(chip, StreamingMemory.NONE)}"
    )


@dataclass(frozen=True)
class Change:
    """A change to a run that may make its step fit: the flags that ask for it, and whether it does."""

    flags: str
    """How to ask for it (``--zero 2``, ``--pipeline-stages 4``)."""
    fits: Callable[[], bool]
    """Whether the step fits with it (checked by building and measuring the changed step)."""


def check_needs(
    chip: ChipSpec,
    streaming: StreamingMemory,
    trace: Trace,
    needs_of: Callable[[Trace], list[Need]],
    rebuild: Callable[[int, Recompute], Trace] | None,
    field: str = "--batch",
    changes: Sequence[Change] | None = None,
) -> None:
    """Refuse (one line, :class:`~archsim.errors.CapacityError`) a step one of whose chips does not fit.

    ``needs_of`` gives what each chip of a step on ``trace`` holds; ``rebuild(batch, recompute)``
    builds the same workload at another (micro-)batch, recomputing ``recompute`` (None: the
    workload fixes its batch). The message names the largest batch that fits and the options that
    would make this one fit, each checked. A decoder's training step names instead the smallest
    change that fits, the first of (:func:`smallest_change`): full recomputation, ``changes`` in
    their order (what only the run layer can check: a higher ZeRO stage or tensor-parallel degree, more
    pipeline stages; None on a chip, whose message then says what a system could change), a smaller
    (micro-)batch.
    """

    def all_fit(candidate: Trace, option: StreamingMemory) -> bool:
        return all(fits(chip, option, n.bytes, n.update_only) for n in needs_of(candidate))

    needs = needs_of(trace)
    failing = [n for n in needs if not fits(chip, streaming, n.bytes, n.update_only)]
    if not failing:
        return
    worst = max(failing, key=lambda n: held_bytes(chip, streaming, n.bytes, n.update_only))
    recompute = trace_recompute(trace)
    unit = "batch" if field == "--batch" else "micro-batch"
    remedies: list[str] = []
    size = 0
    if rebuild is None:
        largest = "the workload fixes its batch"
    else:
        needs_by_batch: dict[int, list[Need]] = {}

        def needs_at(batch: int) -> list[Need]:  # batch 1 is built for the guess and asked again
            if batch not in needs_by_batch:
                needs_by_batch[batch] = needs_of(rebuild(batch, recompute))
            return needs_by_batch[batch]

        def fits_at(batch: int) -> bool:
            return all(fits(chip, streaming, n.bytes, n.update_only) for n in needs_at(batch))

        guess = batch_guess(chip, streaming, needs_at(1), needs, trace.batch) if trace.batch > 2 else None
        size = largest_fitting(fits_at, trace.batch, guess)
        largest = f"the largest {unit} that fits is {size}" if size else f"not even a {unit} of 1 fits"
        full = Recompute.FULL
        if trace.mode is Mode.TRAIN and recompute is not full and all_fit(rebuild(trace.batch, full), streaming):
            remedies.append("--recompute")
    order = list(StreamingMemory)
    if has_streaming_memory(chip):
        remedies += [
            f"--streaming-memory {option.value}"
            for option in order[order.index(streaming) + 1 :]
            if all_fit(trace, option) and (option is StreamingMemory.ALL or worst.update_only > 0)
        ]
    held = held_bytes(chip, streaming, worst.bytes, worst.update_only)
    problem = (
        f"{worst.what} needs {format_bytes(held)}, more than the chip's "
        f"{format_bytes(limit_bytes(chip, streaming))} of {memory_name(chip, streaming)}; {largest}"
    )
    if rebuild is not None and trace.mode is Mode.TRAIN and trace.meta.get("architecture") == "decoder":
        ordered = list(changes or ())
        if recompute is not Recompute.FULL:
            full_fits = "--recompute" in remedies
            ordered.insert(0, Change("--recompute full", lambda: full_fits))
        if size:
            smaller = f"--batch {size}" if field == "--batch" else f"micro-batches of {size} (more --microbatches)"
            ordered.append(Change(smaller, lambda: True))
        named = smallest_change(ordered)
        problem += "; " + named
        if changes is None:  # a chip: what a system could change is not checked here
            problem += "; on a system, --zero, --tensor-parallel or --pipeline-stages divide its training state"
        elif named.startswith("none of"):
            problem += " (archsim plan searches layouts that combine them)"
        remedies = [r for r in remedies if r != "--recompute"]
        if remedies:
            also = " also" if named.startswith("the smallest") else ""
            problem += f"; it{also} fits with " + ", or ".join(remedies)
        raise CapacityError(chip.name, field, problem)
    if remedies:
        problem += "; it fits with " + ", or ".join(remedies)
    if trace.parameters and not trace.mode.is_generation:  # generation runs data parallel only
        problem += "; more pipeline stages (--pipeline-stages, on a system) divide its weights"
    raise CapacityError(chip.name, field, problem)


def smallest_change(changes: Sequence[Change]) -> str:
    """The first of ``changes`` that fits, as a refusal says it (each checked only until one fits)."""
    for change in changes:
        if change.fits():
            return f"the smallest change that fits is {change.flags}"
    if not changes:
        return "no other change to try"
    return f"none of {', '.join(change.flags for change in changes)} fits alone"
