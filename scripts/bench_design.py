"""The design-space rows of ``scripts/bench.py``: the batch sweep, ``archsim optimize`` and the exhaustive best.

``python scripts/bench.py --batch-sweep N``, ``--optimize N`` and ``--exhaustive`` call these (see that
script's docstring for what each measures); they live apart to keep each script a readable size.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def bench_batch_sweep(repeat: int) -> None:
    """Configurations per second: the 100,000-configuration sweep (batch path), and both paths on the
    1,000-configuration systolic and GPU sweeps (``sweeps/systolic-shape-sweep.yaml``, ``gpu-shape-sweep.yaml``)."""
    import tempfile

    import pandas as pd

    sweeps = ROOT / "sweeps"
    print(f"sweeps, archsim sweep --executor local, {os.cpu_count()} cores, fresh folder each")
    with tempfile.TemporaryDirectory() as folder:
        times = []
        for i in range(repeat):
            start = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "archsim.cli", "sweep", str(sweeps / "systolic-shape-100k.yaml"),
                 "--out", f"{folder}/big{i}", "--no-progress"],
                check=True, capture_output=True,
            )  # fmt: skip
            times.append(time.perf_counter() - start)
            print(f"  100,000 configurations, batch path, run {i + 1}: {times[-1]:.1f} s", flush=True)
        median = statistics.median(times)
        print(f"batch path: median {median:.1f} s, {100_000 / median:,.0f} configurations/s")
        for sweep in ("systolic-shape-sweep", "gpu-shape-sweep"):
            paths = {}
            for path in ("event", "batch"):
                start = time.perf_counter()
                subprocess.run(
                    [sys.executable, "-m", "archsim.cli", "sweep", str(sweeps / f"{sweep}.yaml"),
                     "--out", f"{folder}/{sweep}-{path}", "--path", path, "--no-progress"],
                    check=True, capture_output=True,
                )  # fmt: skip
                seconds = time.perf_counter() - start
                paths[path] = pd.read_parquet(f"{folder}/{sweep}-{path}/results.parquet")
                rate = 1000 / seconds
                print(f"{sweep}, 1,000 configurations, {path} path: {seconds:.1f} s, {rate:,.0f} configurations/s")
            print(f"{sweep} tables identical (batch, event):", paths["batch"].equals(paths["event"]))


OPTIMIZE = ["--objective", "throughput_per_mm2", "--sampler", "tpe", "--trials", "1000", "--batch", "100"]


def bench_optimize(repeat: int) -> None:
    """Wall time and best design of the optimize acceptance search, one seed per run."""
    import json
    import tempfile

    spec = str(ROOT / "sweeps" / "systolic-design-space.yaml")
    print(f"archsim optimize systolic-design-space {' '.join(OPTIMIZE)}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as folder:
        for seed in range(repeat):
            start = time.perf_counter()
            command = [sys.executable, "-m", "archsim.cli", "optimize", spec, *OPTIMIZE, "--seed", str(seed)]
            subprocess.run([*command, "--out", f"{folder}/s{seed}", "--no-progress"], check=True, capture_output=True)
            seconds = time.perf_counter() - start
            best = json.loads(Path(folder, f"s{seed}", "best.json").read_text())["best"][0]["throughput_per_mm2"]
            print(f"  seed {seed}: {seconds:.1f} s, best throughput_per_mm2 {best:.6g}", flush=True)


def _best_of_chunk(arguments: tuple[object, list[object]]) -> tuple[float, str]:
    from archsim.sweep.batch import run_batch_chunk

    context, chunk = arguments
    rows = run_batch_chunk(context, chunk)  # type: ignore[arg-type]
    scored = [(r["throughput_per_mm2"], r["key"]) for r in rows if r["error"] is None]
    return max(scored, default=(0.0, ""))


def bench_exhaustive() -> None:
    """The best throughput per mm^2 of the whole 10^6-point space, priced on the batch path in chunks."""
    import multiprocessing

    from archsim.sweep.expand import Task, TaskKeys, iter_configurations, library_fingerprint
    from archsim.sweep.run import plan
    from archsim.sweep.worker import worker_library

    planned = plan(ROOT / "sweeps" / "systolic-design-space.yaml", check_variants=False)
    spec, source = planned.context.spec, planned.context.source
    keys = TaskKeys(spec, library_fingerprint(worker_library(planned.context.search_path)))
    workload = spec.workload_entries[0]

    def chunks() -> object:
        chunk: list[Task] = []
        for configuration in iter_configurations(spec, source):
            chunk.append(Task(keys.key(configuration, workload), 0, configuration, workload))
            if len(chunk) == 2000:
                yield (planned.context, chunk)
                chunk = []
        if chunk:
            yield (planned.context, chunk)

    start = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(os.cpu_count()) as pool:
        best = max(pool.imap_unordered(_best_of_chunk, chunks()))  # type: ignore[arg-type]
    print(f"exhaustive: best throughput_per_mm2 {best[0]:.6g} (row key {best[1]}), {time.perf_counter() - start:.0f} s")
