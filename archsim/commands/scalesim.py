"""``archsim scalesim CONFIG.cfg TOPOLOGY.csv``: run SCALE-Sim input files through archsim's array model.

``archsim run CONFIG.cfg TOPOLOGY.csv`` does the same (with the default model). The default model,
``scalesim`` (``--scalesim-compat``), gives SCALE-Sim 3.0's per-layer "Total Cycles" exactly for
``InterfaceBandwidth: CALC`` configurations; ``--model archsim`` counts cycles from 1 and schedules
the folds against the interface bandwidth of ``USER`` configurations with archsim's stall model.
"""

from __future__ import annotations

import argparse
from typing import Any

from archsim.cli import HELP


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``archsim scalesim``."""
    from archsim.models.systolic_layer import StallModel  # the array model: not for `archsim run` of a chip

    parser = sub.add_parser("scalesim", parents=[common], help=HELP["scalesim"])
    parser.add_argument("config", help="SCALE-Sim configuration (.cfg)")
    parser.add_argument("topology", help="SCALE-Sim topology (.csv, convolution or M,N,K GEMM format)")
    parser.add_argument(
        "--model",
        choices=[m.value for m in StallModel],
        default=StallModel.SCALESIM.value,
        help="scalesim: SCALE-Sim 3.0's cycle counts (default); archsim: archsim's cycle count and stall model",
    )
    parser.add_argument(
        "--scalesim-compat",
        dest="model",
        action="store_const",
        const=StallModel.SCALESIM.value,
        help="same as --model scalesim",
    )
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run and print the per-layer table or the JSON object."""
    from archsim.models.systolic_layer import StallModel
    from archsim.results.scalesim import run_scalesim  # SCALE-Sim's file readers: not for other runs

    result = run_scalesim(args.config, args.topology, StallModel(args.model))
    print(result.to_json() if args.json else "\n".join(result.table()))
    return 0


def is_scalesim_pair(target: str, workload: str) -> bool:
    """True when ``archsim run TARGET WORKLOAD`` names a SCALE-Sim config and topology."""
    return target.lower().endswith(".cfg") and workload.lower().endswith(".csv")
