"""One collective on a system, as nccl-tests measures it: :func:`collective` (``archsim collective``).

Each size is one call of the system's collective library (or the one ``software`` names): the library
picks its protocol and algorithm (:mod:`archsim.models.collective_cost`), the engine runs the call on
the fabric as that protocol sees it (:func:`archsim.engine.collectives.simulate_collective`), and the
library's launch latency comes first. The result gives, as nccl-tests does (doc/PERFORMANCE.md):

* ``time_s``: the call, alone on the system;
* ``algbw_bytes_per_s`` = ``bytes / time_s`` (``bytes`` is the per-chip buffer: the whole vector of
  an all-reduce, a broadcast or an all-to-all, the gathered result of an all-gather, the input of a
  reduce-scatter);
* ``busbw_bytes_per_s`` = ``algbw * factor``: all-reduce ``2(n-1)/n``; all-gather, reduce-scatter,
  all-to-all ``(n-1)/n``; broadcast 1 -- comparable to the links' bandwidth whatever the collective.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from archsim.engine.collectives import resolve_algorithm, simulate_collective
from archsim.engine.parallel import CommPlan
from archsim.errors import LimitError, UsageError
from archsim.limits import check_nodes
from archsim.models.collective_cost import COLLECTIVES, CallPlan, bus_factor, plan_call
from archsim.models.interconnect import Fabric
from archsim.run.target import fabric_for
from archsim.spec.collective_library import CollectiveLibrarySpec
from archsim.spec.library import Library
from archsim.spec.system import Algorithm, SystemSpec
from archsim.workloads.trace import CommOp

MAX_COLLECTIVE_BYTES = 2**40
"""Largest buffer of one call (1 TiB, more than any accelerator's memory)."""
MAX_SIZES = 64
"""Most sizes one ``archsim collective`` prints."""


@dataclass(frozen=True)
class CollectiveResult:
    """One call of a collective: what ran, its time and nccl-tests' two bandwidths (bytes per second)."""

    system: str
    collective: str
    bytes: int
    chips: int
    nodes: int
    library: str | None
    """Collective library (None: the bare links, a system that names none)."""
    protocol: str | None
    algorithm: str
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float

    def to_dict(self) -> dict[str, object]:
        """The fields as a JSON-ready mapping."""
        return asdict(self)


def call_time_s(
    fabric: Fabric,
    library: CollectiveLibrarySpec | None,
    collective: str,
    nbytes: int,
    algorithm: str | None = None,
    source: str = "",
) -> tuple[float, CallPlan | None, Algorithm]:
    """Seconds of one call on ``fabric`` under ``library`` (None: bare links), its plan and algorithm."""
    if library is None:
        chosen = resolve_algorithm(algorithm, fabric, source)
        return simulate_collective(fabric, collective, nbytes, chosen).time_s, None, chosen
    asked = Algorithm(algorithm) if algorithm not in (None, "auto") else None
    plan = plan_call(library, collective, nbytes, fabric, asked)
    chosen = resolve_algorithm(plan.algorithm, plan.fabric, source)
    outcome = simulate_collective(plan.fabric, collective, nbytes, chosen, chunk_bytes=plan.chunk_bytes)
    return plan.fixed_s + outcome.time_s, plan, chosen


def gradient_call(
    library: Library,
    system: SystemSpec,
    fabric: Fabric,
    bucket_bytes: int,
    algorithm: Algorithm | None = None,
    software_library: str | None = None,
) -> CallPlan | None:
    """How a collective library runs a gradient bucket's all-reduce (None: none is named).

    The library is ``software_library`` (the ``collective_library`` of the software stack the run
    names with ``--software``) or else the system's own. Training runs charge every bucket this
    plan: the protocol the library picks for a full bucket, its fabric and launch latency.
    ``algorithm`` (an explicit ``--collective``) overrides the library's algorithm rules.
    """
    spec = _library_spec(library, system, software_library)
    if spec is None:
        return None
    return plan_call(spec, "all-reduce", bucket_bytes, fabric, algorithm)


def _library_spec(library: Library, system: SystemSpec, software_library: str | None) -> CollectiveLibrarySpec | None:
    """The collective library ``software_library`` names, or else the system's own (None: none)."""
    if software_library is not None:
        return library.collective_library(software_library)
    return library.system_collective_library(system)


def comm_planner(
    library: Library,
    system: SystemSpec,
    fabric: Fabric,
    algorithm: Algorithm | None,
    software_library: str | None,
    source: str,
) -> Callable[[CommOp], CommPlan | None]:
    """How the collective library (as for :func:`gradient_call`) plans each of a trace's own collectives."""
    spec = _library_spec(library, system, software_library)
    return lambda comm: comm_plan(spec, fabric, comm, algorithm, source)


def comm_plan(
    library: CollectiveLibrarySpec | None,
    fabric: Fabric,
    comm: CommOp,
    algorithm: Algorithm | None = None,
    source: str = "",
) -> CommPlan | None:
    """How ``library`` runs one call of a trace's own collective, as :func:`call_time_s` runs it.

    The library's protocol and algorithm for that collective and size on ``fabric`` (the links as they
    are, before any protocol), its chunk and launch latency; ``algorithm`` (an explicit
    ``--collective``) overrides its rules. None where there is nothing to plan: no library (the bare
    links, as the step's other collectives), a send, a receive or a barrier, or an empty buffer.
    """
    if library is None or comm.kind.value not in COLLECTIVES or comm.bytes == 0:
        return None
    plan = plan_call(library, comm.kind.value, comm.bytes, fabric, algorithm)
    chosen = resolve_algorithm(plan.algorithm, plan.fabric, source)
    return CommPlan(plan.fabric, chosen, plan.chunk_bytes, plan.fixed_s)


def _named_library(library: Library, system: SystemSpec, software: str) -> CollectiveLibrarySpec:
    """The collective library ``software`` names on ``system``.

    A collective library itself runs on any system (``--software gcl`` on a DGX: what if its links ran
    Graphcore's library); a software stack gives its own library, and a stack of a chip family must
    run on the system's chip, as ``archsim run`` requires
    (:meth:`~archsim.spec.library.Library.software_for`).
    """
    entry = library.find(["collective-library", "software"], software)
    if entry.kind == "software" and entry.data.get("family") is not None:
        library.software_for(library.chip(system.chip), software)
    return library.collective_library(software)


def _check(op: str, sizes: Sequence[int]) -> None:
    if op not in COLLECTIVES:
        raise UsageError("", "OP", f"{op!r} is not one of {', '.join(COLLECTIVES)}")
    if not sizes:
        raise UsageError("", "SIZE", "give at least one size")
    if len(sizes) > MAX_SIZES:
        raise LimitError("", "SIZE", f"{len(sizes)} sizes, at most {MAX_SIZES}")
    for size in sizes:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise UsageError("", "SIZE", f"must be a positive number of bytes, got {size!r}")
        if size > MAX_COLLECTIVE_BYTES:
            raise LimitError("", "SIZE", f"{size} bytes is more than the {MAX_COLLECTIVE_BYTES} (1 TiB) allowed")


def collective(
    system: str,
    op: str,
    sizes: Sequence[int],
    software: str | None = None,
    nodes: int = 1,
    algorithm: str | None = None,
    library: Library | None = None,
    search_path: Sequence[str] = (),
) -> list[CollectiveResult]:
    """Time one ``op`` call per size on ``system`` (``nodes`` copies), as nccl-tests reports it.

    ``op``: all-reduce, all-gather, reduce-scatter, broadcast or all-to-all; ``sizes`` in bytes;
    ``software``: a collective library (or a software stack naming one) instead of the system's;
    ``algorithm``: ring, tree, hierarchical or torus instead of the library's choice.
    """
    _check(op, sizes)
    check_nodes(nodes)
    library = library or Library(search_path)
    entry = library.find(["system"], system)
    source = entry.source
    spec: SystemSpec = library.system(system)
    lib = _named_library(library, spec, software) if software else library.system_collective_library(spec)
    fabric = fabric_for(spec, library, nodes, source)
    if fabric.num_chips < 2:
        raise UsageError(system, "SYSTEM", "has 1 chip; a collective needs at least 2")
    results = []
    for size in sizes:
        time_s, plan, chosen = call_time_s(fabric, lib, op, size, algorithm, source)
        algbw = size / time_s if time_s > 0 else 0.0
        results.append(
            CollectiveResult(
                system=spec.name,
                collective=op,
                bytes=size,
                chips=fabric.num_chips,
                nodes=nodes,
                library=lib.name if lib is not None else None,
                protocol=plan.protocol if plan is not None else None,
                algorithm=chosen.value,
                time_s=time_s,
                algbw_bytes_per_s=algbw,
                busbw_bytes_per_s=algbw * bus_factor(op, fabric.num_chips),
            )
        )
    return results
