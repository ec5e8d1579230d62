"""What a worker process runs: a chunk of a sweep's rows, each a variant simulated on one workload.

Workers keep one :class:`~archsim.spec.library.Library` per search path for their whole life (the
descriptions are read and validated once), and a chunk reuses a configuration's variant for all its
workloads. A row is a flat dict of JSON values: the configuration, design figures of the variant,
and the run's scalar results (see :data:`DESIGN_COLUMNS` and :data:`RESULT_COLUMNS`); a run refused
by archsim (a batch that does not fit, say) is a row whose ``error`` holds the one-line message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from archsim.errors import ArchsimError, UsageError
from archsim.limits import description_files
from archsim.models.energy import onchip_memory_bytes
from archsim.results.records import RunResult
from archsim.run.request import RunRequest
from archsim.run.runner import run
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.spec.sweep import SweepSpec
from archsim.sweep.expand import Configuration, Task, run_arguments, si_value, variant
from archsim.time_to_train import simulate_training

DESIGN_COLUMNS = ("chip", "peak_flops", "tdp_w", "transistors", "onchip_memory_bytes", "main_memory_bandwidth")
"""Figures of the variant: peak FLOP/s and TDP (watts) of all its chips, transistors per chip, on-chip
SRAM per chip (bytes, see :func:`archsim.models.energy.onchip_memory_bytes`), main-memory bandwidth per chip (B/s)."""
RESULT_COLUMNS = (
    "mode",
    "batch",
    "precision",
    "seq_len",
    "padding",
    "tokens_per_sequence",
    "num_chips",
    "step_time_s",
    "throughput",
    "flops",
    "utilization",
    "throughput_per_chip",
    "throughput_per_watt",
    "throughput_per_watt_tdp",
    "throughput_per_billion_transistors",
    "throughput_per_mm2",
    "energy_j",
    "energy_per_sample_j",
    "power_w",
    "peak_power_w",
    "static_power_w",
    "area_mm2",
    "area_source",
    "clock_scale",
    "voltage_scale",
    "ops_time_s",
    "step_overhead_s",
    "compute_bound_s",
    "memory_bound_s",
    "communication_bound_s",
    "overhead_bound_s",
    "software",
    "uncertainty",
    "extrapolation",
    "memory_bytes",
    "memory_capacity_bytes",
    "memory_technology",
    "streaming_memory_bytes",
    "system",
    "nodes",
    "data_parallel",
    "pipeline_stages",
    "microbatches",
    "schedule",
    "collective",
    "global_batch",
    "single_chip_throughput",
    "scaling_efficiency",
    "scaling_note",
    "comm_s",
    "exposed_comm_s",
    "bubble_s",
    "bubble_fraction",
    "input_bound_s",
    "step_bound",
    "time_to_train_s",
    "epochs",
    "tokens_per_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "output_tokens_per_s",
    "max_batch",
    "tensor_parallel",
    "sequence_parallel",
    "expert_parallel",
    "bn_group",
    "mfu",
)
"""The scalar fields of :class:`~archsim.results.records.RunResult`; ``normalized`` is flattened to
``throughput_per_*`` and ``time_by_bound`` to ``*_bound_s``; ``step_bound`` is the input pipeline's
(None when not modelled), ``time_to_train_s`` and ``epochs`` the time to train's (None when not asked)."""


@dataclass(frozen=True)
class SweepContext:
    """What every task of a sweep shares: the spec, its file (for messages) and the search path."""

    spec: SweepSpec
    source: str
    search_path: tuple[str, ...]
    """Absolute folders before the built-in library (``--lib`` and ``ARCHSIM_PATH`` already joined)."""


_LIBRARIES: dict[tuple[str, ...], tuple[tuple[tuple[str, int, int], ...], Library]] = {}


def worker_library(search_path: tuple[str, ...]) -> Library:
    """The library of this process for ``search_path``: built once, and again after a description changed.

    A process that runs one sweep after another (a notebook's, a Dask worker's) would otherwise price
    the later ones with descriptions read before they were edited: the library is rebuilt when a
    description file on the search path was added, removed, or has another size or modification time.
    """
    fresh = Library(search_path, use_env=False)  # cheap: its index is read when first used
    stamp = tuple(
        (str(path), info.st_mtime_ns, info.st_size)
        for root in fresh.roots
        for path in description_files(root)
        for info in (path.stat(),)
    )
    held = _LIBRARIES.get(search_path)
    if held is None or held[0] != stamp:
        held = _LIBRARIES[search_path] = (stamp, fresh)
    return held[1]


