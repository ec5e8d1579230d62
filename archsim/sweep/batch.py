"""The batch path of a sweep: a chunk's configurations priced together instead of one run at a time.

It applies to a sweep (:func:`batch_reason` is None) whose targets are all single chips of a family
with a batch model (:attr:`archsim.spec.registry.FamilyDefinition.batch`, :mod:`archsim.models.batch`:
every built-in family has one) and no user op-cost functions, whose axes are all ``chip.`` fields, and
whose runs are one-chip steps (no ``nodes``, pipeline, time to train or input pipeline settings).
Everything else is the event path (:func:`archsim.sweep.worker.run_chunk`): multi-chip systems
(collectives contend for links in SimPy), a plug-in family without a batch model, link/memory/system
axes.

Within a chunk each row is prepared as :func:`archsim.simulate` prepares a one-chip run: the
variant is built and validated (:func:`~archsim.sweep.expand.variant`, so a bad combination is
refused in the same words), the software, precision, trace (built once per distinct workload
setting) and efficiencies are resolved, the memory check runs. Rows that share a trace, software and
efficiencies are then evaluated together (:func:`archsim.sweep.batch_eval.evaluate`); a row whose
preparation raises, that the vectorized path cannot price exactly, or whose group has fewer than
:data:`MIN_GROUP` rows runs on the event path, so the table is the per-configuration path's, row for
row.
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass
from typing import Any

from archsim.api import simulate
from archsim.errors import ArchsimError, LookupFailed, UsageError
from archsim.limits import check_trace_ops
from archsim.memory_fit import Need, check_needs, trace_needs
from archsim.models.energy import chip_energy
from archsim.models.plugins import has_op_costs
from archsim.results.power import TECHNOLOGY, dram_bit_j
from archsim.run.request import RunRequest
from archsim.run.runner import default_batch_trace
from archsim.spec.chip import ChipSpec
from archsim.spec.efficiency import Efficiency
from archsim.spec.library import Library
from archsim.spec.registry import family_definition
from archsim.spec.software import SoftwareSpec
from archsim.spec.sweep import SweepSpec
from archsim.stack import default_software, is_kernel, planned_software, stack_efficiency, stack_options
from archsim.sweep.batch_eval import Group, evaluate
from archsim.sweep.expand import Configuration, Task, run_arguments, si_value, variant
from archsim.sweep.worker import SweepContext, design_columns, result_columns, run_chunk, worker_library
from archsim.uncertainty import error_bars
from archsim.workloads import build_trace
from archsim.workloads.padding import check_left_out
from archsim.workloads.rebuild import Rebuilder
from archsim.workloads.trace import Trace

MIN_GROUP = 8
"""Fewest rows priced together: a batch model's per-op cost (tens of numpy calls per candidate tile,
split or fold class) only pays for itself over several configurations; smaller groups run on the event path."""
ONE_CHIP_SETTINGS = ("nodes", "microbatches", "input_decode")
"""Run settings that, when set, make a run more than one chip's step (or add an input pipeline)."""


def batch_reason(spec: SweepSpec, library: Library) -> str | None:
    """Why the sweep cannot take the batch path (one line), or None when it can."""
    settings = spec.settings
    for name in ONE_CHIP_SETTINGS:
        if getattr(settings, name) is not None:
            return f"settings.{name} is set"
    if settings.pipeline_stages != 1 or settings.time_to_train or settings.epochs is not None:
        return "a multi-stage or time-to-train run"
    if settings.mode in ("prefill", "decode", "generate") or (settings.prompt_len, settings.gen_len) != (None, None):
        return "a text-generation run"
    if settings.zero:
        return "settings.zero is set"
    if settings.precision is not None and (settings.precision.is_generic or settings.precision.block_scaling):
        return "a 4-bit block-scaled run (two matrix precisions per step)"
    if settings.expert_parallel != 1:
        return "settings.expert_parallel is set"
    if settings.bn_group != 1:
        return "settings.bn_group is set"
    if settings.tensor_parallel != 1 or settings.sequence_parallel or settings.interleave != 1:
        return "a tensor-parallel or interleaved run"
    for path in spec.axis_paths:
        if not path.startswith("chip."):
            return f"axis {path} is not a chip field"
        if path.startswith("chip.memory.cache"):
            return f"axis {path}: which reads an on-chip cache serves depends on each variant's"
    for target in spec.targets:
        entry = library.find(["chip", "system"], target)
        if entry.kind != "chip":
            return f"target {target} is a system"
        chip = library.chip(target)
        family = chip.family
        if chip.memory.cache is not None:
            return f"target {target} has an on-chip cache (memory.cache), whose reads depend on each variant"
        if family_definition(family).batch is None:
            return f"target {target} is a {family} chip (no vectorized model)"
        if has_op_costs(family):
            return f"user op-cost functions are registered for {family}"
    return None


