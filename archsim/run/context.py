"""What a step on a multi-chip system shares: its options, fabric, placement, chip model and comm options.

:class:`SystemContext` is built once per replay by :func:`archsim.run.system.system_step` and read
by the data-parallel (:mod:`archsim.run.data_parallel`) and pipelined (:mod:`archsim.run.pipeline`)
steps and by the result assembly (:mod:`archsim.run.system_result`). :class:`SystemOptions` is every
run's: on a system of one chip only its streaming memory and stack apply (the runner refuses a layout
that spreads a step over one chip).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from archsim.engine.options import DEFAULT_CHUNK_BYTES, Schedule
from archsim.models import cost_model_for
from archsim.models.base import CostModel, framework_overhead_s
from archsim.run.request import Layout
from archsim.spec.chip import ChipSpec
from archsim.spec.common import StreamingMemory
from archsim.spec.efficiency import Efficiency
from archsim.spec.registry import FamilyEfficiency
from archsim.spec.software import SoftwareSpec
from archsim.workloads.memory import resident_bytes
from archsim.workloads.options import TraceOptions
from archsim.workloads.trace import CommOp, Mode, Trace
from archsim.workloads.transforms import DEFAULT_BUCKET_BYTES

if TYPE_CHECKING:  # the multi-chip engine's types: a one-chip run never loads those modules
    from archsim.engine.network import LinkObserver
    from archsim.engine.parallel import CommOptions, CommPlan
    from archsim.engine.records import LinkStatistics
    from archsim.models.interconnect import Fabric
    from archsim.models.placement import Placement
    from archsim.run.observers import RunObserver
    from archsim.run.tensor_parallel import GroupCalls
    from archsim.spec.system import SystemSpec
    from archsim.workloads.rebuild import Rebuilder


@dataclass(frozen=True)
class SystemOptions:
    """How a built trace is spread over a system: a request's layout with its defaults filled in."""

    nodes: int = 1
    pipeline_stages: int = 1
    microbatches: int | None = None
    """Microbatches per step (None: 4 per stage when pipelined, else 1)."""
    schedule: Schedule = Schedule.ONE_F_ONE_B
    collective: str | None = None
    """All-reduce algorithm (None or ``auto``: the system's default)."""
    bucket_bytes: int = DEFAULT_BUCKET_BYTES
    overlap: bool = True
    chunk_bytes: float = DEFAULT_CHUNK_BYTES
    trace: TraceOptions = field(default_factory=TraceOptions)
    """How each chip's trace is built (fusion, recomputation, the software's rewrites)."""
    streaming: StreamingMemory = StreamingMemory.NONE
    """What an IPU may keep in streaming memory (:mod:`archsim.memory_fit`)."""
    software: SoftwareSpec | None = None
    """The stack that runs each chip's graph (None: the chip's default)."""
    interleave: int = 1
    """Model chunks per pipeline stage (interleaved 1F1B, :mod:`archsim.engine.schedules`)."""
    zero: int = 0
    """ZeRO stage of a data-parallel training step (:mod:`archsim.workloads.zero`)."""

    @classmethod
    def of(
        cls, layout: Layout, trace: TraceOptions, streaming: StreamingMemory, software: SoftwareSpec | None
    ) -> SystemOptions:
        """A request's layout with the trace options, streaming memory and stack of its run."""
        return cls(
            nodes=layout.nodes or 1,
            pipeline_stages=layout.pipeline_stages,
            microbatches=layout.microbatches,
            schedule=layout.schedule,
            collective=layout.collective,
            bucket_bytes=layout.bucket_bytes,
            overlap=layout.overlap,
            trace=trace,
            streaming=streaming,
            software=software,
            interleave=layout.interleave,
            zero=layout.zero,
        )


@dataclass
class SystemContext:
    """One replay on a system: where its chips are, how they communicate, and the chip's model."""

    system: SystemSpec
    source: str
    fabric: Fabric
    placement: Placement
    chip: ChipSpec
    efficiency: Efficiency
    comm: CommOptions
    options: SystemOptions
    watchers: tuple[RunObserver, ...]
    """The run's observers, attached by its caller (:mod:`archsim.run.observers`)."""
    mode: Mode
    rebuild: Rebuilder | None
    software: SoftwareSpec
    plan_comm: Callable[[CommOp], CommPlan | None]
    """How the collective library runs one of the trace's own collectives (a Chakra ET's)."""
    group_calls: GroupCalls | None = None
    """How long each tensor-parallel collective takes on its group (None: no tensor parallelism)."""
    expert_calls: GroupCalls | None = None
    """How long each expert-parallel all-to-all takes on its group (None: no expert parallelism)."""
    norm_calls: GroupCalls | None = None
    """How long each batch-norm statistics all-reduce takes on its group (None: no synchronized batch norm)."""

    @cached_property
    def resolved(self) -> FamilyEfficiency:
        """The efficiency values every family has, each set (a one-line SpecError names one that is not)."""
        return FamilyEfficiency.resolve(self.efficiency, self.chip.name)

    @property
    def issue_s(self) -> float:
        """Host issue cost per op (seconds)."""
        return self.resolved.host_overhead

    @property
    def step_overhead_s(self) -> float:
        """The training loop's per-step cost (an inference loop runs the forward ops only)."""
        return self.resolved.step_overhead if self.mode is Mode.TRAIN else 0.0

    def observers(self, statistics: LinkStatistics) -> list[LinkObserver]:
        """What watches a step's links: ``statistics`` (the result's), and the run's observers."""
        return [statistics, *self.watchers]

    def model(self, trace: Trace, needed: int, share: float = 1.0) -> CostModel:
        """The chip's model for ops of ``trace`` on a chip that needs ``needed`` bytes.

        ``share`` is the chip's share of the parameters (a pipeline stage's): that share of the state
        only the update touches is left out of the footprint the ops work with (see
        :func:`~archsim.workloads.memory.resident_bytes`).
        """
        framework_s = framework_overhead_s(self.efficiency)
        footprint = resident_bytes(trace, needed, share)
        model = cost_model_for(self.chip, self.efficiency, trace.precision, footprint, framework_s)
        if self.group_calls is None and self.expert_calls is None and self.norm_calls is None:
            return model
        from archsim.run.tensor_parallel import StreamCommModel  # systems with in-stream groups only

        return StreamCommModel(model, self.group_calls, self.expert_calls, norm_calls=self.norm_calls)
