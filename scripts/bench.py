"""archsim's benchmark: wall time of whole CLI runs and of the stages inside one run.

Usage: python scripts/bench.py [--repeat N] [--quick] [--sweep N] [--suite N] [--against DIR]
       [--batch-sweep N] [--optimize N] [--exhaustive] [--stages]

Every table starts with the machine it was measured on (CPU model, cores, load average, Python): the
README quotes these medians with that line.

Each case runs as a fresh process (so Python start-up and imports count, as a user sees them), N
times after one warm-up; the median, minimum and maximum wall times are printed. The processes write
and read Python's bytecode caches (``PYTHONDONTWRITEBYTECODE`` is removed from their environment), as
an installed package has them compiled, and share one library cache of their own (``ARCHSIM_CACHE_DIR``
in a temporary folder), which the warm-up fills; the row marked "empty cache" gives every run a new,
empty one (a first run, or one after the descriptions changed). A second table
times the stages of a run in-process (trace build, cost + replay, result assembly). Timings are
never test assertions: this script is how the numbers quoted in notes are produced.

``--sweep N`` times only the 1,000-configuration acceptance sweep (``sweeps/systolic-shape-sweep.yaml``,
a systolic chip against ResNet-50 inference) as ``archsim sweep`` into a fresh folder, N times, with
the local executor on every core, then once with a local Dask cluster, and checks that both tables
are identical.

``--against DIR`` times the cold-start cases (``archsim run v100 resnet50``, ``archsim list chips``) in
this checkout and in another one (``git worktree add /tmp/old a4f1a47``), alternating run by run so
that both see the same load on a shared machine, and prints both medians and their ratio, and the
median CPU time (user + system) of the processes, which does not count waiting for a core.

``--batch-sweep N`` times ``archsim sweep sweeps/systolic-shape-100k.yaml`` (100,000 configurations,
the batch path) into a fresh folder N times, and prints configurations per second of the batch
path, and of both paths (``--path event``, ``--path batch``) on two 1,000-configuration sweeps, a
systolic chip's and a tensor-core GPU's (``sweeps/gpu-shape-sweep.yaml``), checking that each
sweep's two tables are identical.

``--optimize N`` times ``archsim optimize sweeps/systolic-design-space.yaml --objective
throughput_per_mm2`` (10^6 points; TPE, 1,000 trials) N times with seeds 0..N-1 and prints each
best; ``--exhaustive`` prices the whole space on the batch path, streaming (flat memory), and
prints its best throughput per mm^2, the figure the search is compared with.

``--stages`` times only the stages of one run in-process and a warm ``simulate()`` call.

With or without ``--quick``, a table of fresh processes that only start Python, import pydantic, and
import what ``archsim run`` imports (as the program imports: the cyclic collector paused, then frozen)
shows where a cold run's time goes.

``--suite N`` times the whole test suite (``python -m pytest``, as configured: in parallel on every
core) N times and prints each run's summary line.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench_design import bench_batch_sweep, bench_exhaustive, bench_optimize

ROOT = Path(__file__).resolve().parents[1]


def machine() -> str:
    """The machine the timings are taken on: CPU model, cores, load averages, Python version."""
    model = "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        lines = cpuinfo.read_text().splitlines()
        names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
        model = names[0] if names else model
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    return f"machine: {model}, {os.cpu_count()} cores, load average {load}, Python {sys.version.split()[0]}"


CLI_CASES = [
    ("v100 resnet50 infer", ["run", "v100", "resnet50"]),
    ("archsim list chips", ["list", "chips"]),
    ("v100 resnet50 train b256", ["run", "v100", "resnet50", "--mode", "train", "--batch", "256", "--json"]),
    ("v100 bert-large train s128", ["run", "v100", "bert-large", "--mode", "train", "--seq-len", "128", "--json"]),
    ("ipu bert-large infer", ["run", "ipu", "bert-large", "--json"]),
    ("tpu-v3 resnet50 infer", ["run", "tpu-v3", "resnet50", "--json"]),
    ("v100 gemm 4096x7000x4096", ["run", "v100", "gemm:4096x7000x4096", "--json"]),
    ("archsim validate", ["validate"]),
]


_CACHE = tempfile.TemporaryDirectory(prefix="archsim-bench-cache-")
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"ARCHSIM_CACHE_DIR": _CACHE.name}
"""Environment of every timed process: bytecode caches on, the library cache in a folder of the bench's own."""


