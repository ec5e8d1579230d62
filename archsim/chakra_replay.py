"""Replay a Chakra execution trace with communication nodes on a chip or a multi-chip system.

What is replayed (one rank's trace; every rank of the system is assumed to run the same one, as a
data-parallel or symmetric trace does):

* compute nodes are priced by the chip's cost model, as :func:`archsim.simulate` prices ops, and run
  one at a time in dependency order on the chip (the host's issue cost included);
* a collective (``ALL_REDUCE``, ``ALL_GATHER``, ``REDUCE_SCATTER``, ``BROADCAST``, ``ALL_TO_ALL``) of
  ``comm_size`` bytes takes the time :func:`~archsim.collective_run.call_time_s` gives one call of the
  system's collective library over all the system's chips (its protocol, launch latency and algorithm;
  ``--collective`` picks another algorithm), run alone on the links; ``BARRIER`` takes one hop's
  latency per tier; ``REDUCE``, ``GATHER`` and ``SCATTER`` are refused (the engine has no algorithm
  for them);
* a send or receive moves ``comm_size`` bytes over one link of the innermost tier (latency plus
  bytes over the link's bandwidth);
* communication nodes run one at a time on the chip's network queue (one communication stream, as
  NCCL's default), overlapping compute; every node starts once all its dependencies have finished.

Collectives do not contend with each other's links beyond that serialization, nor with compute for
memory bandwidth. A trace with communication needs a system as the target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import simpy

from archsim.collective_run import call_time_s
from archsim.engine.collectives import Collective
from archsim.errors import UsageError
from archsim.models import cost_model_for
from archsim.run.target import fabric_for, resolve_target
from archsim.spec.chip import ChipSpec
from archsim.spec.collective_library import CollectiveLibrarySpec
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.stack import default_software, stack_efficiency
from archsim.workloads.chakra import ChakraTrace, CommNode
from archsim.workloads.memory import resident_bytes

SUPPORTED = {
    "all-reduce": Collective.ALL_REDUCE,
    "all-gather": Collective.ALL_GATHER,
    "reduce-scatter": Collective.REDUCE_SCATTER,
    "broadcast": Collective.BROADCAST,
    "all-to-all": Collective.ALL_TO_ALL,
}


@dataclass(frozen=True, slots=True)
class NodeTiming:
    """When one node of the trace ran."""

    name: str
    kind: str
    """``compute``, a collective's name, ``send``, ``recv`` or ``none``."""
    start_s: float
    end_s: float


@dataclass(frozen=True)
class ChakraRun:
    """The replay of one Chakra trace."""

    target: str
    num_chips: int
    step_time_s: float
    compute_s: float
    """Time the chip spent on compute nodes."""
    comm_s: float
    """Time the network queue spent on communication nodes."""
    nodes: tuple[NodeTiming, ...]


def _comm_time(
    comm: CommNode, fabric: object, collectives: CollectiveLibrarySpec | None, algorithm: str | None, source: str
) -> float:
    from archsim.models.interconnect import Fabric

    assert isinstance(fabric, Fabric)
    if comm.collective in ("send", "recv"):
        tier = fabric.tiers[0]
        return tier.latency_s + comm.bytes / tier.link_bytes_per_s
    if comm.collective == "barrier":
        return sum(t.latency_s for t in fabric.tiers)
    if comm.collective not in SUPPORTED:
        raise UsageError(source, comm.name, f"{comm.collective} collectives are not simulated")
    if comm.bytes == 0:
        return 0.0
    return call_time_s(fabric, collectives, SUPPORTED[comm.collective].value, comm.bytes, algorithm, source)[0]


def replay_chakra(
    chakra: ChakraTrace,
    target: str,
    library: Library,
    precision: Precision | None = None,
    collective: str | None = None,
    source: str = "",
) -> ChakraRun:
    """Replay ``chakra`` on ``target`` (a chip, or a system when it has communication nodes)."""
    entry = library.find(["chip", "system"], target)
    fabric = None
    collectives = None
    if entry.kind == "system":
        system = library.system(target)
        chip: ChipSpec = library.chip(system.chip)
        fabric = fabric_for(system, library, 1, entry.source)
        collectives = library.system_collective_library(system)
        num_chips = fabric.num_chips
    else:
        chip = resolve_target(target, library).chip
        num_chips = 1
        if chakra.comms:
            raise UsageError(
                source, "TARGET", "a trace with communication nodes needs a multi-chip system as the target"
            )
    run_precision = precision or chip.default_precision
    efficiency = stack_efficiency(library, chip, default_software(library, chip), run_precision)
    model = cost_model_for(chip, efficiency, run_precision, resident_bytes(chakra.trace))
    op_times = [model.cost(op).time_s for op in chakra.trace.ops]
    comm_times = [_comm_time(c, fabric, collectives, collective, source) for c in chakra.comms]
    assert efficiency.host_overhead is not None
    return _simulate(chakra, op_times, comm_times, efficiency.host_overhead, target, num_chips)


def _simulate(
    chakra: ChakraTrace,
    op_times: Sequence[float],
    comm_times: Sequence[float],
    issue_s: float,
    target: str,
    num_chips: int,
) -> ChakraRun:
    env = simpy.Environment()
    compute, network = simpy.Resource(env, capacity=1), simpy.Resource(env, capacity=1)
    done = [env.event() for _ in chakra.nodes]
    timings: list[NodeTiming | None] = [None] * len(chakra.nodes)

    def run(index: int) -> simpy.events.ProcessGenerator:
        kind, j = chakra.nodes[index]
        waits = [done[d] for d in chakra.deps[index]]
        if kind == "op" and issue_s > 0:
            waits.append(env.timeout((j + 1) * issue_s))
        if waits:
            yield env.all_of(waits)
        if kind == "none":
            timings[index] = NodeTiming("", "none", env.now, env.now)
        else:
            resource = compute if kind == "op" else network
            with resource.request() as request:
                yield request
                start = env.now
                yield env.timeout(op_times[j] if kind == "op" else comm_times[j])
            name = chakra.trace.ops[j].name if kind == "op" else chakra.comms[j].name
            label = "compute" if kind == "op" else chakra.comms[j].collective
            timings[index] = NodeTiming(name, label, start, env.now)
        done[index].succeed()

    for index in range(len(chakra.nodes)):
        env.process(run(index))
    env.run()
    nodes = tuple(t for t in timings if t is not None and t.kind != "none")
    return ChakraRun(
        target=target,
        num_chips=num_chips,
        step_time_s=env.now,
        compute_s=sum(t.end_s - t.start_s for t in nodes if t.kind == "compute"),
        comm_s=sum(t.end_s - t.start_s for t in nodes if t.kind != "compute"),
        nodes=nodes,
    )
