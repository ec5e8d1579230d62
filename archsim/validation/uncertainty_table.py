"""Write ``validation/uncertainty.yaml``: the calibration's errors and coverage (see :mod:`archsim.spec.uncertainty`).

:func:`coverage` reads what each family's rows of a validation table cover; :func:`write_table`
writes it with the grouped errors of :func:`archsim.validation.crossval.grouped`, keeping the entries
of families that were not refreshed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from archsim.errors import LookupFailed
from archsim.outfile import write_file
from archsim.spec.library import Library
from archsim.uncertainty import TABLE, workload_key
from archsim.validation.run import calibration_table, prepare, software_name

HEADER = """\
# Written by `python scripts/calibrate.py --uncertainty` (do not edit by hand): the mean absolute
# relative error of the rows of validation/{table}.yaml per family, software and level, with the
# fitted parameters (in_sample) and with parameters refitted without the row (cross_validated), and
# what each family's rows cover. Every result's `uncertainty` and `extrapolation` come from here
# (archsim/uncertainty.py).
"""


def coverage(library: Library, table: str) -> dict[str, dict[str, object]]:
    """Per family: the chips, stacks and workloads (with batch and sequence ranges) of its rows, and the most chips."""
    spec = calibration_table(library, table)
    found: dict[str, dict[str, object]] = {}
    workloads: dict[str, dict[str, dict[str, set[int]]]] = {}
    for row in spec.rows:
        prepared = prepare(row, library)
        family = prepared.family
        entry = found.setdefault(family, {"chips": set(), "software": set(), "max_chips": 1})
        entry["chips"].add(prepared.target.chip.name)  # type: ignore[attr-defined]
        entry["software"].add(software_name(prepared, library))  # type: ignore[attr-defined]
        system = prepared.target.linked
        chips = system.num_chips * (row.nodes or 1) if system is not None else 1
        entry["max_chips"] = max(int(entry["max_chips"]), chips)  # type: ignore[call-overload]
        if prepared.built is None:
            continue
        shapes = workloads.setdefault(family, {}).setdefault(
            workload_key(row.workload), {"batch": set(), "seq_len": set()}
        )
        if not row.workload.startswith(("gemm:", "conv:")):
            shapes["batch"].add(row.batch if isinstance(row.batch, int) else prepared.built.trace.batch)
        if row.seq_len is not None:
            shapes["seq_len"].add(row.seq_len)
    out: dict[str, dict[str, object]] = {}
    for family in sorted(found):
        entry = found[family]
        listed = []
        for name, shapes in sorted(workloads.get(family, {}).items()):
            item: dict[str, object] = {"workload": name}
            if shapes["batch"]:
                item |= {"min_batch": min(shapes["batch"]), "max_batch": max(shapes["batch"])}
            if shapes["seq_len"]:
                item["seq_lens"] = sorted(shapes["seq_len"])
            listed.append(item)
        out[family] = {
            "chips": sorted(entry["chips"]),  # type: ignore[call-overload]
            "software": sorted(entry["software"]),  # type: ignore[call-overload]
            "workloads": listed,
            "max_chips": entry["max_chips"],
        }
    return out


def write_table(
    library: Library,
    table: str,
    folds: int,
    families: Sequence[tuple[str, list[dict[str, object]]]],
    covered: dict[str, dict[str, object]],
) -> Path:
    """Write the error table next to the validation table, replacing the entries of ``families`` only."""
    path = library.find(["validation"], table).path.parent / f"{TABLE}.yaml"
    refreshed = {family for family, _ in families}
    kept: list[dict[str, object]] = []
    try:
        old = library.uncertainty(TABLE)
        kept = [e.model_dump() for e in old.errors if e.family not in refreshed]
    except LookupFailed:
        pass
    errors = sorted(
        kept + [e for _, entries in families for e in entries],
        key=lambda e: (str(e["family"]), str(e["level"]), str(e["software"])),
    )
    document = {
        "schema_version": 1,
        "kind": "uncertainty",
        "name": TABLE,
        "description": f"cross-validated errors of validation/{table}.yaml per family, software and level",
        "table": table,
        "folds": folds,
        "errors": errors,
        "coverage": covered,
    }
    text = HEADER.format(table=table) + yaml.safe_dump(document, sort_keys=False, width=110)
    write_file(path, text, "")
    return path