def time_process(args: list[str], repeat: int, empty_cache: bool = False, module: bool = True) -> list[float]:
    """Wall seconds of ``python -m archsim.cli ARGS`` (``python ARGS`` without ``module``), one warm-up then
    ``repeat`` counted runs.

    With ``empty_cache`` each run gets a new, empty library cache folder.
    """
    command = [sys.executable, *(["-m", "archsim.cli"] if module else []), *args]
    subprocess.run(command, check=True, capture_output=True, env=CHILD_ENV)
    times = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as folder:
            env = CHILD_ENV | {"ARCHSIM_CACHE_DIR": folder} if empty_cache else CHILD_ENV
            start = time.perf_counter()
            subprocess.run(command, check=True, capture_output=True, env=env)
            times.append(time.perf_counter() - start)
    return times


START_UP = [
    ("python start-up", "pass"),
    ("+ import pydantic (BaseModel)", "from pydantic import BaseModel, Field"),
    ("+ import archsim's run command", "import archsim.commands.run"),
]
"""Where a cold ``archsim run`` spends its time: fresh processes, each importing more than the last."""

AS_THE_PROGRAM = "import gc\ngc.disable()\n{code}\ngc.freeze()"
"""How the ``archsim`` program imports (``archsim.cli._long_lived_imports``): the cyclic collector paused,
then what the imports made frozen. The start-up cases import the same way, so that they add up to it."""


def bench_start_up(repeat: int) -> None:
    """The start-up cases: the cold run row less the last of them is the run itself."""
    print(f"\nwhere a cold run's time goes (fresh process each, {repeat} runs after a warm-up)")
    print(f"{'case':<34} {'median ms':>9} {'min ms':>9} {'max ms':>9}")
    for label, code in START_UP:
        program = AS_THE_PROGRAM.format(code=code)
        print(row(label, time_process(["-c", program], repeat, module=False)), flush=True)


def bench_against(other: Path, repeat: int) -> None:
    """The cold-start cases in this checkout and in ``other`` (another checkout of archsim), run by run in
    turn, so that both see the same load; each checkout is run from its own folder (``python -m`` puts
    the working directory first on the path) with a library cache of its own.

    Besides the wall times, the processes' own CPU time (user + system): on a shared machine a process
    also waits for a core, which its wall time counts and its CPU time does not."""
    trees = {"this": ROOT, "other": other.resolve()}
    caches = {name: tempfile.TemporaryDirectory(prefix=f"archsim-bench-{name}-") for name in trees}
    print(f"cold start, this checkout ({ROOT}) and {trees['other']} in turn, {repeat} runs each after a warm-up")
    print(f"{'case':<34} {'this ms':>9} {'other ms':>9} {'this/other':>10} {'this CPU':>9} {'other CPU':>9}")
    for label, cli_args in CLI_CASES[:2]:
        times: dict[str, list[float]] = {name: [] for name in trees}
        cpu: dict[str, list[float]] = {name: [] for name in trees}
        for counted in [False] + [True] * repeat:
            for name, tree in trees.items():
                env = CHILD_ENV | {"PYTHONPATH": str(tree), "ARCHSIM_CACHE_DIR": caches[name].name}
                start = time.perf_counter()
                child = subprocess.Popen(
                    [sys.executable, "-m", "archsim.cli", *cli_args],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    cwd=tree,
                    env=env,
                )
                _, status, usage = os.wait4(child.pid, 0)
                if status != 0:
                    raise SystemExit(f"archsim {' '.join(cli_args)} failed in {tree}")
                if counted:
                    times[name].append(time.perf_counter() - start)
                    cpu[name].append(usage.ru_utime + usage.ru_stime)
        this, that = (statistics.median(times[name]) for name in trees)
        this_cpu, that_cpu = (statistics.median(cpu[name]) for name in trees)
        print(
            f"{label:<34} {1e3 * this:>9.1f} {1e3 * that:>9.1f} {this / that:>10.2f} "
            f"{1e3 * this_cpu:>9.1f} {1e3 * that_cpu:>9.1f}",
            flush=True,
        )


