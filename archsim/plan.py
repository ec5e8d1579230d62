"""``archsim plan``: the parallel layouts of a training step that fit a system, fastest first.

What Calculon's optimizer does for Megatron-style training, with the simulator as the judge. For a
decoder language model, a system (with ``nodes`` copies) and a global batch, :func:`layouts`
enumerates every layout that tiles the chips and that a run accepts (the run's own check,
:func:`archsim.models.placement.place`, so no simulation is spent on a layout it would refuse):
tensor parallel ``T`` (dividing the first tier, so a group never leaves its NVLink or IPU-Link
domain, and splitting the model's heads), pipeline stages ``P`` (at most the model's
layers), data parallel ``D = chips / (T P)`` dividing the global batch, a micro-batch size ``b``
dividing the replica's batch (``m = B / (D b)`` microbatches), ZeRO stage, recomputation, and
sequence parallelism where ``T > 1``; for a mixture of experts also expert parallel ``E`` (dividing
both ``D`` and the expert count: ``E`` replicas share the experts, each holding ``1/E`` of them), without
ZeRO (not modelled with expert parallelism).

Each layout then goes through two cheap bounds before any simulation:

* **memory**: the model state a chip cannot avoid holding -- weights, gradients, fp32 master weights
  and optimizer moments, at the bytes per parameter archsim's memory model uses
  (:mod:`archsim.workloads.training`), divided by ``T P`` (the experts' also by ``E``) and, for the
  parts ZeRO shards, by ``D`` --
  is a lower bound of what the chip needs (activations, buffers and uneven stages only add to it), so a
  layout whose bound exceeds the chip's memory cannot fit and is dropped;
* **time**: no step is shorter than its matrix FLOPs at every chip's peak, stretched by the pipeline's
  fill and drain, ``F / (N peak) * (m + P - 1) / m`` (compute never beats the peak, and a pipeline of
  ``P`` stages runs ``m + P - 1`` microbatch slots); ``F`` is the model's FLOPs
  (:func:`~archsim.workloads.decoder.matrix_flops`) plus what recomputation runs again.

The survivors are simulated in order of that time bound (each through :func:`archsim.simulate`, whose
refusals also prune: a layout the simulator refuses does not fit) until the ``top`` fastest simulated
are all faster than the next layout's bound -- then no unsimulated layout can beat them, and the list
is exact -- or ``max_runs`` simulations have run, which the report says (a count, not a time limit,
so the same question always gets the same answer). Layouts whose pipeline runs more than
``max_blocks`` blocks are skipped (and counted): their simulation alone would take longer than a plan
should.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from archsim.errors import CapacityError, UsageError
from archsim.memory_fit import capacity_bytes
from archsim.models.placement import place
from archsim.results.records import RunResult
from archsim.run.request import choice
from archsim.run.target import fabric_for, resolve
from archsim.spec.common import BITS_PER_BYTE, Precision
from archsim.spec.library import Library
from archsim.spec.model import DecoderSection
from archsim.workloads.decoder import ffn_matrix_parameters, layer_matrix_parameters, matrix_flops
from archsim.workloads.quantize import check_mode
from archsim.workloads.trace import Mode
from archsim.workloads.training import MASTER_BYTES, OPTIMIZER_COST

RECOMPUTE = ("none", "selective", "full")
"""Recomputation choices, in the order a tie is broken (least recomputed first)."""
ZERO_STAGES = (0, 1, 2, 3)
MICRO_BATCHES = (1, 2, 4, 8)
"""Micro-batch sizes tried (sequences per microbatch): Megatron-LM's large runs use 1 to 8."""
DEFAULT_MAX_RUNS = 12
"""Simulations a plan runs at most (the enumeration and bounds are instant)."""
DEFAULT_MAX_BLOCKS = 4096
"""Pipeline blocks (stages x microbatches, forward and backward) of the longest layout a plan simulates:
a simulation's cost grows with them (a 1,024-GPU GPT-3 175B step of 8 stages x 96 microbatches, 1,536
blocks, takes about 3 s on two cores; 64 x 768, 98,304 blocks, about 25 s). Longer ones are counted
and skipped, so a plan of that size stays under a minute."""


