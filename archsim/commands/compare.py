"""``archsim compare A B WORKLOAD``: B's speedup over A and the factors that multiply to it.

Prints one line per factor (see :mod:`archsim.compare` for what each means and how it is obtained),
then their product, which is the speedup. ``--json`` prints one object with ``speedup`` and
``factors`` (name -> ratio), both targets' throughputs and chip counts, and ``notes``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from archsim.cli import HELP, positive_int
from archsim.results.comparison import Comparison
from archsim.spec.common import Precision

FACTOR_TEXT = {
    "chip_count": "chips, B's over A's",
    "scaling": "use of those chips (per-chip throughput in the target over one chip alone)",
    "transistor_budget": "transistors per chip",
    "process_node": "process node (peak in inverse proportion to feature size, a stated rule)",
    "per_chip_peak": "peak FLOP/s per chip (transistors or node not published)",
    "memory_bandwidth": "A given B's main-memory bandwidth per peak FLOP/s",
    "software": "framework overheads (per-op, host and per-step), B's share over A's",
    "architecture": "the rest: peak per transistor and how much of it the design reaches",
}
"""One line on each factor, as the table prints it."""


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``archsim compare``."""
    parser = sub.add_parser(
        "compare",
        parents=[common],
        help=HELP["compare"],
    )
    add_compare_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run)


def add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the two targets, the workload and the run options of a comparison."""
    parser.add_argument("a", metavar="A", help="the baseline chip or system")
    parser.add_argument("b", metavar="B", help="the chip or system compared with it")
    parser.add_argument("workload", metavar="WORKLOAD", help="model name, trace file or gemm:MxNxK")
    parser.add_argument("--mode", choices=["train", "infer"], default="infer")
    parser.add_argument("--batch", type=positive_int, default=None, help="per-chip batch (default: the model's)")
    parser.add_argument(
        "--precision",
        choices=[p.value for p in Precision],
        default=None,
        help="operand precision (default: each chip's own)",
    )
    parser.add_argument("--seq-len", type=positive_int, default=None, help="sequence length (BERT)")
    parser.add_argument("--nodes-a", type=positive_int, default=None, help="copies of system A")
    parser.add_argument("--nodes-b", type=positive_int, default=None, help="copies of system B")


def compare_args(args: argparse.Namespace) -> Comparison:
    """Run the comparison the parsed arguments ask for."""
    from archsim.compare import compare
    from archsim.spec.library import Library

    return compare(
        args.a,
        args.b,
        args.workload,
        args.mode,
        args.batch,
        args.precision,
        args.seq_len,
        Library(args.lib),
        nodes_a=args.nodes_a,
        nodes_b=args.nodes_b,
    )


def _chips(count: int) -> str:
    return f"{count} chip" if count == 1 else f"{count} chips"


def run(args: argparse.Namespace) -> int:
    """Compare the two targets and print the factors (or JSON)."""
    result = compare_args(args)
    if args.json:
        print(json.dumps(result.to_dict(), indent=1, allow_nan=False))
        return 0
    print(
        f"{result.workload} {result.mode}: {result.b} ({_chips(result.chips_b)}, {result.throughput_b:.1f}/s) over "
        f"{result.a} ({_chips(result.chips_a)}, {result.throughput_a:.1f}/s)"
    )
    for name, ratio in result.factors.items():
        print(f"  {name:<18} {ratio:>9.3f}x  {FACTOR_TEXT[name]}")
    print(f"  {'speedup':<18} {result.speedup:>9.3f}x  the product of the factors")
    for note in result.notes:
        print(f"note: {note}")
    return 0
