"""``archsim run``: simulate a workload on a target and print a summary and per-layer table, or JSON."""

from __future__ import annotations

import argparse
import json
from typing import Any

from archsim.cli import HELP, add_memory_argument, add_trace_arguments, positive_int
from archsim.commands import multichip, scalesim, training
from archsim.errors import UsageError
from archsim.models.systolic_layer import StallModel
from archsim.results.records import to_json
from archsim.results.table import layer_table, summary_lines
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.units import format_time
from archsim.workloads.chakra import ChakraTrace, is_chakra, read_chakra
from archsim.workloads.trace import Mode


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``archsim run``."""
    parser = sub.add_parser("run", parents=[common], help=HELP["run"])
    parser.add_argument("target", help="chip name, alias or YAML path (or a SCALE-Sim CONFIG.cfg)")
    parser.add_argument("workload", help="model name, trace file or gemm:MxNxK (or a SCALE-Sim TOPOLOGY.csv)")
    parser.add_argument(
        "--mode",
        choices=[m.value for m in Mode],
        default="infer",
        help="train, infer, or for decoder language models prefill (the prompt) and decode (one new token)",
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
        "--prompt-len", type=positive_int, default=None, help="prefill and decode: prompt tokens per sequence (128)"
    )
    parser.add_argument(
        "--gen-len", type=positive_int, default=None, help="decode: tokens generated per sequence (128)"
    )
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object")
    add_trace_arguments(parser)
    add_memory_argument(parser)
    multichip.add_arguments(parser)
    training.add_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Simulate and print (a SCALE-Sim ``CONFIG.cfg TOPOLOGY.csv`` pair runs as ``archsim scalesim``)."""
    if scalesim.is_scalesim_pair(args.target, args.workload):
        if (
            args.mode != "infer"
            or args.batch
            or args.precision
            or args.seq_len
            or args.recompute
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
        args.config, args.topology, args.model = args.target, args.workload, StallModel.SCALESIM.value
        return scalesim.run(args)
    if is_chakra(args.workload):
        chakra = read_chakra(args.workload, Precision(args.precision or "fp16"))
        if chakra.comms:
            return _run_chakra(args, chakra)
    training.check_args(args)
    result = training.extend_args(multichip.simulate_args(args), args)
    if args.json:
        print(to_json(result))
    else:
        print("\n".join(summary_lines(result) + multichip.summary_lines(result) + training.summary_lines(result)))
        print()
        print("\n".join(layer_table(result)))
    return 0


def _run_chakra(args: argparse.Namespace, chakra: ChakraTrace) -> int:
    """Replay a Chakra ET with communication nodes (see :mod:`archsim.chakra_replay`)."""
    from archsim.chakra_replay import replay_chakra

    if (
        args.mode != "infer"
        or args.batch
        or args.seq_len
        or args.prompt_len
        or args.gen_len
        or args.nodes
        or args.pipeline_stages != 1
        or args.fusion is not None
        or args.software is not None
        or args.recompute is not None
    ):
        raise UsageError(
            args.workload, "", "a Chakra ET is replayed as recorded: only --precision and --collective apply"
        )
    precision = Precision(args.precision) if args.precision else None
    collective = None if args.collective == "auto" else args.collective
    run = replay_chakra(chakra, args.target, Library(args.lib), precision, collective, args.workload)
    if args.json:
        nodes = [{"name": n.name, "kind": n.kind, "start_s": n.start_s, "end_s": n.end_s} for n in run.nodes]
        record = {
            "target": run.target,
            "workload": args.workload,
            "num_chips": run.num_chips,
            "step_time_s": run.step_time_s,
            "compute_s": run.compute_s,
            "comm_s": run.comm_s,
            "nodes": nodes,
        }
        print(json.dumps(record))
        return 0
    print(f"{args.workload} (Chakra ET, {len(chakra.trace.ops)} compute and {len(chakra.comms)} communication nodes)")
    print(
        f"on {run.target} ({run.num_chips} chips): step time {format_time(run.step_time_s)}, "
        f"compute {format_time(run.compute_s)}, communication {format_time(run.comm_s)}"
    )
    for node in run.nodes:
        took = format_time(node.end_s - node.start_s)
        print(f"  {node.name:<40} {node.kind:<15} {format_time(node.start_s):>10} {took:>10}")
    return 0