@dataclass(frozen=True)
class Layout:
    """One way to spread a training step: the arguments :func:`archsim.simulate` takes for it."""

    tensor_parallel: int
    pipeline_stages: int
    data_parallel: int
    micro_batch: int
    """Sequences per microbatch."""
    microbatches: int
    """Microbatches per step and replica."""
    zero: int
    recompute: str
    sequence_parallel: bool
    expert_parallel: int = 1
    """Replicas that share a mixture of experts' experts (1: each holds them all)."""

    def arguments(self) -> dict[str, Any]:
        """Keyword arguments of :func:`archsim.simulate` (batch: the replica's)."""
        accumulates = self.pipeline_stages > 1 or self.microbatches > 1
        return {
            "batch": self.micro_batch * self.microbatches,
            "tensor_parallel": self.tensor_parallel,
            "sequence_parallel": self.sequence_parallel,
            "pipeline_stages": self.pipeline_stages,
            "microbatches": self.microbatches if accumulates else None,
            "zero": self.zero,
            "recompute": self.recompute,
            "expert_parallel": self.expert_parallel,
        }

    @property
    def blocks(self) -> int:
        """Forward and backward blocks of one pipeline's step (what a simulation's cost grows with)."""
        return 2 * self.pipeline_stages * self.microbatches

    def label(self) -> str:
        """``TP 8 (SP) x PP 8 x DP 16, b 1 x m 96, ZeRO 1, recompute full`` (``x DP 16 (EP 4)`` with experts shared)."""
        sp = " (SP)" if self.sequence_parallel else ""
        ep = f" (EP {self.expert_parallel})" if self.expert_parallel > 1 else ""
        return (
            f"TP {self.tensor_parallel}{sp} x PP {self.pipeline_stages} x DP {self.data_parallel}{ep}, "
            f"b {self.micro_batch} x m {self.microbatches}, ZeRO {self.zero}, recompute {self.recompute}"
        )


@dataclass(frozen=True)
class Planned:
    """A layout the simulator ran: its step time, throughput, MFU and memory per chip."""

    layout: Layout
    result: RunResult


@dataclass
class PlanReport:
    """What :func:`plan` found and how much of the space it had to simulate."""

    target: str
    workload: str
    chips: int
    global_batch: int
    best: list[Planned]
    """The fastest layouts that fit, fastest first (at most ``top``)."""
    enumerated: int = 0
    """Layouts that tile the system and split the global batch."""
    over_memory_bound: int = 0
    """Dropped before simulation: their model state alone exceeds the chip's memory."""
    refused: int = 0
    """Simulated and refused by the simulator (memory, layout)."""
    too_long: int = 0
    """Skipped: more pipeline blocks than ``max_blocks`` (the list is then not exhaustive)."""
    simulated: int = 0
    exact: bool = True
    """False when ``max_runs`` was reached before the bound proved no unsimulated layout is faster."""
    refusals: list[str] = field(default_factory=list)
    """The first few refusals, for a plan that finds nothing."""

    def to_dict(self) -> dict[str, Any]:
        """The report as plain JSON values."""
        return {
            "target": self.target,
            "workload": self.workload,
            "chips": self.chips,
            "global_batch": self.global_batch,
            "enumerated": self.enumerated,
            "over_memory_bound": self.over_memory_bound,
            "simulated": self.simulated,
            "refused": self.refused,
            "too_long": self.too_long,
            "exact": self.exact,
            "layouts": [
                {**vars(p.layout), "step_time_s": p.result.step_time_s, "result": p.result.to_dict()} for p in self.best
            ],
        }


def divisors(n: int) -> list[int]:
    """The positive divisors of ``n``, ascending."""
    return [d for d in range(1, n + 1) if n % d == 0]