def time_call(function: Callable[[], object], repeat: int) -> list[float]:
    """Wall seconds of an in-process call, one warm-up then ``repeat`` counted runs."""
    function()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return times


GOLDEN_SCALESIM = Path(__file__).resolve().parent.parent / "tests" / "golden" / "scalesim"
SCALESIM_CASES = [
    # (label, config, topology): the project's own SCALE-Sim files (see tests/golden/scalesim/README.md)
    ("resnet50 32x32 os (SCALE-Sim files)", "archsim_32x32_os.cfg", "resnet50.csv"),
    ("resnet50 32x32 ws (SCALE-Sim files)", "archsim_32x32_ws.cfg", "resnet50.csv"),
    ("resnet50 32x32 is (SCALE-Sim files)", "archsim_32x32_is.cfg", "resnet50.csv"),
]
SCALESIM_MEASURED = [
    # SCALE-Sim 3.0.0 itself on resnet50.csv with archsim_32x32_os.cfg, measured once with /usr/bin/time -v
    # (command in tests/golden/scalesim/README.md; 2 shared cores). It was stopped by `timeout 1500`
    # while simulating layer 24 of 55: the figures are lower bounds, not re-run here.
    ("SCALE-Sim 3.0.0 resnet50 32x32 os", "> 1500 s wall (959 s CPU), stopped at layer 24 of 55", "> 4841"),
]


def time_process_rss(args: list[str], repeat: int) -> tuple[list[float], float]:
    """Wall seconds of ``python -m archsim.cli ARGS`` (as time_process) and the largest peak RSS in MB."""
    command = [sys.executable, "-m", "archsim.cli", *args]
    subprocess.run(command, check=True, capture_output=True, env=CHILD_ENV)
    times, peak_kb = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=CHILD_ENV)
        _, status, usage = os.wait4(child.pid, 0)
        times.append(time.perf_counter() - start)
        if status != 0:
            raise SystemExit(f"{' '.join(command)} failed")
        peak_kb = max(peak_kb, usage.ru_maxrss)  # kilobytes on Linux
    return times, peak_kb / 1024


def bench_scalesim(repeat: int) -> None:
    """SCALE-Sim-format runs (``archsim run CONFIG.cfg TOPOLOGY.csv``): wall time and peak memory."""
    print(f"\nSCALE-Sim files (fresh process each, {repeat} runs after a warm-up)")
    print(f"{'case':<34} {'median ms':>9} {'min ms':>9} {'max ms':>9} {'peak MB':>8}")
    for label, config, topology in SCALESIM_CASES:
        args = ["run", str(GOLDEN_SCALESIM / config), str(GOLDEN_SCALESIM / topology), "--json"]
        times, peak_mb = time_process_rss(args, repeat)
        print(f"{row(label, times)} {peak_mb:>8.0f}", flush=True)
    for label, time_text, peak_mb in SCALESIM_MEASURED:
        print(f"{label:<34} {time_text}; peak MB {peak_mb}   (measured once, not re-run)")


SYSTEM_CASES = [
    # a ResNet-50 training step on 1,024 chips: the symmetry shortcut's scale case (budget: 10 s, 2 GB)
    ("1024 IPUs: ipu-pod256 x4 rn50", ["run", "ipu-pod256", "resnet50", "--mode", "train", "--nodes", "4", "--json"]),
    ("1024 TPUv3: tpu-v3-pod rn50", ["run", "tpu-v3-pod", "resnet50", "--mode", "train", "--json"]),
    ("1024 H100: dgx-h100 x128 rn50", ["run", "dgx-h100", "resnet50", "--mode", "train", "--nodes", "128", "--json"]),
    ("8 V100: dgx1 rn50 b192", ["run", "dgx1", "resnet50", "--mode", "train", "--batch", "192", "--json"]),
    # GPT-3 175B on 1,024 A100: TP 8 in each DGX, PP 8 across nodes, DP 16, global batch 1536 (budget: 10 s, 2 GB)
    (
        "1024 A100: gpt3-175b tp8 pp8 dp16",
        [
            "run",
            "dgx-a100",
            "gpt3-175b",
            "--mode",
            "train",
            "--nodes",
            "128",
            "--tensor-parallel",
            "8",
            "--pipeline-stages",
            "8",
            "--batch",
            "96",
            "--microbatches",
            "96",
            "--seq-len",
            "2048",
            "--recompute",
            "--json",
        ],
    ),
]


