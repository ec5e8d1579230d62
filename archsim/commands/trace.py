"""``archsim trace import|export``: traces from ONNX models and Chakra ETs, and traces as Chakra ETs.

* ``archsim trace import MODEL.onnx|TRACE.et --out FILE.yaml [--mode M] [--batch N] [--seq-len L]
  [--precision P] [--optimizer O] [--fusion F] [--recompute]`` writes an archsim trace file
  (``kind: trace``);
* ``archsim trace export WORKLOAD --out FILE.et [--mode M] [--batch N] [--seq-len L] [--precision P]
  [--fusion F] [--recompute]`` writes any workload (model name, trace file, ONNX file, ``gemm:``,
  ``conv:``) as a Chakra ET.

Each prints one line saying what it wrote; bad input is one line on standard error, exit status 2,
and nothing is written.
"""

from __future__ import annotations

import argparse
from typing import Any

from archsim.cli import HELP, add_trace_arguments, positive_int
from archsim.errors import UsageError
from archsim.run.request import padding_choice, stack_trace_options, trace_options
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.spec.model import Optimizer
from archsim.workloads import build_trace, write_trace
from archsim.workloads.chakra import read_chakra, write_chakra
from archsim.workloads.onnx_import import DEFAULT_OPTIMIZER, import_onnx
from archsim.workloads.options import TraceOptions
from archsim.workloads.padding import check_left_out
from archsim.workloads.quantize import at_format
from archsim.workloads.sources import is_chakra, is_onnx
from archsim.workloads.trace import Mode, Trace

PRECISIONS = [p.value for p in Precision]


def _common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", choices=["train", "infer"], default="infer")
    parser.add_argument("--batch", type=positive_int, default=None, help="per-chip batch (symbolic batch dimension)")
    parser.add_argument("--seq-len", type=positive_int, default=None, help="binds the symbolic sequence dimension")
    parser.add_argument("--precision", choices=PRECISIONS, default=Precision.FP16.value, help="default fp16")
    add_trace_arguments(parser)


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``archsim trace``."""
    parser = sub.add_parser("trace", parents=[common], help=HELP["trace"])
    actions = parser.add_subparsers(dest="trace_action", required=True, metavar="ACTION")
    imp = actions.add_parser("import", parents=[common], help="an ONNX model or a Chakra ET as a trace file")
    imp.add_argument("source", help="MODEL.onnx or TRACE.et")
    imp.add_argument("--out", required=True, metavar="FILE.yaml", help="trace file to write")
    _common_options(imp)
    imp.add_argument(
        "--optimizer",
        choices=[o.value for o in Optimizer],
        default=DEFAULT_OPTIMIZER.value,
        help="the training step's update (default adam)",
    )
    imp.set_defaults(handler=import_trace)
    exp = actions.add_parser("export", parents=[common], help="a workload as a Chakra execution trace")
    exp.add_argument("workload", help="model name, trace file, ONNX file, gemm:MxNxK or conv:...")
    exp.add_argument("--out", required=True, metavar="FILE.et", help="Chakra ET to write")
    _common_options(exp)
    exp.set_defaults(handler=export_trace)


def _write(path: str, write: Any, trace: Trace) -> None:
    try:
        write(trace, path)
    except OSError as err:
        raise UsageError(path, "--out", f"cannot write: {err.strerror or err}") from None


def _options(args: argparse.Namespace, mode: Mode, precision: Precision) -> TraceOptions:
    """The trace options asked for: ``--software``'s rewrites, ``--fusion``/``--recompute``/``--padding`` over them."""
    if args.software is None:
        return trace_options(args.fusion, args.recompute, padding=args.padding)
    stack = Library(args.lib).software(args.software)
    return stack_trace_options(stack, mode, precision, args.fusion, args.recompute, padding=args.padding)


def import_trace(args: argparse.Namespace) -> int:
    """Convert and write; prints one line."""
    precision = Precision(args.precision)
    options = _options(args, Mode(args.mode), precision)
    if is_onnx(args.source):
        trace = import_onnx(
            args.source, Mode(args.mode), args.batch, precision, args.seq_len, args.optimizer, options=options
        )
    elif is_chakra(args.source):
        if args.mode != "infer" or args.batch or args.seq_len or not options.is_default:
            raise UsageError(
                args.source,
                "--mode",
                "a Chakra ET is replayed as recorded: no --mode, --batch, --seq-len, --fusion, --recompute",
            )
        trace = at_format(precision, Mode.INFER, args.source, lambda stored: read_chakra(args.source, stored))
        if trace.has_comm:
            comms = sum(op.kind.is_comm for op in trace.ops)
            raise UsageError(
                args.source,
                "",
                f"{comms} communication nodes, which a trace file cannot hold; "
                "replay it with archsim run SYSTEM FILE.et",
            )
    else:
        raise UsageError(args.source, "", "expected an ONNX model (.onnx) or a Chakra ET (.et, .chakra)")
    check_left_out(padding_choice(args.padding), trace, args.source)
    _write(args.out, write_trace, trace)
    print(f"wrote {trace.name} ({trace.mode.value}, batch {trace.batch}, {len(trace.ops)} ops) to {args.out}")
    return 0


def export_trace(args: argparse.Namespace) -> int:
    """Build the workload's trace and write it as a Chakra ET; prints one line."""
    trace = build_trace(
        args.workload,
        Library(args.lib),
        Mode(args.mode),
        args.batch,
        Precision(args.precision),
        args.seq_len,
        _options(args, Mode(args.mode), Precision(args.precision)),
    )
    check_left_out(padding_choice(args.padding), trace, args.workload)
    _write(args.out, write_chakra, trace)
    print(f"wrote {trace.name} ({trace.mode.value}, batch {trace.batch}, {len(trace.ops)} nodes) to {args.out}")
    return 0
