"""``archsim list``: the chips, systems, workloads, memories and links on the search path."""

from __future__ import annotations

import argparse
from typing import Any

from archsim.spec.library import Library

KINDS = {"chips": "chip", "systems": "system", "workloads": "model", "memory": "memory", "links": "link"}


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``archsim list``."""
    parser = sub.add_parser("list", parents=[common], help="chips, systems, workloads, memories and links known")
    parser.add_argument("kind", nargs="?", choices=list(KINDS), help="only this kind")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print one line per description, grouped by kind."""
    library = Library(args.lib)
    for title in [args.kind] if args.kind else list(KINDS):
        print(f"{title}:")
        for entry in library.entries(KINDS[title]):
            aliases = f" (alias {', '.join(entry.aliases)})" if entry.aliases else ""
            print(f"  {entry.name:<16} {entry.description}{aliases}")
    if args.kind in (None, "workloads"):
        print("  gemm:MxNxK       one matrix product (gemm:BxMxNxK for B of them), for operator-level studies")
    return 0
