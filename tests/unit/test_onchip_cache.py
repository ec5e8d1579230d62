"""An on-chip cache (``memory.cache``, TPU v4's CMEM): which reads it serves, and what that saves a run."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from archsim import simulate
from archsim.cli import main
from archsim.errors import UsageError
from archsim.results.records import RunResult
from archsim.spec.common import Precision
from archsim.spec.library import Library, builtin_roots
from archsim.sweep import run_sweep
from archsim.workloads.cache import cached_reads
from archsim.workloads.trace import Mode, Op, OpKind, Phase, TensorAccess, Trace

MIB = 2**20


Tensors = tuple[tuple[str, int], ...]


def access(pairs: Tensors) -> tuple[TensorAccess, ...]:
    return tuple(TensorAccess(n, b) for n, b in pairs)


def op(name: str, reads: Tensors, writes: Tensors, kind: OpKind = OpKind.ELEMENTWISE) -> Op:
    return Op(name, kind, Phase.FORWARD, 1, access(reads), access(writes))


def trace_of(*ops: Op) -> Trace:
    return Trace("t", Mode.INFER, 1, Precision.BF16, tuple(ops), 0, 0)


def cached_names(trace: Trace) -> list[list[str]]:
    return [[t.name for t in o.reads if t.cached] for o in trace.ops]


def test_what_an_op_writes_is_read_from_the_cache_until_newer_writes_evict_it() -> None:
    trace = trace_of(
        op("a", (("x", 3 * MIB),), (("t1", 4 * MIB),)),
        op("b", (("t1", 4 * MIB),), (("t2", 4 * MIB),)),
        op("c", (("t2", 4 * MIB), ("t1", 4 * MIB)), (("t3", 4 * MIB),)),
        # t1 was read after t2, so t2 is the least recently used when t3 arrives, and t1 when t4 does
        op("d", (("t3", 4 * MIB),), (("t4", 4 * MIB),)),
        op("e", (("t1", 4 * MIB), ("t2", 4 * MIB), ("t3", 4 * MIB)), ()),
    )
    marked = cached_reads(trace, 8 * MIB)
    assert cached_names(marked) == [[], ["t1"], ["t2", "t1"], ["t3"], ["t3"]]
    assert [o.cached_bytes for o in marked.ops] == [0, 4 * MIB, 8 * MIB, 4 * MIB, 4 * MIB]
    assert [o.bytes for o in marked.ops] == [o.bytes for o in trace.ops]  # the op's tensors are unchanged


def test_a_tensor_larger_than_the_cache_never_enters_and_reads_do_not_allocate() -> None:
    trace = trace_of(
        op("a", (), (("big", 9 * MIB),)),
        op("b", (("big", 9 * MIB), ("w", 1 * MIB)), (("small", 1 * MIB),)),
        op("c", (("big", 9 * MIB), ("w", 1 * MIB), ("small", 1 * MIB)), ()),
    )
    assert cached_names(cached_reads(trace, 8 * MIB)) == [[], [], ["small"]]


def test_a_communication_op_drops_the_tensor_it_rewrites() -> None:
    grad = (("g", 1 * MIB),)
    trace = trace_of(op("a", (), grad), op("b", grad, ()), op("ar", grad, grad, OpKind.COMM), op("c", grad, ()))
    assert cached_names(cached_reads(trace, 8 * MIB)) == [[], ["g"], [], []]


@pytest.fixture(scope="module")
def without_cmem(tmp_path_factory: pytest.TempPathFactory) -> Library:
    """The built-in TPU v4 described without its CMEM, as ``tpu-v4-no-cmem``."""
    data = yaml.safe_load((builtin_roots()[0] / "tpu-v4.yaml").read_text())
    del data["memory"]["cache"], data["sources"]["memory.cache.capacity"]
    data["name"], data["aliases"] = "tpu-v4-no-cmem", []
    folder = tmp_path_factory.mktemp("no-cmem")
    (folder / "tpu-v4-no-cmem.yaml").write_text(yaml.safe_dump(data))
    return Library([folder], use_env=False)


def run(library: Library, chip: str) -> RunResult:
    return simulate(chip, "resnet50", mode="train", batch=32, library=library)


def test_tpu_v4s_cmem_serves_reads_the_same_chip_would_take_from_hbm(without_cmem: Library) -> None:
    cached, bare = run(without_cmem, "tpu-v4"), run(without_cmem, "tpu-v4-no-cmem")
    assert cached.step_time_s < bare.step_time_s
    assert cached.flops == bare.flops
    # the reads it serves cost the cache's SRAM energy instead of HBM's
    assert cached.energy_breakdown_j["dram"] < bare.energy_breakdown_j["dram"]
    assert cached.energy_breakdown_j["l2"] > bare.energy_breakdown_j["l2"]
    # the CMEM is silicon: the modelled die grows by its bitcells, and its static power with it
    assert cached.area_mm2 > bare.area_mm2 and cached.static_power_w > bare.static_power_w
    by_name = {layer.name: layer for layer in bare.layers}
    for layer in cached.layers:
        # no op gets slower, and none goes below its roofline (a cached read is not compulsory traffic)
        assert layer.end_s - layer.start_s <= by_name[layer.name].end_s - by_name[layer.name].start_s + 1e-12
        assert layer.end_s - layer.start_s >= layer.roofline_s * (1 - 1e-9)
        assert layer.bytes <= by_name[layer.name].bytes


def test_a_cache_on_a_family_whose_model_reads_none_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = yaml.safe_load((builtin_roots()[0] / "h100.yaml").read_text())
    data["memory"]["cache"] = {"capacity": "50 MiB"}
    data["name"], data["aliases"] = "h100-cached", []
    (tmp_path / "h100-cached.yaml").write_text(yaml.safe_dump(data))
    assert main(["run", "--lib", str(tmp_path), "h100-cached", "resnet50"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "h100-cached.yaml" in err
    assert "memory.cache: the tensorcore family's model reads no on-chip cache (those that do: systolic" in err


def test_a_sweep_of_a_chip_with_a_cache_is_priced_on_the_event_path(tmp_path: Path) -> None:
    spec = {
        "schema_version": 1,
        "kind": "sweep",
        "name": "cmem",
        "target": "tpu-v4",
        "workloads": [{"name": "resnet50", "batch": 8}],
        "grid": {"chip.memory.main.bandwidth": ["600 GB/s", "1200 GB/s"]},
    }
    path = tmp_path / "cmem.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(UsageError, match="has an on-chip cache"):
        run_sweep(str(path), jobs=1, progress=False, path="batch")
    table = run_sweep(str(path), jobs=1, progress=False)
    assert table["error"].isna().all()
    slow, fast = table["throughput"]
    assert fast > slow


def sweep_file(tmp_path: Path, target: str, capacities: list[str]) -> str:
    spec = {
        "schema_version": 1,
        "kind": "sweep",
        "name": "cache-what-if",
        "target": target,
        "workloads": [{"name": "resnet50", "batch": 8}],
        "grid": {"chip.memory.cache.capacity": capacities},
    }
    path = tmp_path / "what-if.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def test_a_sweep_axis_gives_a_chip_without_a_cache_one_and_prices_it_on_the_event_path(tmp_path: Path) -> None:
    path = sweep_file(tmp_path, "tpu-v3", ["8 MiB", "128 MiB"])
    with pytest.raises(UsageError, match=r"axis chip\.memory\.cache\.capacity"):
        run_sweep(path, jobs=1, progress=False, path="batch")
    table = run_sweep(path, jobs=1, progress=False)
    assert table["error"].isna().all()
    without = simulate("tpu-v3", "resnet50", batch=8)
    small, large = table["throughput"]
    assert large >= small > without.throughput


def test_a_sweep_axis_giving_a_cache_to_another_family_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sweep_file(tmp_path, "h100", ["32 MiB"])
    assert main(["sweep", path, "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "chip.memory.cache.capacity=32 MiB: chip: memory.cache: the tensorcore family's model reads no" in err
