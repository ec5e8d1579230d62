"""Error bars (``validation/uncertainty.yaml``, ``kind: uncertainty``), written by the calibration script.

``python scripts/calibrate.py --uncertainty`` predicts every row of a validation table twice: with the
fitted parameters (in-sample) and with parameters refitted without the row's fold (held out, i.e.
cross-validated), and writes the mean absolute relative errors grouped by the row's family, software
(its stack, or a ``busbw`` row's collective library) and level (``operator``: one kernel or one
collective call; ``system``: a whole step), with ``*`` standing for every software or every level of
the family. It also writes what the rows cover per family (chips, stacks, workloads with their
batches, the largest chip count), which is what a run's ``extrapolation`` is judged against. Nothing
in the file is typed by hand.
"""

from __future__ import annotations

from typing import Literal

from pydantic import StrictFloat, StrictInt

from archsim.spec.common import Count, Name, Spec

ANY = "*"
"""The software or level of an entry that aggregates every one of the family's."""


class ErrorEntry(Spec):
    """Mean absolute relative errors of one (family, software, level) group of rows, as fractions."""

    family: Name
    software: str
    level: Literal["operator", "system", "*"]
    rows: Count
    in_sample: StrictFloat | StrictInt
    cross_validated: StrictFloat | StrictInt


class WorkloadCoverage(Spec):
    """A workload the rows of a family run (``gemm:``/``conv:`` for any kernel), with its range.

    ``min_batch`` and ``max_batch``: the smallest and largest per-chip batch among the rows (None
    for kernels); ``seq_lens``: the sequence lengths they run (empty where none applies).
    """

    workload: str
    min_batch: Count | None = None
    max_batch: Count | None = None
    seq_lens: tuple[Count, ...] = ()


class Coverage(Spec):
    """What the rows of one family cover."""

    chips: tuple[Name, ...]
    software: tuple[str, ...]
    workloads: tuple[WorkloadCoverage, ...]
    max_chips: Count


class UncertaintySpec(Spec):
    """The error table and the coverage of the calibration, per family."""

    schema_version: Literal[1]
    kind: Literal["uncertainty"]
    name: Name
    description: str
    table: Name
    """The validation table the errors were measured on."""
    folds: Count
    """Folds of the cross-validation (a family with fewer rows is cross-validated leave-one-out)."""
    errors: tuple[ErrorEntry, ...]
    coverage: dict[Name, Coverage]