def design_columns(chip: ChipSpec, result: RunResult) -> dict[str, Any]:
    """The variant's design figures for one run (see :data:`DESIGN_COLUMNS`)."""
    chips = result.num_chips
    return {
        "chip": chip.name,
        "peak_flops": chip.peak_flops(Precision(result.precision)) * chips,
        "tdp_w": None if chip.tdp_w is None else chip.tdp_w * chips,
        "transistors": chip.transistors,
        "onchip_memory_bytes": onchip_memory_bytes(chip),
        "main_memory_bandwidth": chip.memory.main.bandwidth,
    }


def result_columns(result: RunResult) -> dict[str, Any]:
    """The scalar results of a run (see :data:`RESULT_COLUMNS`)."""
    columns = {name: getattr(result, name) for name in RESULT_COLUMNS if hasattr(result, name)}
    columns["throughput_per_chip"] = result.normalized.per_chip
    columns["extrapolation"] = ",".join(result.extrapolation)  # one string per cell: chip,software,...
    columns["throughput_per_watt"] = result.normalized.per_watt
    columns["throughput_per_watt_tdp"] = result.normalized.per_watt_tdp
    columns["throughput_per_mm2"] = result.normalized.per_mm2
    columns["throughput_per_billion_transistors"] = result.normalized.per_billion_transistors
    for bound, seconds in result.time_by_bound.items():
        columns[f"{bound}_bound_s"] = seconds
    if result.input_pipeline is not None:
        columns["step_bound"] = result.input_pipeline.step_bound
    if result.time_to_train is not None:
        columns["time_to_train_s"] = result.time_to_train.time_to_train_s
        columns["epochs"] = result.time_to_train.epochs
    return {name: columns.get(name) for name in RESULT_COLUMNS}


def base_row(task: Task) -> dict[str, Any]:
    """The columns that say which row this is: key, target, workload and every axis (SI values)."""
    row: dict[str, Any] = {"key": task.key, "target": task.configuration.target, "workload": task.workload.name}
    row.update({path: si_value(value) for path, value in task.configuration.values})
    return row


def _simulate(target: str, workload: str, library: Library, arguments: dict[str, Any]) -> RunResult:
    """One run: a request of ``arguments`` (:func:`archsim.simulate`'s), or :func:`archsim.simulate_training`."""
    training = {name: arguments.pop(name, None) for name in ("time_to_train", "optimizer", "epochs", "input_decode")}
    if not training["time_to_train"] and training["input_decode"] is None:
        for name in ("optimizer", "epochs"):
            if training[name] is not None:
                raise UsageError(target, f"run.{name}", "only applies with run.time_to_train")
        return run(RunRequest.of(target, workload, **arguments), library)
    return simulate_training(target, workload, library=library, **training, **arguments)


def run_chunk(context: SweepContext, chunk: list[Task]) -> list[dict[str, Any]]:
    """Simulate every task of ``chunk``; the rows come back in the chunk's order."""
    library = worker_library(context.search_path)
    rows: list[dict[str, Any]] = []
    last: tuple[Configuration, Library, dict[str, Any]] | None = None
    for task in chunk:
        row = base_row(task)
        try:
            if last is None or last[0] != task.configuration:
                last = (task.configuration, *variant(library, context.spec, context.source, task.configuration))
            _, variant_library, run = last
            arguments = run_arguments(context.spec, task.workload, run)
            result = _simulate(task.configuration.target, task.workload.name, variant_library, arguments)
            entry = variant_library.find(["chip", "system"], task.configuration.target)
            chip_name = variant_library.spec(entry).chip if entry.kind == "system" else task.configuration.target
            row.update(design_columns(variant_library.chip(chip_name), result))
            row.update(result_columns(result))
            row["error"] = None
        except ArchsimError as err:
            row["error"] = err.line()
        rows.append(row)
    return rows
