"""``archsim collective SYSTEM OP SIZE [SIZE ...]``: one collective per size, answered like nccl-tests.

Prints one row per size: bytes, time, ``algbw`` and ``busbw`` (GB/s, nccl-tests' definitions, see
:mod:`archsim.collective_run`), and the library's protocol and algorithm. ``--json`` prints one
object for one size, or ``{"results": [...]}`` for several, with bandwidths in bytes per second.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from archsim.cli import HELP, positive_int
from archsim.collective_run import collective
from archsim.errors import UnitError, UsageError
from archsim.models.collective_cost import COLLECTIVES
from archsim.units import format_time, parse_bytes


def size_argument(text: str) -> int:
    """A size with a unit (``1MiB``, ``16 GiB``) or a bare whole number of bytes (``1048576``, ``1e6``).

    A bare number is bytes whatever its sign or size: :func:`archsim.collective` refuses one that is
    not positive or above its limit, as it does in Python.
    """
    try:
        bare = float(text)
    except ValueError:
        try:
            return parse_bytes(text)
        except UnitError as err:
            raise argparse.ArgumentTypeError(err.problem) from None
    if not bare.is_integer():
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number of bytes")
    return int(bare)


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``archsim collective``."""
    parser = sub.add_parser(
        "collective",
        parents=[common],
        help=HELP["collective"],
    )
    parser.add_argument("system", metavar="SYSTEM", help="a system (dgx-a100, ipu-pod16, tpu-v4-pod:4x4x4, ...)")
    parser.add_argument("op", metavar="OP", help=f"one of {', '.join(COLLECTIVES)}")
    parser.add_argument("sizes", metavar="SIZE", nargs="+", type=size_argument, help="bytes per chip (1MiB, 16GiB)")
    parser.add_argument(
        "--software",
        metavar="NAME",
        default=None,
        help="collective library (nccl, gcl, hccl, tpu-ici) or software stack naming one (default: the system's)",
    )
    parser.add_argument("--nodes", type=positive_int, default=1, help="copies of the system (its scale-out fabric)")
    parser.add_argument(
        "--collective",
        choices=["auto", "ring", "tree", "hierarchical", "torus"],
        default="auto",
        help="algorithm (default: the library's choice)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Time the collective for every size and print the table (or JSON)."""
    if args.op not in COLLECTIVES:
        raise UsageError("archsim collective", "OP", f"{args.op[:40]!r} is not one of {', '.join(COLLECTIVES)}")
    from archsim.spec.library import Library

    results = collective(
        args.system, args.op, args.sizes, args.software, args.nodes, args.collective, library=Library(args.lib)
    )
    if args.json:
        records = [r.to_dict() for r in results]
        print(json.dumps(records[0] if len(records) == 1 else {"results": records}, sort_keys=True))
        return 0
    first = results[0]
    library = first.library or "none (bare links)"
    print(f"{first.collective} on {first.system}: {first.chips} chips, {first.nodes} node(s), library {library}")
    print(f"{'size (B)':>14} {'time':>10} {'algbw GB/s':>11} {'busbw GB/s':>11}  protocol  algorithm")
    for r in results:
        print(
            f"{r.bytes:>14} {format_time(r.time_s):>10} {r.algbw_bytes_per_s / 1e9:>11.2f} "
            f"{r.busbw_bytes_per_s / 1e9:>11.2f}  {r.protocol or '-':<8}  {r.algorithm}"
        )
    return 0
