"""A link's :class:`~archsim.engine.network.LinkSlot` is ``simpy.Resource(env, capacity=1)`` event for event.

Processes start at drawn times (ties included), hold drawn sets of links, in the global order
:func:`~archsim.engine.network.send` takes them, for drawn durations (zero included) and release
them: with either resource, every process must get and free every link at the same moment, in the
same order, and the environment must have scheduled the same number of events -- so that event ids,
and with them the ties SimPy breaks by id, are the same in every run of the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from archsim.engine.network import LinkSlot

Job = tuple[int, list[int], int]
"""A process: its start time, the links it holds (sorted), how long it holds them (in time units)."""

JOBS = st.lists(
    st.tuples(
        st.integers(0, 4),
        st.sets(st.integers(0, 2), min_size=1).map(sorted),
        st.integers(0, 3),
    ),
    min_size=1,
    max_size=12,
)


def simulate(jobs: list[Job], make: Callable[[simpy.Environment], Any]) -> tuple[list[tuple[int, int, str, int]], int]:
    """What happened (time, process, what, link), and how many events the environment scheduled."""
    env = simpy.Environment()
    links = [make(env) for _ in range(3)]
    log: list[tuple[int, int, str, int]] = []

    def process(index: int, start: int, held: list[int], hold: int) -> simpy.events.ProcessGenerator:
        yield env.timeout(start)
        requests = []
        for link in held:
            request = links[link].request()
            requests.append(request)
            yield request
            log.append((int(env.now), index, "got", link))
        if hold:
            yield env.timeout(hold)
        for link, request in zip(held, requests, strict=True):
            links[link].release(request)
            log.append((int(env.now), index, "freed", link))
        yield env.timeout(0)
        log.append((int(env.now), index, "done", -1))

    for index, (start, held, hold) in enumerate(jobs):
        env.process(process(index, start, held, hold))
    env.run()
    return log, next(env._eid)  # the next event id: how many events were scheduled


@settings(max_examples=200, deadline=None)
@given(JOBS)
def test_link_slot_schedules_as_simpy_resource_does(jobs: list[Job]) -> None:
    assert simulate(jobs, LinkSlot) == simulate(jobs, lambda env: simpy.Resource(env, capacity=1))