def layouts(
    chips: int,
    first_tier: int,
    layers: int,
    global_batch: int,
    experts: int = 1,
    accepts: Callable[[int, int], bool] | None = None,
) -> Iterator[Layout]:
    """Every layout of ``chips`` that tiles them and splits ``global_batch`` (see the module docstring).

    ``experts``: the model's experts per mixture (1: a dense model, no expert parallelism);
    ``accepts(tp, pp)``: whether a run takes ``tp``-chip tensor-parallel groups in ``pp`` stages on the
    system and model (:func:`plan` asks the run's own check); a layout it refuses is not one.
    """
    for tp in divisors(first_tier):
        for pp in divisors(chips // tp) if chips % tp == 0 else []:
            dp = chips // (tp * pp)
            if pp > layers or global_batch % dp or (accepts is not None and not accepts(tp, pp)):
                continue
            replica = global_batch // dp
            shared = [ep for ep in divisors(dp) if experts % ep == 0] if experts > 1 else [1]
            for b, ep in itertools.product(MICRO_BATCHES, shared):
                if replica % b:
                    continue
                for zero, recompute, sp in itertools.product(ZERO_STAGES, RECOMPUTE, (False, True)):
                    if sp and tp == 1:
                        continue
                    if zero and (dp == 1 or pp > 1 or replica > b or ep > 1):
                        continue  # ZeRO shards over data-parallel replicas, without pipeline, accumulation or EP
                    yield Layout(tp, pp, dp, b, replica // b, zero, recompute, sp, ep)


def state_bytes_per_parameter(precision: Precision, optimizer_state: int) -> tuple[float, float, int]:
    """Bytes per parameter of weights, gradients and update-only state (fp32 master + moments).

    Weights and gradients are in the run's precision: half a byte each at int4.
    """
    element = precision.bits / BITS_PER_BYTE
    master = MASTER_BYTES if element < MASTER_BYTES else 0
    return element, element, master + optimizer_state


def memory_bound(
    layout: Layout, parameters: int, per_parameter: tuple[float, float, int], expert_parameters: int = 0
) -> float:
    """Bytes of model state a chip of ``layout`` holds at least.

    ZeRO 1 shards the update-only state over the data-parallel group, 2 also gradients, 3 also weights;
    ``expert_parameters`` (of ``parameters``) are also split over the expert-parallel group.
    """
    weights, gradients, update = per_parameter
    dp = layout.data_parallel
    held = (
        weights / (dp if layout.zero >= 3 else 1)
        + gradients / (dp if layout.zero >= 2 else 1)
        + update / (dp if layout.zero >= 1 else 1)
    )
    shard = parameters - expert_parameters + expert_parameters / layout.expert_parallel
    return shard * held / (layout.tensor_parallel * layout.pipeline_stages)


def expert_parameters(cfg: DecoderSection) -> int:
    """Weights of every layer's experts (0 for a dense model): what expert parallelism splits."""
    return 0 if cfg.moe is None else cfg.layers * cfg.moe.experts * ffn_matrix_parameters(cfg)


def recompute_flops(cfg: DecoderSection, recompute: str, batch: int, seq_len: int) -> int:
    """Matrix FLOPs a step runs again in its backward pass.

    None for ``none``; the attention core's products for ``selective`` (Korthikanti et al. 2022); every
    layer's forward products for ``full``.
    """
    tokens = batch * seq_len
    core = 4 * tokens * cfg.layers * seq_len * cfg.heads * cfg.head_size
    if recompute == "none":
        return 0
    if recompute == "selective":
        return core
    return core + 2 * tokens * cfg.layers * layer_matrix_parameters(cfg, active=True)


def time_bound(layout: Layout, step_flops: int, chips: int, peak: float) -> float:
    """Seconds no step of ``layout`` can beat: its FLOPs at peak, through the pipeline's fill."""
    m, p = layout.microbatches, layout.pipeline_stages
    return step_flops / (chips * peak) * (m + p - 1) / m


def plan(
    target: str,
    workload: str,
    global_batch: int,
    library: Library,
    *,
    nodes: int | None = None,
    precision: str | Precision | None = None,
    seq_len: int | None = None,
    top: int = 5,
    max_runs: int = DEFAULT_MAX_RUNS,
    max_blocks: int = DEFAULT_MAX_BLOCKS,
    progress: Callable[[int, int, Layout], None] | None = None,
    simulate: Callable[..., RunResult] | None = None,
) -> PlanReport:
    """The ``top`` fastest training layouts of ``workload`` on ``target`` that fit (module docstring)."""
    if simulate is None:
        from archsim.api import simulate as run_one

        simulate = run_one
    resolved = resolve(target, library)
    system = resolved.linked
    if system is None:
        raise UsageError(target, "TARGET", "plan needs a multi-chip system (a chip has one layout)")
    model = library.model(workload)
    decoder = model.decoder
    if decoder is None:
        raise UsageError(workload, "WORKLOAD", "plan lays out decoder language models (architecture: decoder)")
    chip = resolved.chip
    run_precision = chip.run_precision(None if precision is None else choice(Precision, precision, "--precision"))
    check_mode(Mode.TRAIN, run_precision, workload)  # a plan lays out training steps
    if run_precision not in chip.peak:
        supported = ", ".join(p.value for p in chip.precisions)
        raise UsageError(chip.name, "--precision", f"{run_precision.value} is not supported (supported: {supported})")
    fabric = fabric_for(system, library, nodes or 1, resolved.source)
    first_tier = fabric.tiers[0].size if fabric.tiers else 1
    chips = fabric.num_chips
    seq = seq_len or decoder.default_seq_len
    step_flops = matrix_flops(decoder, Mode.TRAIN, global_batch, seq, seq)
    per_parameter = state_bytes_per_parameter(run_precision, OPTIMIZER_COST[model.optimizer][0])
    parameters = model_parameters(library, workload, run_precision, seq)
    capacity = capacity_bytes(chip)
    report = PlanReport(resolved.name, model.name, chips, global_batch, [])
    candidates: list[tuple[float, int, Layout]] = []
    order = {name: i for i, name in enumerate(RECOMPUTE)}
    experts = 1 if decoder.moe is None else decoder.moe.experts
    accepted: dict[tuple[int, int], bool] = {}

    def accepts(tp: int, pp: int) -> bool:
        """Whether a run would place ``tp`` x ``pp`` (the run's own check, so no run is spent on a refusal)."""
        if (tp, pp) not in accepted:
            try:
                place(fabric, pp, resolved.source, tp, (workload, decoder))
                accepted[tp, pp] = True
            except UsageError:
                accepted[tp, pp] = False
        return accepted[tp, pp]

    for layout in layouts(chips, first_tier, decoder.layers, global_batch, experts, accepts):
        report.enumerated += 1
        if memory_bound(layout, parameters, per_parameter, expert_parameters(decoder)) > capacity:
            report.over_memory_bound += 1
            continue
        flops = step_flops + recompute_flops(decoder, layout.recompute, global_batch, seq)
        bound = time_bound(layout, flops, chips, chip.peak[run_precision])
        candidates.append((bound, order[layout.recompute], layout))
    candidates.sort(
        key=lambda c: (c[0], c[1], c[2].zero, c[2].tensor_parallel, c[2].pipeline_stages, c[2].expert_parallel)
    )
    found: list[Planned] = []
    for index, (bound, _, layout) in enumerate(candidates):
        if len(found) >= top and found[top - 1].result.step_time_s <= bound:
            break  # no layout left can beat the top ones
        if report.simulated >= max_runs:
            report.exact = False
            break
        if layout.blocks > max_blocks:
            report.too_long += 1  # its pipeline alone is more simulation than the plan spends on one layout
            report.exact = False
            continue
        if progress is not None:
            progress(index, len(candidates), layout)
        report.simulated += 1
        try:
            result = simulate(
                target,
                workload,
                mode="train",
                precision=run_precision,
                seq_len=seq_len,
                library=library,
                nodes=nodes,
                **layout.arguments(),
            )
        except (CapacityError, UsageError) as refusal:
            report.refused += 1
            if len(report.refusals) < 3:
                report.refusals.append(f"{layout.label()}: {refusal}")
            continue
        found.append(Planned(layout, result))
        found.sort(key=lambda p: (p.result.step_time_s, order[p.layout.recompute], p.layout.zero))
    report.best = found[:top]
    return report


def model_parameters(library: Library, workload: str, precision: Precision, seq_len: int) -> int:
    """Trainable parameters of ``workload`` (from a one-sequence inference trace: cheap, exact)."""
    from archsim.workloads import build_trace

    return build_trace(workload, library, Mode.INFER, 1, precision, seq_len).parameters
