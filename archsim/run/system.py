"""A step of a built trace on a system joined by links: data parallel, pipeline parallel, or both.

:func:`system_step` is what the runner's one replay seam
(:func:`archsim.run.replay.replay_on_target`) runs on a system with links: it builds the fabric
(:mod:`archsim.models.interconnect`), places pipelines and replicas on it
(:mod:`archsim.models.placement`), resolves how gradients are communicated (the all-reduce
algorithm, the collective library's protocol), and runs one step in the engine
(:mod:`archsim.engine.parallel`) through :mod:`archsim.run.data_parallel` or :mod:`archsim.run.pipeline`.

**The symmetry shortcut.** All data-parallel replicas run identical compute, and all members of a
tier are joined identically, so the engine simulates one representative chip per pipeline stage and,
per tier, one representative member (with every chip in it that takes part and every link it owns).
Each collective runs tier by tier (hierarchical), so the cost of a step grows with the number of
tiers and the chips of one member, not with the number of chips: a 1,024-chip step simulates the
representative's ops plus a few thousand chunk transfers. The links that are actually shared -- a
member's switch ports among its chips, a ring link among the pipelines' stages, activation sends
against gradient all-reduces -- are still SimPy resources with discrete transfers queueing on them.
"""

from __future__ import annotations

from collections.abc import Sequence

from archsim.collective_run import comm_planner, gradient_call
from archsim.engine.collectives import resolve_algorithm
from archsim.engine.parallel import CommOptions
from archsim.models.placement import place
from archsim.results.records import RunResult
from archsim.run.context import SystemContext, SystemOptions
from archsim.run.data_parallel import data_parallel
from archsim.run.observers import RunObserver
from archsim.run.pipeline import pipelined
from archsim.run.target import Target, fabric_for
from archsim.run.tensor_parallel import GroupCalls, group_fabric
from archsim.spec.efficiency import Efficiency
from archsim.spec.library import Library
from archsim.spec.system import SystemSpec
from archsim.stack import run_stack
from archsim.workloads.rebuild import Rebuilder
from archsim.workloads.trace import Trace


def system_step(
    target: Target,
    system: SystemSpec,
    trace: Trace,
    microbatches: int | None,
    library: Library,
    options: SystemOptions,
    observers: Sequence[RunObserver],
    family_efficiency: Efficiency | None,
    rebuild: Rebuilder | None,
) -> RunResult:
    """A step of a built trace (one chip's, one microbatch's when pipelined) on ``system``, ``target``'s.

    ``microbatches`` None runs data parallel, else a pipelined or accumulated step. ``observers``
    watch the engine's links and are told the step's chip lanes (:mod:`archsim.run.observers`); the
    other arguments are :func:`~archsim.run.replay.replay_on_target`'s, which finishes the result.
    """
    source, chip = target.source, target.chip
    fabric = fabric_for(system, library, options.nodes, source)
    asked = resolve_algorithm(options.collective, fabric, source) if options.collective not in (None, "auto") else None
    named = options.software.collective_library if options.software is not None else None
    call = gradient_call(library, system, fabric, options.bucket_bytes, asked, named)
    plans = comm_planner(library, system, fabric, asked, named, source)
    if call is not None:  # the links as the library's protocol for a gradient bucket sees them
        fabric = call.fabric
    tp = options.trace.tensor_parallel
    placement = place(fabric, options.pipeline_stages, source, tp)
    stack, efficiency = run_stack(library, chip, trace, options.software, family_efficiency)
    algorithm = resolve_algorithm(asked or (call.algorithm if call is not None else None), fabric, source)
    comm = CommOptions(
        algorithm,
        options.bucket_bytes,
        options.overlap and stack.dispatch.mechanism.overlaps_collectives,
        call.chunk_bytes if call is not None else options.chunk_bytes,
        call.fixed_s if call is not None else 0.0,
    )
    calls = expert_calls = norm_calls = None
    ep, bn = options.trace.expert_parallel, options.trace.bn_group
    if tp > 1 or ep > 1 or bn > 1:  # the groups' calls see the links as they are, before any protocol
        spec = library.collective_library(named) if named is not None else library.system_collective_library(system)
        bare = fabric_for(system, library, options.nodes, source)
        if tp > 1:  # T consecutive chips
            calls = GroupCalls(group_fabric(bare, tp), spec, source)
        if ep > 1:  # E replicas' chips of one stage and rank, T x P apart
            expert_calls = GroupCalls(group_fabric(bare, ep, tp * options.pipeline_stages), spec, source)
        if bn > 1:  # G consecutive replicas (one stage, no tensor parallelism: a batch-norm network)
            norm_calls = GroupCalls(group_fabric(bare, bn), spec, source)
    context = SystemContext(
        system,
        source,
        fabric,
        placement,
        chip,
        efficiency,
        comm,
        options,
        tuple(observers),
        trace.mode,
        rebuild,
        stack,
        plans,
        calls,
        expert_calls,
        norm_calls,
    )
    return data_parallel(context, trace) if microbatches is None else pipelined(context, trace, microbatches)
