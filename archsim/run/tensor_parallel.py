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

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from archsim.models.base import Bound, CostModel, OpCost, Unit
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Precision
from archsim.workloads.trace import CommGroup, Op

if TYPE_CHECKING:  # the multi-chip modules: a one-chip run never loads them
    from archsim.models.interconnect import Fabric
    from archsim.spec.collective_library import CollectiveLibrarySpec

TENSOR_PARALLEL_NOTE = "each chip runs a tensor-parallel shard: no one chip runs the whole model"
"""Why a tensor-parallel run has no one-chip reference (``scaling_note``)."""


def group_fabric(fabric: Fabric, tensor_parallel: int) -> Fabric:
    """The fabric of one tensor-parallel group: ``tensor_parallel`` chips of ``fabric``'s first tier."""
    first = fabric.tiers[0]
    tier = replace(first, size=tensor_parallel)
    ring = fabric.first_ring if tensor_parallel == first.size else ()
    return replace(fabric, nodes=1, num_chips=tensor_parallel, tiers=(tier,), first_ring=ring)


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
        """An in-stream collective holds the chip's stream (its matrix unit) for one call; else ``inner``'s."""
        comm = op.comm
        if comm is None or not comm.in_stream:
            return self.inner.cost(op)
        calls = self.expert_calls if comm.group is CommGroup.EXPERT_PARALLEL else self.calls
        assert calls is not None, f"{op.name}: a group to call on"
        seconds = calls.time_s(comm.kind.value, comm.bytes)
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