def peak_rss_mb(args: list[str]) -> float:
    """Peak resident memory in MB of one fresh ``python -m archsim.cli ARGS`` process."""
    child = subprocess.Popen([sys.executable, "-m", "archsim.cli", *args], stdout=subprocess.DEVNULL, env=CHILD_ENV)
    _, status, usage = os.wait4(child.pid, 0)
    if status != 0:
        raise SystemExit(f"archsim {' '.join(args)} failed")
    return usage.ru_maxrss / 1024  # kilobytes on Linux


def bench_systems(repeat: int) -> None:
    """Multi-chip runs: wall time (fresh process each) and peak memory."""
    print(f"\nmulti-chip systems (fresh process each, {repeat} runs after a warm-up)")
    print(f"{'case':<34} {'median ms':>9} {'min ms':>9} {'max ms':>9} {'peak MB':>8}")
    for label, cli_args in SYSTEM_CASES:
        times = time_process(cli_args, repeat)
        print(f"{row(label, times)} {peak_rss_mb(cli_args):>8.0f}", flush=True)


NUMBA_STARTUP = """
import time
start = time.perf_counter()
import numpy as np
from archsim.kernels.fold_schedule import fold_schedule, warm_up
warm_up()
imported = time.perf_counter()
fold_schedule(10, np.ones((4, 3)), np.ones(4), (1.0, 1.0, 1.0))
print(imported - start, time.perf_counter() - imported)
"""


def bench_numba_startup(repeat: int) -> None:
    """What a process pays to use the first numba kernel: importing numba, then the first call (which
    loads the kernel from numba's on-disk cache after the very first run, and initialises LLVM)."""
    # the first run fills numba's cache
    subprocess.run([sys.executable, "-c", NUMBA_STARTUP], check=True, capture_output=True, env=CHILD_ENV)
    imports, calls = [], []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, "-c", NUMBA_STARTUP], check=True, capture_output=True, text=True, env=CHILD_ENV
        )
        first, second = (float(x) for x in out.stdout.split())
        imports.append(first)
        calls.append(second)
    print("\nnumba start-up in a fresh process (kernel cached on disk)")
    print(f"{'case':<34} {'median ms':>9} {'min ms':>9} {'max ms':>9}")
    print(row("import numpy + numba", imports))
    print(row("first kernel call", calls))


def bench_sweep(repeat: int) -> None:
    """Wall time of the acceptance sweep, local processes; then Dask, compared with the local table."""
    import pandas as pd

    spec = str(Path(__file__).resolve().parents[1] / "sweeps" / "systolic-shape-sweep.yaml")
    print(f"1,000-configuration sweep, archsim sweep --executor local, {os.cpu_count()} cores, fresh folder each")
    times = []
    with tempfile.TemporaryDirectory() as folder:
        for i in range(repeat):
            out = f"{folder}/local{i}"
            start = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "archsim.cli", "sweep", spec, "--out", out, "--no-progress"],
                check=True,
                capture_output=True,
            )
            times.append(time.perf_counter() - start)
            print(f"  run {i + 1}: {times[-1]:.1f} s", flush=True)
        print(f"median {statistics.median(times):.1f} s, min {min(times):.1f} s, max {max(times):.1f} s")
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "archsim.cli", "sweep", spec, "--out", f"{folder}/dask", "--executor", "dask"],
            check=True,
            capture_output=True,
        )
        print(f"--executor dask (local cluster, with its progress bar): {time.perf_counter() - start:.1f} s")
        local = pd.read_parquet(f"{folder}/local0/results.parquet")
        dask = pd.read_parquet(f"{folder}/dask/results.parquet")
        print("dask table identical to local:", local.equals(dask))


