"""``archsim list``: the descriptions on the search path, one line each, grouped by kind.

The kinds listed are those the library holds, so a new kind of description (``software``, say) is
listed as soon as a file of it is on the search path; :data:`TITLES` only gives the usual kinds their
plural titles and their order.
"""

from __future__ import annotations

import argparse
from typing import Any

from archsim.cli import HELP
from archsim.errors import UsageError
from archsim.spec.library import Library, suggest

TITLES = {
    "chips": ("chip",),
    "systems": ("system",),
    "workloads": ("model", "trace"),
    "memory": ("memory",),
    "links": ("link",),
    "sweeps": ("sweep",),
    "software": ("software",),
    "collective-libraries": ("collective-library",),
    "families": ("family",),
    "validation": ("validation",),
}
"""Title of each group, in the order listed, and the ``kind`` values it shows."""

INLINE_WORKLOADS = (
    ("gemm:MxNxK", "one matrix product (gemm:BxMxNxK for B of them), for operator-level studies"),
    ("conv:N,C,H,W,K,R,S", "one convolution ([,STRIDE[,PAD]]; padding 'same' for odd filters)"),
)
"""Workloads written inline rather than found in the library."""


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``archsim list``."""
    parser = sub.add_parser("list", parents=[common], help=HELP["list"])
    parser.add_argument("kind", nargs="?", help="only this kind: chips, systems, workloads, memory, links, sweeps, ...")
    parser.set_defaults(handler=run)


def groups(library: Library) -> dict[str, tuple[str, ...]]:
    """The groups to list: the usual titles, then any other kind on the search path under its own name."""
    present = library.kinds()
    listed = {title: kinds for title, kinds in TITLES.items() if title == "workloads" or set(kinds) & present}
    covered = {kind for kinds in TITLES.values() for kind in kinds}
    listed.update({kind: (kind,) for kind in sorted(present - covered)})
    return listed


def run(args: argparse.Namespace) -> int:
    """Print one line per description, grouped by kind."""
    library = Library(args.lib)
    available = groups(library)
    if args.kind is None:
        titles = list(available)
    else:
        wanted = args.kind.casefold()
        known = {**TITLES, **available}  # a usual kind with no file on the search path lists as empty
        titles = [t for t, kinds in known.items() if wanted == t or wanted in kinds]
        if not titles:
            raise UsageError("", "list", f"unknown kind {args.kind!r}; {suggest(args.kind, list(known))}")
        available = {t: known[t] for t in titles}
    for title in titles:
        entries = sorted((e for k in available[title] for e in library.entries(k)), key=lambda e: e.name)
        lines = [(e.name, e.description + (f" (alias {', '.join(e.aliases)})" if e.aliases else "")) for e in entries]
        if title == "workloads":
            lines += INLINE_WORKLOADS
        width = max((len(name) for name, _ in lines), default=0)
        print(f"{title}:" if lines else f"{title}: none on the search path")
        for name, text in lines:
            print(f"  {name:<{width}}  {text}")
    return 0
