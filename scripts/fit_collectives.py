"""Fit NCCL's two free parameters to the two DGX A100 nccl-tests rows of the calibration file.

Usage: python scripts/fit_collectives.py CALIBRATION_CSV [--library nccl] [--system dgx-a100]

The rows are those of CALIBRATION_CSV whose system is ``--system`` and whose metric is an nccl-tests
all-reduce bus bandwidth (``workload`` names the bytes: ``all_reduce_perf, 1,048,576 bytes, 8 GPUs``).
Two parameters, two rows: the library's ``wire_efficiency`` (what the largest row's bandwidth says)
and its ``launch_latency`` (what the smallest row's time says beyond NCCL's own latency model). Every
other number of the library stays as its file gives it. Prints the fitted values and each row's
measured and modelled bus bandwidth; writing them into software/NAME.yaml is left to the reader.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys

from archsim.collective_run import call_time_s
from archsim.models.collective_cost import bus_factor
from archsim.run.target import fabric_for
from archsim.spec.collective_library import CollectiveLibrarySpec
from archsim.spec.library import Library


def rows(path: str, system: str) -> list[tuple[int, float]]:
    """(bytes, measured busbw in bytes/s) of the all-reduce rows of ``system``."""
    found = []
    with open(path, newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row["system"] != system or "nccl-tests busbw" not in row["metric"]:
                continue
            match = re.match(r"all_reduce_perf, ([\d,]+) bytes", row["workload"])
            if match is None:
                continue
            found.append((int(match.group(1).replace(",", "")), float(row["value"]) * 1e9))
    return sorted(found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("calibration")
    parser.add_argument("--library", default="nccl")
    parser.add_argument("--system", default="dgx-a100")
    args = parser.parse_args()
    library = Library()
    data = rows(args.calibration, args.system)
    if len(data) != 2:
        print(f"expected 2 rows for {args.system}, found {len(data)}", file=sys.stderr)
        return 2
    (small, small_busbw), (large, large_busbw) = data
    base: CollectiveLibrarySpec = library.collective_library(args.library)
    system = library.system(args.system)
    fabric = fabric_for(system, library, 1, args.system)
    n = fabric.num_chips

    def target_s(size: int, busbw: float) -> float:
        return size * bus_factor("all-reduce", n) / busbw

    def modelled_s(spec: CollectiveLibrarySpec, size: int) -> float:
        return call_time_s(fabric, spec, "all-reduce", size)[0]

    launch, efficiency = 0.0, 1.0
    for _ in range(20):  # alternate: efficiency from the large row, launch from the small one
        lo, hi = 0.05, 1.0
        for _ in range(50):
            mid = (lo + hi) / 2
            spec = base.model_copy(update={"launch_latency": launch, "wire_efficiency": mid})
            lo, hi = (lo, mid) if modelled_s(spec, large) < target_s(large, large_busbw) else (mid, hi)
        efficiency = (lo + hi) / 2
        spec = base.model_copy(update={"launch_latency": 0.0, "wire_efficiency": efficiency})
        launch = max(0.0, target_s(small, small_busbw) - modelled_s(spec, small))
    spec = base.model_copy(update={"launch_latency": launch, "wire_efficiency": efficiency})
    print(
        f"{args.library} on {args.system} ({n} chips): launch_latency {launch * 1e6:.1f} us, "
        f"wire_efficiency {efficiency:.3f}"
    )
    for size, busbw in data:
        time_s, plan, _ = call_time_s(fabric, spec, "all-reduce", size)
        model = size * bus_factor("all-reduce", n) / time_s
        protocol = plan.protocol if plan is not None else "-"
        print(f"  {size:>13} B  measured {busbw / 1e9:7.2f} GB/s  model {model / 1e9:7.2f} GB/s  ({protocol})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
