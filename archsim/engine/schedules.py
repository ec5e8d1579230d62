"""Pipeline schedules: the order in which each chip runs its forward and backward blocks.

GPipe runs all forwards, then all backwards; 1F1B (PipeDream-Flush) ``P - s - 1`` warm-up forwards
on stage ``s``, then one forward and one backward alternately, then the remaining backwards
(:func:`stage_order`). The interleaved 1F1B schedule (Narayanan et al. 2021, section 2.2.2) puts
``V`` model chunks on each chip (:func:`interleaved_order`). With ``--interleave V`` a pipeline of
``P`` chips runs ``P x V`` virtual stages: virtual stage ``k`` is chunk ``k // P`` of chip ``k mod
P``, so a microbatch passes every chip ``V`` times (from the last chip back to the first between
chunks). Each chip runs its blocks in Megatron-LM's order
(``forward_backward_pipelining_with_interleaving``): microbatches go in groups of ``P``, a chip runs
the forwards of one group on chunk 0, then on chunk 1, and so on; its warm-up is ``2 (P - d - 1) +
(V - 1) P`` forwards, then one forward and one backward alternately, then the remaining backwards
(backwards take the chunks in reverse order). The pipeline bubble shrinks by ``V`` at the cost of
``V`` times as many activation sends. The number of microbatches must be a multiple of ``P``
(Megatron-LM asserts the same).
"""

from __future__ import annotations

from archsim.engine.options import Schedule
from archsim.workloads.microbatches import BlockKind


def stage_order(
    schedule: Schedule, stage: int, stages: int, microbatches: int, train: bool
) -> list[tuple[BlockKind, int]]:
    """The blocks stage ``stage`` runs, in order: (forward or backward, microbatch)."""
    m = microbatches
    forward, backward = BlockKind.FORWARD, BlockKind.BACKWARD
    if not train:
        return [(forward, i) for i in range(m)]
    if schedule is Schedule.GPIPE:
        return [(forward, i) for i in range(m)] + [(backward, i) for i in reversed(range(m))]
    warmup = min(stages - stage - 1, m)
    order = [(forward, i) for i in range(warmup)]
    for i in range(m - warmup):
        order += [(forward, warmup + i), (backward, i)]
    return order + [(backward, i) for i in range(m - warmup, m)]


VirtualBlock = tuple[BlockKind, int, int]
"""(forward or backward, virtual stage, microbatch)."""


def interleaved_order(chip: int, chips: int, chunks: int, microbatches: int, train: bool) -> list[VirtualBlock]:
    """The blocks chip ``chip`` of a pipeline of ``chips`` runs, each on one of its ``chunks`` virtual stages."""
    p, v, m = chips, chunks, microbatches
    total = m * v

    def block(kind: BlockKind, i: int) -> VirtualBlock:
        group, within = divmod(i, p * v)
        chunk = within // p
        if kind is BlockKind.BACKWARD:
            chunk = v - 1 - chunk
        return kind, chunk * p + chip, group * p + within % p

    forward, backward = BlockKind.FORWARD, BlockKind.BACKWARD
    if not train:
        return [block(forward, i) for i in range(total)]
    warmup = min(2 * (p - chip - 1) + (v - 1) * p, total)
    order = [block(forward, i) for i in range(warmup)]
    for i in range(total - warmup):
        order += [block(forward, warmup + i), block(backward, i)]
    return order + [block(backward, i) for i in range(total - warmup, total)]
