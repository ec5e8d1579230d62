"""``archsim export scalesim WORKLOAD --out FILE.csv``: a workload's matrix ops as a SCALE-Sim topology.

The convolution format is written when every matrix op is a batch-1 forward op, else the ``M, N, K``
GEMM format (see :mod:`archsim.workloads.scalesim`); ``--format`` forces one. The batch defaults to
1, as SCALE-Sim models one image.
"""

from __future__ import annotations

import argparse
from typing import Any

from archsim.cli import HELP, positive_int
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
