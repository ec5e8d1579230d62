"""archsim's benchmark: wall time of whole CLI runs and of the stages inside one run.

Usage: python scripts/bench.py [--repeat N] [--quick]

Each case runs as a fresh process (so Python start-up and imports count, as a user sees them), N
times after one warm-up; the median, minimum and maximum wall times are printed. A second table
times the stages of a run in-process (trace build, cost + replay, result assembly). Timings are
never test assertions: this script is how the numbers quoted in notes are produced.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

CLI_CASES = [
    ("v100 resnet50 train b256", ["run", "v100", "resnet50", "--mode", "train", "--batch", "256", "--json"]),
    ("v100 bert-large train s128", ["run", "v100", "bert-large", "--mode", "train", "--seq-len", "128", "--json"]),
    ("ipu bert-large infer", ["run", "ipu", "bert-large", "--json"]),
    ("tpu-v3 resnet50 infer", ["run", "tpu-v3", "resnet50", "--json"]),
    ("v100 gemm 4096x7000x4096", ["run", "v100", "gemm:4096x7000x4096", "--json"]),
]


def time_process(args: list[str], repeat: int) -> list[float]:
    """Wall seconds of ``python -m archsim.cli ARGS``, one warm-up then ``repeat`` counted runs."""
    command = [sys.executable, "-m", "archsim.cli", *args]
    subprocess.run(command, check=True, capture_output=True)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def time_call(function: Callable[[], object], repeat: int) -> list[float]:
    """Wall seconds of an in-process call, one warm-up then ``repeat`` counted runs."""
    function()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return times


def row(label: str, times: list[float]) -> str:
    """One table row: median, min, max in milliseconds."""
    return f"{label:<34} {1e3 * statistics.median(times):>9.1f} {1e3 * min(times):>9.1f} {1e3 * max(times):>9.1f}"


def main() -> None:
    """Run every benchmark and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="only the first CLI case")
    args = parser.parse_args()

    header = f"{'case':<34} {'median ms':>9} {'min ms':>9} {'max ms':>9}"
    print(f"whole CLI runs (fresh process each, {args.repeat} runs after a warm-up)")
    print(header)
    for label, cli_args in CLI_CASES[: 1 if args.quick else None]:
        print(row(label, time_process(cli_args, args.repeat)), flush=True)

    from archsim.api import resolve_target, run_trace
    from archsim.spec.common import Precision
    from archsim.spec.library import Library
    from archsim.workloads import build_trace
    from archsim.workloads.trace import Mode

    library = Library(use_env=False)
    target = resolve_target("v100", library)
    print("\nstages of v100 resnet50 train b256, in-process")
    print(header)
    build = lambda: build_trace("resnet50", library, Mode.TRAIN, 256, Precision.FP16, None)  # noqa: E731
    trace = build()
    print(row("build trace", time_call(build, args.repeat)))
    print(row("cost + replay + result", time_call(lambda: run_trace(target, trace, library), args.repeat)))


if __name__ == "__main__":
    main()
