"""``archsim run``: simulate a workload on a target and print a summary and per-layer table, or JSON."""

from __future__ import annotations

import argparse
from typing import Any

from archsim.api import simulate
from archsim.cli import positive_int
from archsim.results.records import to_json
from archsim.results.table import layer_table, summary_lines


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``archsim run``."""
    parser = sub.add_parser("run", parents=[common], help="simulate a workload on a target")
    parser.add_argument("target", help="chip name, alias or YAML path")
    parser.add_argument("workload", help="model name, trace file or gemm:MxNxK")
    parser.add_argument("--mode", choices=["train", "infer"], default="infer")
    parser.add_argument("--batch", type=positive_int, default=None, help="per-chip batch (default: the model's)")
    parser.add_argument(
        "--precision",
        choices=["fp32", "tf32", "fp16", "bf16", "int8"],
        default=None,
        help="operand precision (default: the chip's, fp16 or bf16 on TPUs)",
    )
    parser.add_argument("--seq-len", type=positive_int, default=None, help="sequence length (BERT)")
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Simulate and print."""
    result = simulate(
        args.target,
        args.workload,
        mode=args.mode,
        batch=args.batch,
        precision=args.precision,
        seq_len=args.seq_len,
        search_path=args.lib,
    )
    if args.json:
        print(to_json(result))
    else:
        print("\n".join(summary_lines(result)))
        print()
        print("\n".join(layer_table(result)))
    return 0
