"""``archsim compare A B WORKLOAD``: the speedup of B over A, attributed to its factors.

Raw throughput mixes chip count, transistor budget, process node, memory, architecture and software.
:func:`compare` splits the speedup (B's throughput over A's, samples per second of the whole target)
into factors that multiply to it exactly, each from a counterfactual run where the simulator can make
one and from a stated rule where it cannot:

* ``chip_count``: B's chips over A's.
* ``scaling``: how well each target uses its chips, B's over A's: per-chip throughput in the target
  over the throughput of one chip running the same per-chip batch alone (a counterfactual run).
* ``transistor_budget``: B's transistors per chip over A's (where both are published).
* ``process_node``: A's node over B's: the stated rule that at the same transistor count a chip's
  clock, and so its peak, scales inversely with feature size (gate delay proportional to it).
* ``per_chip_peak``: B's peak FLOP/s per chip over A's, in place of the two factors above when either
  chip's transistor count or node is not published.
* ``memory_bandwidth``: what B's balance of main-memory bandwidth to peak gives A: A alone with its
  bandwidth set to ``peak_A x bandwidth_B / peak_B`` over A alone, both without the framework's
  overheads (counterfactual runs).
* ``software``: the framework's share: each chip's throughput alone over the same run without the
  framework's per-op, host and per-step overheads, B's ratio over A's (counterfactual runs). A faster
  chip loses a larger share of its time to the same overheads, and this factor says so.
* ``architecture``: what the others leave (the speedup over their product): peak per transistor beyond
  the node rule, and how much of its peak the chip's design reaches on this workload.
"""

from __future__ import annotations

import math

from archsim.api import simulate
from archsim.results.comparison import Comparison
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Precision
from archsim.spec.library import Library

SOFTWARE_OVERHEADS = ("framework_overhead", "host_overhead", "step_overhead")
"""Efficiency parameters that are the framework's, not the chip's (see :class:`Efficiency`)."""


def _alone(
    chip: ChipSpec, workload: str, mode: str, batch: int, precision: str, seq_len: int | None, lib: Library
) -> float:
    """Throughput of ``chip`` running ``workload`` alone at ``batch`` in ``lib``."""
    return simulate(chip.name, workload, mode, batch, precision, seq_len, lib).throughput


def _with_chip(library: Library, chip: ChipSpec, variant: ChipSpec) -> Library:
    """``library`` with ``chip``'s description replaced by ``variant``."""
    return library.with_specs({library.find(["chip"], chip.name): variant})


def _without_software(library: Library, chip: ChipSpec) -> Library:
    """``library`` with the framework overheads of ``chip`` (family and chip's own) set to zero."""
    zero = dict.fromkeys(SOFTWARE_OVERHEADS, 0.0)
    family_entry = library.find(["family"], chip.family)
    family = library.family(chip.family)
    free_family = family.model_copy(update={"efficiency": family.efficiency.model_copy(update=zero)})
    free_chip = chip.model_copy(update={"efficiency": chip.efficiency.model_copy(update=zero)})
    return library.with_specs({family_entry: free_family, library.find(["chip"], chip.name): free_chip})


def _with_balance(chip: ChipSpec, precision: Precision, other: ChipSpec, other_precision: Precision) -> ChipSpec:
    """``chip`` with the main-memory bandwidth per peak FLOP/s of ``other``."""
    bytes_per_flop = other.memory.main.bandwidth / other.peak_flops(other_precision)
    # a counterfactual part, not a stack count the technology allows: the per-stack ceiling is not checked
    bandwidth = chip.peak_flops(precision) * bytes_per_flop
    main = chip.memory.main.model_copy(update={"bandwidth": bandwidth, "stacks": None})
    return chip.model_copy(update={"memory": chip.memory.model_copy(update={"main": main})})


def _published(chip: ChipSpec) -> tuple[int, float] | None:
    """The chip's transistor count and process node (nm), or None when either is not published."""
    if chip.transistors is None or not isinstance(chip.process, float):
        return None
    return chip.transistors, chip.process


def compare(
    a: str,
    b: str,
    workload: str,
    mode: str = "infer",
    batch: int | None = None,
    precision: str | None = None,
    seq_len: int | None = None,
    library: Library | None = None,
    *,
    nodes_a: int | None = None,
    nodes_b: int | None = None,
) -> Comparison:
    """Run ``workload`` on targets ``a`` and ``b`` and attribute B's speedup over A (see the module docstring).

    ``batch`` is per chip, as in :func:`archsim.simulate`; ``nodes_a``/``nodes_b`` copy a system over its
    scale-out fabric. Pipelined runs are not compared: each target runs data-parallel.
    """
    library = library or Library()
    runs = [
        simulate(t, workload, mode, batch, precision, seq_len, library, nodes=n)
        for t, n in ((a, nodes_a), (b, nodes_b))
    ]
    chips = []
    for target in (a, b):
        entry = library.find(["chip", "system"], target)
        chips.append(library.chip(library.system(target).chip) if entry.kind == "system" else library.chip(target))
    precisions = [Precision(run.precision) for run in runs]
    alone = [
        _alone(chip, workload, mode, run.batch, run.precision, seq_len, library)
        for chip, run in zip(chips, runs, strict=True)
    ]
    factors: dict[str, float] = {"chip_count": runs[1].num_chips / runs[0].num_chips}
    per_chip = [run.throughput / run.num_chips for run in runs]
    factors["scaling"] = (per_chip[1] / alone[1]) / (per_chip[0] / alone[0])
    peaks = [chip.peak_flops(p) for chip, p in zip(chips, precisions, strict=True)]
    published = [_published(chip) for chip in chips]
    notes = []
    if published[0] is not None and published[1] is not None:
        factors["transistor_budget"] = published[1][0] / published[0][0]
        factors["process_node"] = published[0][1] / published[1][1]
    else:
        missing = [
            f"{figure} of {chip.name}"
            for chip in chips
            for figure, value in (("transistors", chip.transistors), ("process", chip.process))
            if value is None or isinstance(value, str)
        ]
        notes.append(f"per_chip_peak stands for transistor_budget x process_node: no {', '.join(missing)}")
        factors["per_chip_peak"] = peaks[1] / peaks[0]
    free = [
        _alone(chip, workload, mode, run.batch, run.precision, seq_len, _without_software(library, chip))
        for chip, run in zip(chips, runs, strict=True)
    ]
    a_chip, a_run = chips[0], runs[0]
    balanced = _with_balance(a_chip, precisions[0], chips[1], precisions[1])
    free_balanced = _without_software(_with_chip(library, a_chip, balanced), balanced)
    balanced_s = _alone(a_chip, workload, mode, a_run.batch, a_run.precision, seq_len, free_balanced)
    factors["memory_bandwidth"] = balanced_s / free[0]
    factors["software"] = (alone[1] / free[1]) / (alone[0] / free[0])
    speedup = runs[1].throughput / runs[0].throughput
    factors["architecture"] = speedup / math.prod(factors.values())
    return Comparison(
        a=runs[0].target,
        b=runs[1].target,
        workload=runs[0].workload,
        mode=runs[0].mode,
        throughput_a=runs[0].throughput,
        throughput_b=runs[1].throughput,
        chips_a=runs[0].num_chips,
        chips_b=runs[1].num_chips,
        speedup=speedup,
        factors=factors,
        notes=tuple(notes),
    )
