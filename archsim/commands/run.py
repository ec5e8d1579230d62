"""``archsim run``: simulate a workload on a target and print a summary and per-layer table, or JSON."""

from __future__ import annotations

import argparse
from typing import Any

from archsim.cli import HELP, add_memory_argument, add_trace_arguments, positive_int
from archsim.commands import multichip, scalesim, training
from archsim.errors import UsageError
from archsim.results.records import to_json
from archsim.results.table import layer_table, summary_lines
from archsim.spec.common import Precision
from archsim.workloads.trace import Mode


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``archsim run``."""
    parser = sub.add_parser("run", parents=[common], help=HELP["run"])
    parser.add_argument("target", help="chip name, alias or YAML path (or a SCALE-Sim CONFIG.cfg)")
    parser.add_argument("workload", help="model name, trace file or gemm:MxNxK (or a SCALE-Sim TOPOLOGY.csv)")
    add_shape_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object")
    add_trace_arguments(parser)
    add_memory_argument(parser)
    multichip.add_arguments(parser)
    training.add_arguments(parser)
    parser.set_defaults(handler=run)


def add_shape_arguments(parser: argparse.ArgumentParser) -> None:
    """Register what one run is: mode, batch, precision, sequence lengths (``run``, ``plot`` and ``report``)."""
    parser.add_argument(
        "--mode",
        choices=[m.value for m in Mode],
        default="infer",
        help="train, infer, or for decoder language models prefill (the prompt), decode (one new token) "
        "and generate (a prefill, then --gen-len decode steps)",
    )
    parser.add_argument("--batch", type=positive_int, default=None, help="per-chip batch (default: the model's)")
    parser.add_argument(
        "--precision",
        choices=[p.value for p in Precision],
        default=None,
        help="operand precision (default: the chip's, fp16 or bf16 on TPUs)",
    )
    parser.add_argument("--seq-len", type=positive_int, default=None, help="sequence length (BERT, decoders)")
    parser.add_argument(
        "--prompt-len",
        type=positive_int,
        default=None,
        help="prefill, decode, generate: prompt tokens per sequence (128)",
    )
    parser.add_argument(
        "--gen-len", type=positive_int, default=None, help="decode, generate: tokens generated per sequence (128)"
    )


def run(args: argparse.Namespace) -> int:
    """Simulate and print (a SCALE-Sim ``CONFIG.cfg TOPOLOGY.csv`` pair runs as ``archsim scalesim``)."""
    if scalesim.is_scalesim_pair(args.target, args.workload):
        if (
            args.mode != "infer"
            or args.batch
            or args.precision
            or args.seq_len
            or args.recompute not in (None, "none")
            or args.prompt_len
            or args.gen_len
        ):
            raise UsageError(
                args.target,
                "",
                "--mode, --batch, --precision, --seq-len, --prompt-len, --gen-len and --recompute do not apply "
                "to SCALE-Sim files",
            )
        if args.fusion is not None or args.software is not None:
            flag = "--fusion" if args.fusion is not None else "--software"
            raise UsageError(args.target, flag, "does not apply to SCALE-Sim files")
        from archsim.models.systolic_layer import StallModel  # the array model: loaded for SCALE-Sim files only

        args.config, args.topology, args.model = args.target, args.workload, StallModel.SCALESIM.value
        return scalesim.run(args)
    training.check_args(args)
    result = training.extend_args(multichip.simulate_args(args), args)
    if args.json:
        print(to_json(result))
    else:
        print("\n".join(summary_lines(result) + multichip.summary_lines(result) + training.summary_lines(result)))
        print()
        print("\n".join(layer_table(result)))
    return 0
