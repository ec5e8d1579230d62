"""Tensor-parallel collectives as ops of the chip's stream, priced by the system's collective library.

Megatron-LM runs its tensor-parallel all-reduces (reduce-scatters and all-gathers with sequence
parallelism) on the compute stream, between the products that need them: nothing overlaps them.
So the engine runs such an op (:attr:`~archsim.workloads.trace.CommOp.in_stream`) as it runs a compute
op, in order on the chip's stream, for the time one call of that collective takes on the chips of
one tensor-parallel group: ``T`` consecutive chips of the system's first tier (NVLink and NVSwitch
inside a DGX), with the collective library's launch latency, protocol and algorithm -- exactly what
``archsim collective`` prints for that call on those chips (:func:`archsim.collective_run.call_time_s`).
One call per (collective, size) is simulated and reused: a step's calls repeat a few sizes.

The group's links are its own: data-parallel all-reduces that also cross the first tier (when a
replica shares a node) are not made to contend with these calls, a simplification that matters only
when both are busy at once (Megatron runs data-parallel all-reduces after the backward pass).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from archsim.models.base import Bound, CostModel, OpCost, Unit
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Precision
from archsim.workloads.trace import CommGroup, Op

if TYPE_CHECKING:  # the multi-chip modules: a one-chip run never loads them
    from archsim.models.interconnect import Fabric, Tier
    from archsim.spec.collective_library import CollectiveLibrarySpec

TENSOR_PARALLEL_NOTE = "each chip runs a tensor-parallel shard: no one chip runs the whole model"
"""Why a tensor-parallel run has no one-chip reference (``scaling_note``)."""


def group_fabric(fabric: Fabric, chips: int, stride: int = 1) -> Fabric:
    """The fabric of a group of ``chips`` chips of ``fabric``, ``stride`` chips apart.

    A tensor-parallel group is ``T`` consecutive chips (``stride`` 1): a slice of the first tier. An
    expert-parallel group (:mod:`archsim.run.expert_parallel`) is ``E`` replicas' chips of one stage and
    tensor-parallel rank, ``T x P`` apart. At each tier of the system the group keeps as many members
    as hold its chips, each with its chips' share of the member's ports (``lanes x chips held /
    chips_per_member``, at least one). ``stride x chips`` must divide the fabric's chips (the placement
    checks that).
    """
    tiers: list[Tier] = []
    held = 1  # the group's chips in one member of the current tier
    for index, tier in enumerate(fabric.tiers):
        span = fabric.chips_below(index) * tier.size  # chips under one member of the next tier
        above = min(chips, max(1, span // stride))
        if above > held:
            lanes = max(1, tier.lanes * held // tier.chips_per_member)
            tiers.append(replace(tier, size=above // held, chips_per_member=held, lanes=lanes))
        held = above
    ring = fabric.first_ring if stride == 1 and fabric.tiers and chips == fabric.tiers[0].size else ()
    return replace(fabric, nodes=scale_out_nodes(tiers), num_chips=chips, tiers=tuple(tiers), first_ring=ring)


def scale_out_nodes(tiers: Sequence[Tier]) -> int:
    """How many nodes a group's tiers span (the size of its scale-out tier; 1 without one)."""
    return next((tier.size for tier in tiers if tier.name == "scale-out"), 1)


@dataclass
class GroupCalls:
    """Seconds of one collective call on a tensor-parallel group, per (collective, bytes), computed once."""

    fabric: Fabric
    library: CollectiveLibrarySpec | None
    source: str
    seconds: dict[tuple[str, int], float] = field(default_factory=dict)

    def time_s(self, collective: str, nbytes: int) -> float:
        """One call's seconds (launch latency included)."""
        key = (collective, nbytes)
        if key not in self.seconds:
            from archsim.collective_run import call_time_s

            self.seconds[key] = call_time_s(self.fabric, self.library, collective, nbytes, None, self.source)[0]
        return self.seconds[key]


@dataclass
class StreamCommModel:
    """A chip's cost model that also prices in-stream collectives (the rest it hands to ``inner``)."""

    inner: CostModel
    calls: GroupCalls | None
    """The tensor-parallel group's calls (None: no tensor parallelism)."""
    expert_calls: GroupCalls | None = None
    """The expert-parallel group's calls (None: no expert parallelism)."""
    free: bool = False
    """Price every in-stream collective at nothing (:func:`free_stream_calls`)."""
    norm_calls: GroupCalls | None = field(default=None, kw_only=True)
    """The batch-norm group's calls (None: no synchronized batch norm)."""
    chip: ChipSpec = field(init=False)
    """The inner model's chip."""
    precision: Precision = field(init=False)
    """The inner model's precision."""
    separate_units: bool = field(init=False)
    """As the inner model's."""

    def __post_init__(self) -> None:
        self.chip, self.precision, self.separate_units = (
            self.inner.chip,
            self.inner.precision,
            self.inner.separate_units,
        )

    def cost(self, op: Op) -> OpCost:
        """An in-stream collective holds the chip's stream for one call (none when ``free``); else ``inner``'s."""
        comm = op.comm
        if comm is None or not comm.in_stream:
            return self.inner.cost(op)
        groups = {CommGroup.EXPERT_PARALLEL: self.expert_calls, CommGroup.BATCH_NORM: self.norm_calls}
        calls = groups.get(comm.group, self.calls)
        assert calls is not None, f"{op.name}: a group to call on"
        seconds = 0.0 if self.free else calls.time_s(comm.kind.value, comm.bytes)
        return OpCost(
            time_s=seconds,
            compute_s=0.0,
            memory_s=0.0,
            overhead_s=0.0,
            dram_bytes=0,
            roofline_s=0.0,
            bound=Bound.COMMUNICATION,
            unit=Unit.MATRIX,
            communication_s=seconds,
        )


def free_stream_calls(model: CostModel) -> CostModel:
    """``model`` with its in-stream collectives costing nothing (one without any, as it is).

    The reference a step's ``exposed_comm_s`` is measured against: the same step, its tensor- and
    expert-parallel calls free.
    """
    return replace(model, free=True) if isinstance(model, StreamCommModel) else model


def stream_spans(timed: Iterable[tuple[Op, float, float]]) -> list[tuple[float, float]]:
    """The (start, end) of each in-stream collective among ``(op, start_s, end_s)``."""
    return [(start, end) for op, start, end in timed if op.comm is not None and op.comm.in_stream]