def bench_suite(repeat: int) -> None:
    """Wall time of the whole test suite as ``pytest`` runs it (addopts: in parallel on every core)."""
    print(f"test suite, python -m pytest from {ROOT.name}/, {repeat} run(s)")
    times = []
    for i in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True
        )
        times.append(time.perf_counter() - start)
        summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "(no output)"
        print(f"  run {i + 1}: {times[-1]:.1f} s, exit {done.returncode}: {summary}", flush=True)
    print(f"median {statistics.median(times):.1f} s, min {min(times):.1f} s, max {max(times):.1f} s")


def bench_stages(repeat: int) -> None:
    """The stages of a v100 ResNet-50 training step in-process, and a warm simulate() call."""
    header = f"{'case':<34} {'median ms':>9} {'min ms':>9} {'max ms':>9}"
    from archsim.run.replay import replay_on_target
    from archsim.run.target import resolve
    from archsim.spec.common import Precision
    from archsim.spec.library import Library
    from archsim.workloads import build_trace
    from archsim.workloads.trace import Mode

    library = Library(use_env=False)
    target = resolve("v100", library)
    print("\nstages of v100 resnet50 train b256, in-process")
    print(header)
    build = lambda: build_trace("resnet50", library, Mode.TRAIN, 256, Precision.FP16, None)  # noqa: E731
    trace = build()
    print(row("build trace", time_call(build, repeat)))
    print(row("cost + replay + result", time_call(lambda: replay_on_target(target, trace, library), repeat)))
    from archsim import simulate

    warm = lambda: simulate("v100", "resnet50", mode="train", batch=256, library=library)  # noqa: E731
    print(row("warm simulate() per run", time_call(warm, repeat)))


def row(label: str, times: list[float]) -> str:
    """One table row: median, min, max in milliseconds."""
    return f"{label:<34} {1e3 * statistics.median(times):>9.1f} {1e3 * min(times):>9.1f} {1e3 * max(times):>9.1f}"


def main() -> None:
    """Run every benchmark and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="only the cold-start cases (run and list), nothing else")
    parser.add_argument("--sweep", type=int, default=0, metavar="N", help="only the acceptance sweep, N times")
    parser.add_argument("--suite", type=int, default=0, metavar="N", help="only the test suite, N times")
    parser.add_argument(
        "--against",
        type=Path,
        metavar="DIR",
        help="only the cold-start cases, here and in another checkout DIR in turn (git worktree add DIR COMMIT)",
    )
    parser.add_argument("--batch-sweep", type=int, default=0, metavar="N", help="only the batch/event sweeps")
    parser.add_argument("--optimize", type=int, default=0, metavar="N", help="only the optimize search, N seeds")
    parser.add_argument("--exhaustive", action="store_true", help="only the exhaustive best of the search space")
    parser.add_argument("--stages", action="store_true", help="only the in-process stages and warm run")
    args = parser.parse_args()
    print(machine(), flush=True)
    if args.against is not None:
        bench_against(args.against, args.repeat)
        return
    if args.stages:
        bench_stages(args.repeat)
        return
    if args.sweep or args.suite or args.batch_sweep or args.optimize or args.exhaustive:
        if args.sweep:
            bench_sweep(args.sweep)
        if args.suite:
            bench_suite(args.suite)
        if args.batch_sweep:
            bench_batch_sweep(args.batch_sweep)
        if args.optimize:
            bench_optimize(args.optimize)
        if args.exhaustive:
            bench_exhaustive()
        return

    header = f"{'case':<34} {'median ms':>9} {'min ms':>9} {'max ms':>9}"
    print(f"whole CLI runs (fresh process each, {args.repeat} runs after a warm-up)")
    print(header)
    for label, cli_args in CLI_CASES[: 2 if args.quick else None]:
        print(row(label, time_process(cli_args, args.repeat)), flush=True)
    print(row("v100 resnet50 infer, empty cache", time_process(CLI_CASES[0][1], args.repeat, True)), flush=True)
    bench_start_up(args.repeat)
    if args.quick:
        return
    bench_systems(args.repeat)
    bench_scalesim(args.repeat)
    bench_numba_startup(args.repeat)

    bench_stages(args.repeat)


if __name__ == "__main__":
    main()
