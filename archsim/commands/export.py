"""``archsim export scalesim|chakra``: a workload in another tool's format.

``archsim export scalesim WORKLOAD --out FILE.csv``: a workload's matrix ops as a SCALE-Sim topology.
The convolution format is written when every matrix op is a batch-1 forward op, else the ``M, N, K``
GEMM format (see :mod:`archsim.workloads.scalesim`); ``--format`` forces one. The batch defaults to
1, as SCALE-Sim models one image.

``archsim export chakra WORKLOAD --target TARGET [run options] --out DIR [--all-ranks]``: the step
``archsim run TARGET WORKLOAD [run options]`` simulates, as one Chakra ET per rank with archsim's
compute times and the step's communication (:mod:`archsim.workloads.chakra_export`).
"""

from __future__ import annotations

import argparse
from typing import Any

from archsim.cli import HELP, add_memory_argument, add_trace_arguments, positive_int
from archsim.commands import multichip
from archsim.errors import UsageError
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.spec.scalesim import write_topology
from archsim.workloads import build_trace
from archsim.workloads.scalesim import TopologyFormat, distinct, topology_from_trace
from archsim.workloads.trace import Mode


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``archsim export``."""
    parser = sub.add_parser("export", parents=[common], help=HELP["export"])
    formats = parser.add_subparsers(dest="export_format", required=True, metavar="FORMAT")
    scalesim = formats.add_parser(
        "scalesim", parents=[common], help="a SCALE-Sim topology CSV of the workload's convolutions and matmuls"
    )
    scalesim.add_argument("workload", help="model name, trace file, gemm:MxNxK or conv:N,C,H,W,K,R,S")
    scalesim.add_argument("--out", required=True, metavar="FILE.csv", help="topology file to write")
    scalesim.add_argument("--mode", choices=["train", "infer"], default="infer")
    scalesim.add_argument("--batch", type=positive_int, default=1, help="per-chip batch (default 1)")
    scalesim.add_argument("--seq-len", type=positive_int, default=None, help="sequence length (BERT)")
    scalesim.add_argument(
        "--format", choices=[f.value for f in TopologyFormat], default=TopologyFormat.AUTO.value, dest="topology_format"
    )
    scalesim.add_argument(
        "--distinct", action="store_true", help="write each distinct layer shape once (shorter SCALE-Sim runs)"
    )
    scalesim.set_defaults(handler=export_scalesim)
    chakra = formats.add_parser(
        "chakra", parents=[common], help="the simulated step as one Chakra ET per rank, with archsim's compute times"
    )
    chakra.add_argument("workload", help="model name, trace file, Chakra ET, gemm:MxNxK or conv:...")
    chakra.add_argument("--target", required=True, help="system (or chip) the step runs on")
    chakra.add_argument("--out", required=True, metavar="DIR", help="folder for the files NAME.RANK.et")
    chakra.add_argument(
        "--all-ranks", action="store_true", help="a file for every rank (default: every stage of pipeline 0)"
    )
    chakra.add_argument("--mode", choices=[m.value for m in Mode if m is not Mode.GENERATE], default="train")
    chakra.add_argument("--batch", type=positive_int, default=None, help="per chip or replica (default: the model's)")
    chakra.add_argument("--precision", choices=[p.value for p in Precision], default=None)
    chakra.add_argument("--seq-len", type=positive_int, default=None, help="sequence length (BERT, decoders)")
    chakra.add_argument("--prompt-len", type=positive_int, default=None, help="prefill, decode: prompt tokens")
    chakra.add_argument("--gen-len", type=positive_int, default=None, help="decode: tokens generated per sequence")
    add_trace_arguments(chakra)
    add_memory_argument(chakra)
    multichip.add_arguments(chakra)
    chakra.set_defaults(handler=export_chakra)


def export_scalesim(args: argparse.Namespace) -> int:
    """Build the trace and write its topology; prints one line saying what was written."""
    batch = None if args.workload.lower().startswith("gemm:") and args.batch == 1 else args.batch
    trace = build_trace(args.workload, Library(args.lib), Mode(args.mode), batch, Precision.FP16, args.seq_len)
    layers, gemm = topology_from_trace(trace, TopologyFormat(args.topology_format))
    if args.distinct:
        layers = distinct(layers)
    try:
        write_topology(layers, args.out, gemm)
    except OSError as err:
        raise UsageError(args.out, "--out", f"cannot write: {err.strerror}") from None
    print(f"wrote {len(layers)} layers of {trace.name} ({'GEMM' if gemm else 'convolution'} format) to {args.out}")
    return 0


def export_chakra(args: argparse.Namespace) -> int:
    """Simulate the step and write its ranks' ETs; prints one line saying what was written."""
    from archsim.workloads.chakra_export import export_chakra as export

    if args.timeline is not None:
        raise UsageError(args.timeline, "--timeline", "is for archsim run; export writes Chakra ETs only")
    written = export(
        args.target,
        args.workload,
        args.out,
        Library(args.lib),
        all_ranks=args.all_ranks,
        **multichip.request_options(args),
    )
    first, last = written[0].name, written[-1].name
    files = first if len(written) == 1 else f"{first} .. {last}"
    print(f"wrote {len(written)} Chakra ET file(s) ({files}) to {args.out}")
    return 0