@dataclass
class _Prepared:
    """One row ready to price: its variant library and chip, trace and software."""

    task: Task
    library: Library
    chip: ChipSpec
    trace: Trace
    software: SoftwareSpec


class _Traces:
    """Traces already built in this worker, and the memory each needs (:func:`~archsim.memory_fit.trace_needs`).

    Keyed by everything :func:`archsim.workloads.build_trace` reads.
    """

    def __init__(self) -> None:
        self.built: dict[tuple[Any, ...], Trace] = {}
        self.needs: dict[int, tuple[Trace, list[Need]]] = {}
        self.plans: dict[tuple[Any, ...], tuple[Trace, Rebuilder, SoftwareSpec]] = {}
        """A run's first trace, its rebuilder and software, by target, workload entry, family and precision."""

    def needs_of(self, trace: Trace) -> list[Need]:
        """:func:`~archsim.memory_fit.trace_needs`, once per trace (it sums every op's tensors)."""
        found = self.needs.get(id(trace))
        if found is None or found[0] is not trace:
            found = self.needs[id(trace)] = (trace, trace_needs(trace))
        return found[1]

    def get(self, library: Library, *arguments: Any) -> Trace:
        """:func:`archsim.workloads.build_trace` of ``arguments``, built once."""
        key: tuple[Any, ...] = arguments
        try:
            hash(key)
        except TypeError:  # (an unhashable argument: compared by its repr)
            key = tuple(repr(a) for a in arguments)
        if key not in self.built:
            self.built[key] = build_trace(arguments[0], library, *arguments[1:])
        return self.built[key]


def _prepare(library: Library, task: Task, arguments: dict[str, Any], traces: _Traces) -> _Prepared:
    """What :func:`archsim.simulate` and :func:`archsim.api.run_trace` do before pricing, for a chip."""
    request = RunRequest.of(  # every argument checked as a run checks it
        task.configuration.target,
        task.workload.name,
        arguments["mode"],
        arguments["batch"],
        arguments["precision"],
        arguments["seq_len"],
        software=arguments["software"],
        fusion=arguments["fusion"],
        recompute=arguments["recompute"],
        padding=arguments["padding"],
        streaming_memory=arguments["streaming_memory"],
    )
    target, workload, streaming = request.target, request.workload, request.streaming
    chip = library.chip(target)
    run_precision = chip.run_precision(request.precision)
    if run_precision not in chip.peak:
        raise UsageError(chip.name, "--precision", "not supported")  # the event path words it
    # what depends on the chip only through its family and the run's precision, once per workload entry
    # (arguments come from the sweep's settings and the entry: the batch path has no run. axes)
    key = (target, id(task.workload), chip.family, run_precision)
    planned = traces.plans.get(key)
    if planned is None:
        stack = planned_software(library, chip, request.software, workload)
        options = stack_options(
            stack, request.mode, run_precision, request.fusion, request.recompute, None, request.padding
        )
        seq_len = request.trace_seq_len
        first = traces.get(library, workload, request.mode, request.batch, run_precision, seq_len, options)
        check_left_out(request.padding, first, workload)
        rebuild = Rebuilder(workload, library, request.mode, run_precision, seq_len, options)
        software = stack if request.software is not None else default_software(library, chip, is_kernel(first))
        planned = traces.plans[key] = (first, rebuild, software)
    trace, rebuild, software = planned
    trace = default_batch_trace(chip, streaming, trace, request.batch, rebuild)
    check_trace_ops(len(trace.ops), trace.name)
    check_needs(chip, streaming, trace, traces.needs_of, rebuild if "model" in trace.meta else None)
    return _Prepared(task, library, chip, trace, software)


class _Efficiencies:
    """:func:`archsim.stack.stack_efficiency` once per family, software, precision and chip overrides."""

    def __init__(self) -> None:
        self.known: dict[tuple[Any, ...], Efficiency] = {}

    def get(self, library: Library, prepared: _Prepared) -> Efficiency:
        chip, software, precision = prepared.chip, prepared.software, prepared.trace.precision
        key = (chip.family, software.name, precision, chip.efficiency)
        if key not in self.known:
            self.known[key] = stack_efficiency(library, chip, software, precision, None)
        return self.known[key]


class _Columns:
    """:func:`archsim.sweep.worker.base_row`, with each axis value's SI number computed once."""

    def __init__(self) -> None:
        self.si: dict[tuple[type, Any], Any] = {}

    def base_row(self, task: Task) -> dict[str, Any]:
        configuration = task.configuration
        row: dict[str, Any] = {"key": task.key, "target": configuration.target, "workload": task.workload.name}
        for path, value in configuration.values:
            try:
                key = (type(value), value)
                if key not in self.si:
                    self.si[key] = si_value(value)
                row[path] = self.si[key]
            except TypeError:  # a list or mapping value: not hashable
                row[path] = si_value(value)
        return row


