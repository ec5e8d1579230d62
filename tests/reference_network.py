"""Slow reference twin of the collective engine: every chip and every link of a fabric simulated.

The engine (:mod:`archsim.engine.collectives`) simulates one representative member per tier and lets
each ring step wait for its *own* previous step, which by symmetry arrives when its neighbour's does.
This twin builds every member's lanes and runs every chip's ring channels, each chunk waiting for the
chunk its real predecessor sent; it supports the hierarchical ring all-reduce without pipelining,
which is enough to check the symmetry shortcut on small systems.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import simpy

from archsim.engine.collectives import DEFAULT_CHUNK_BYTES, MAX_CHUNKS
from archsim.models.interconnect import Fabric, TierKind


def _chunks(nbytes: float, chunk_bytes: float) -> int:
    return 1 if nbytes <= 0 else max(1, min(MAX_CHUNKS, math.ceil(nbytes / chunk_bytes)))


def _succeed(event: simpy.Event) -> Callable[[simpy.Event], None]:
    def callback(_: simpy.Event) -> None:
        event.succeed()

    return callback


def full_allreduce_time(fabric: Fabric, nbytes: float, chunk_bytes: float = DEFAULT_CHUNK_BYTES) -> float:
    """Time of a hierarchical ring all-reduce of ``nbytes`` with every chip and link simulated."""
    env = simpy.Environment()
    tiers = fabric.tiers
    chips = fabric.num_chips
    below = [math.prod(t.size for t in tiers[:i]) for i in range(len(tiers))]

    def coords(chip: int) -> list[int]:
        return [(chip // below[i]) % t.size for i, t in enumerate(tiers)]

    def chip_of(c: list[int]) -> int:
        return sum(x * below[i] for i, x in enumerate(c))

    lanes: dict[tuple[int, tuple[int, ...], str], simpy.Resource] = {}

    def lane(t: int, chip: int, name: str) -> simpy.Resource:
        level = tiers[t].level_index
        c = coords(chip)
        member = tuple(x for i, x in enumerate(c) if tiers[i].level_index >= level)
        key = (t, member, name)
        if key not in lanes:
            lanes[key] = simpy.Resource(env, capacity=1)
        return lanes[key]

    def local_position(t: int, chip: int) -> int:
        level = tiers[t].level_index
        c = coords(chip)
        inside = [i for i in range(len(tiers)) if tiers[i].level_index < level]
        return sum(c[i] * below[i] for i in inside)

    done = {chip: env.event() for chip in range(chips)}
    phases = [(t, "rs") for t in range(len(tiers))] + [(t, "ag") for t in reversed(range(len(tiers)))]
    # arrivals[(phase, chip, channel)][step][chunk]: the chunk the chip sent has reached its successor
    arrivals: dict[tuple[int, int, int], list[list[simpy.Event]]] = {}
    phase_done = {(k, chip): env.event() for k in range(len(phases)) for chip in range(chips)}

    def channel_plan(t: int, chip: int) -> list[tuple[str, int]]:
        tier = tiers[t]
        total = tier.lanes * tier.directions
        per_chip = max(1, total // tier.chips_per_member)
        out = []
        for r in range(per_chip):
            index = (local_position(t, chip) * per_chip + r) % total
            if tier.kind is TierKind.POOLED:
                out.append((f"out{index}", +1))
            else:
                out.append(
                    (f"+{index}" if index < tier.lanes else f"-{index - tier.lanes}", 1 if index < tier.lanes else -1)
                )
        return out

    def neighbour(t: int, chip: int, step: int) -> int:
        c = coords(chip)
        c[t] = (c[t] + step) % tiers[t].size
        return chip_of(c)

    def run_chip(chip: int) -> simpy.events.ProcessGenerator:
        held = nbytes
        for k, (t, kind) in enumerate(phases):
            if k:
                yield phase_done[(k - 1, chip)]
            g = tiers[t].size
            step_bytes = held / g if kind == "rs" else held
            plan = channel_plan(t, chip)
            share = step_bytes / len(plan)
            chunks = _chunks(share, chunk_bytes)
            chunk = share / chunks
            procs = []
            for r, (name, direction) in enumerate(plan):
                procs.append(env.process(channel(k, t, chip, r, name, direction, g - 1, chunks, chunk)))
            yield env.all_of(procs)
            held = held / g if kind == "rs" else held * g
            phase_done[(k, chip)].succeed()
        done[chip].succeed()

    def channel(
        k: int, t: int, chip: int, r: int, name: str, direction: int, steps: int, chunks: int, chunk: float
    ) -> simpy.events.ProcessGenerator:
        tier = tiers[t]
        predecessor = neighbour(t, chip, -direction) if tier.kind is TierKind.RING else neighbour(t, chip, -1)
        mine = arrivals.setdefault((k, chip, r), [[env.event() for _ in range(chunks)] for _ in range(steps)])
        theirs = arrivals.setdefault((k, predecessor, r), [[env.event() for _ in range(chunks)] for _ in range(steps)])
        resource = lane(t, chip, name)
        for s in range(steps):
            for c in range(chunks):
                if s:
                    yield theirs[s - 1][c]
                with resource.request() as request:
                    yield request
                    yield env.timeout(chunk / tier.link_bytes_per_s)
                env.timeout(tier.latency_s).callbacks.append(_succeed(mine[s][c]))
        if steps:
            yield env.all_of(mine[steps - 1] + theirs[steps - 1])

    for chip in range(chips):
        env.process(run_chip(chip))
    env.run()
    return env.now