class _GroupKeys:
    """The ``group_key`` of a family's batch module (:mod:`archsim.models.batch`), module imported once per family."""

    def __init__(self) -> None:
        self.modules: dict[str, Any] = {}

    def get(self, chip: ChipSpec) -> object:
        """What configurations priced together share besides their chip name (a systolic dataflow, say)."""
        module = self.modules.get(chip.family)
        if module is None:
            batch = family_definition(chip.family).batch
            assert batch is not None  # batch_reason let only such families through
            module = self.modules[chip.family] = importlib.import_module(batch)
        return module.group_key(chip)


def _warm(library: Library, context: SweepContext, chunk: list[Task]) -> None:
    """Run each target and workload of ``chunk`` once on the unvaried library, for its side effect.

    A variant library shares the specs its parent has validated so far, not those validated later:
    one plain run validates everything a run reads (families, software, memory and energy tables,
    error bars) in the parent, so that no variant validates them again. A run that fails is ignored
    (its rows will say why).
    """
    seen: set[tuple[str, str]] = set()
    for task in chunk:
        key = (task.configuration.target, task.workload.name)
        if key in seen:
            continue
        seen.add(key)
        arguments = run_arguments(context.spec, task.workload, {})
        for name in ("time_to_train", "optimizer", "epochs", "input_decode"):  # (not set on the batch path)
            arguments.pop(name)
        with contextlib.suppress(ArchsimError):
            simulate(key[0], key[1], library=library, **arguments)


def _original(library: Library, chip: ChipSpec, cache: dict[str, ChipSpec | None]) -> ChipSpec | None:
    """The chip ``chip`` is a variant of, as :func:`archsim.results.power.priced` finds it (validated once)."""
    if chip.name not in cache:
        try:
            cache[chip.name] = library.file_spec(library.find(["chip"], chip.name))
        except LookupFailed:
            cache[chip.name] = None
    original = cache[chip.name]
    return None if original is None or original == chip else original


def run_batch_chunk(context: SweepContext, chunk: list[Task]) -> list[dict[str, Any]]:
    """The rows of ``chunk``, as :func:`~archsim.sweep.worker.run_chunk` computes them, priced together."""
    library = worker_library(context.search_path)
    spec = context.spec
    traces = _Traces()
    rows: dict[str, dict[str, Any]] = {}
    event: list[Task] = []
    groups: dict[tuple[Any, ...], list[_Prepared]] = {}
    last: tuple[Configuration, Library, dict[str, Any]] | None = None
    originals: dict[str, ChipSpec | None] = {}
    efficiencies, columns, group_keys = _Efficiencies(), _Columns(), _GroupKeys()
    _warm(library, context, chunk)
    for task in chunk:
        try:
            if last is None or last[0] != task.configuration:
                last = (task.configuration, *variant(library, spec, context.source, task.configuration))
            _, variant_library, run = last
            arguments = run_arguments(spec, task.workload, run)
            prepared = _prepare(variant_library, task, arguments, traces)
            efficiency = efficiencies.get(variant_library, prepared)
        except ArchsimError:
            event.append(task)  # refused: the event path gives the row its error, in its words
            continue
        kind = group_keys.get(prepared.chip)
        key = (id(prepared.trace), efficiency, prepared.software.name, kind, prepared.chip.name)
        groups.setdefault(key, []).append(prepared)
    tech_entry = library.find(["energy"], TECHNOLOGY)
    tech = library.spec(tech_entry)
    for (_, efficiency, _, _, _), members in groups.items():
        if len(members) < MIN_GROUP:
            event.extend(p.task for p in members)
            continue
        first = members[0]
        energies = []
        for p in members:
            original = _original(library, p.chip, originals)
            energies.append(chip_energy(p.chip, tech, p.trace.precision, dram_bit_j(library, p.chip), original))
        trace, software = first.trace, first.software.name
        group = Group(
            trace,
            efficiency,
            software,
            first.software.input_pipeline,
            [p.chip for p in members],
            energies,
            error_bars(
                first.library, first.chip, is_kernel(trace), software, trace.name, trace.batch, trace.seq_len, 1
            ),
        )
        for prepared, result in zip(members, evaluate(group), strict=True):
            if result is None:
                event.append(prepared.task)
                continue
            row = columns.base_row(prepared.task)
            row.update(design_columns(prepared.chip, result))
            row.update(result_columns(result))
            row["error"] = None
            rows[prepared.task.key] = row
    for row in run_chunk(context, event):
        rows[row["key"]] = row
    return [rows[t.key] for t in chunk]
