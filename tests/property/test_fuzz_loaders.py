"""Fuzzing every loader: a mutated description is either accepted or refused with an ArchsimError, never else.

Each kind of input -- the library's chips, families, memories, links, models, systems and validation
tables, trace files, baseline files, SCALE-Sim configurations and topologies, sweep descriptions,
ONNX models and Chakra execution traces -- starts from its valid files, is mutated (values replaced,
scaled by up to 10^30, deleted or added; text cut, duplicated or salted with YAML tags, anchors,
brackets, NULs and huge numbers; binary files cut, with bytes flipped, inserted or duplicated) and
loaded. A description the loader accepts is then run on a small workload (a sweep is expanded, not
run), so that what passes the loader also passes the cost models. :data:`EXAMPLES` mutated inputs per
kind; the only exception allowed is :class:`~archsim.errors.ArchsimError`, with a one-line message.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archsim import simulate
from archsim.api import Target, run_trace
from archsim.baseline import record
from archsim.baseline.fileio import dump_baseline, read_baseline
from archsim.baseline.runs import parse_run
from archsim.errors import ArchsimError, UsageError
from archsim.results.scalesim import run_scalesim
from archsim.spec.common import Precision
from archsim.spec.family import FamilySpec
from archsim.spec.library import Library, builtin_roots
from archsim.spec.scalesim import read_config, read_topology
from archsim.sweep import load_sweep
from archsim.sweep.expand import configurations, variant
from archsim.sweep.worker import worker_library
from archsim.testing.strategies import mutated, mutated_bytes, mutated_text
from archsim.workloads import build_trace, read_trace
from archsim.workloads.chakra import chakra_bytes, read_chakra
from archsim.workloads.trace import Mode
from archsim.workloads.traceio import dump_trace

LIBRARY = Library(use_env=False)
DUMPER: type = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
EXAMPLES = 210
"""Mutated inputs per kind; fourteen kinds make 2,940."""
SCALESIM = next(r for r in builtin_roots() if r.name == "chips").parent / "tests" / "golden" / "scalesim"
SWEEPS = next(r for r in builtin_roots() if r.name == "sweeps")
SWEEP_VALUES = 3
"""A mutated sweep is expanded at most this many values per axis (the full count is checked by its loader)."""
SWEEP_VARIANTS = 2
"""Configurations of a mutated sweep whose chip or system variants are built and validated."""
MAX_OPS_RUN = 2_000
"""Accepted traces up to this many ops are also replayed (bigger ones only loaded, to keep the test fast)."""
MAX_CHIPS_RUN = 256
"""Accepted systems up to this many chips are also simulated."""
_names = itertools.count()


def _run_chip(path: Path) -> None:
    LIBRARY.chip(str(path))
    simulate(str(path), "gemm:64x64x64", library=LIBRARY)


def _run_family(path: Path) -> None:
    spec: FamilySpec = LIBRARY.spec(LIBRARY.find(["family"], str(path)))
    chip = LIBRARY.chip({"tensorcore": "v100", "ipu": "gc200", "cube": "ascend910"}.get(spec.name, "tpu-v3"))
    trace = build_trace("gemm:256x256x256", LIBRARY, Mode.TRAIN, None, chip.default_precision, None)
    run_trace(Target(chip.name, chip), trace, LIBRARY, family_efficiency=spec.efficiency)


def _run_model(path: Path) -> None:
    trace = build_trace(str(path), LIBRARY, Mode.INFER, 1, Precision.FP16, None)
    if len(trace.ops) <= MAX_OPS_RUN:
        run_trace(Target("v100", LIBRARY.chip("v100")), trace, LIBRARY)


def _run_system(path: Path) -> None:
    system = LIBRARY.system(str(path))
    if system.num_chips <= MAX_CHIPS_RUN:
        simulate(str(path), "gemm:256x256x256", mode="train", library=LIBRARY)


def _run_trace(path: Path) -> None:
    trace = read_trace(path)
    if len(trace.ops) <= MAX_OPS_RUN:
        run_trace(Target("v100", LIBRARY.chip("v100")), trace, LIBRARY)


def _run_config(path: Path) -> None:
    read_config(path)
    topology = path.with_name("topology.csv")
    topology.write_text("Layer, M, N, K,\ng1, 64, 32, 16,\n")
    run_scalesim(str(path), str(topology))


def _run_topology(path: Path) -> None:
    layers, _ = read_topology(path)
    if len(layers) <= MAX_OPS_RUN:
        run_scalesim(str(SCALESIM / "archsim_32x32_ws.cfg"), str(path))


def _run_sweep(path: Path) -> None:
    spec = load_sweep(path)
    found = configurations(spec.reduced(SWEEP_VALUES), str(path))
    library = worker_library(())
    for configuration in found[:SWEEP_VARIANTS]:
        variant(library, spec, str(path), configuration)


def _run_onnx(path: Path) -> None:
    try:
        trace = build_trace(str(path), LIBRARY, Mode.TRAIN, 2, Precision.FP16, 8)
    except UsageError:  # a model without a symbolic sequence dimension takes no --seq-len
        trace = build_trace(str(path), LIBRARY, Mode.TRAIN, 2, Precision.FP16, None)
    if len(trace.ops) <= MAX_OPS_RUN:
        run_trace(Target("v100", LIBRARY.chip("v100")), trace, LIBRARY)


def _run_chakra(path: Path) -> None:
    trace = read_chakra(path)
    if len(trace.ops) > MAX_OPS_RUN:
        return
    if trace.has_comm:
        simulate("dgx-a100", str(path), library=LIBRARY)
    else:
        run_trace(Target("v100", LIBRARY.chip("v100")), trace, LIBRARY)


def _library_seeds(kind: str) -> list[str]:
    return [entry.path.read_text() for entry in LIBRARY.entries(kind)]


def _trace_seeds() -> list[str]:
    gemm = build_trace("gemm:64x32x16", LIBRARY, Mode.TRAIN, None, Precision.FP16, None)
    conv = build_trace("conv:2,8,16,16,8,3,3", LIBRARY, Mode.TRAIN, None, Precision.FP16, None)
    return [dump_trace(gemm), dump_trace(conv)]


def _validation_seeds() -> list[str]:
    """The validation tables, cut to their first three rows (mutating a long table is slow, not harder)."""
    seeds = []
    for entry in LIBRARY.entries("validation"):
        data = yaml.safe_load(entry.path.read_text())
        data["rows"] = data["rows"][:3]
        seeds.append(yaml.safe_dump(data, sort_keys=False))
    return seeds


def _baseline_seeds() -> list[str]:
    runs = [parse_run("v100:gemm:64x64x64"), parse_run("tpu-v3:gemm:32x32x32:mode=train")]
    return [dump_baseline(record(runs, LIBRARY, keep_errors=False))]


def _scalesim_seeds(suffix: str) -> list[str]:
    return [path.read_text() for path in sorted(SCALESIM.glob(f"*{suffix}"))][:3]


def _onnx_seeds() -> list[bytes]:
    """A one-layer BERT (symbolic batch and sequence, external weights absent) and a small CNN."""
    pytest.importorskip("onnx")
    from tests.onnx_models import bert_base_model, small_cnn_model

    return [bert_base_model(layers=1).SerializeToString(), small_cnn_model().SerializeToString()]


def _chakra_seeds() -> list[bytes]:
    """A training trace written by archsim, and a foreign one (Chakra's schema) with an all-reduce."""
    pytest.importorskip("google.protobuf")
    from tests.chakra_official import encode, messages

    gemm = build_trace("gemm:64x32x16", LIBRARY, Mode.TRAIN, None, Precision.FP16, None)
    m = messages()
    mm = m["Node"](id=1, name="aten::mm", type=4)
    mm.inputs.shapes = "[[64, 32], [32, 16]]"
    mm.attr.add(name="num_ops").int64_val = 2 * 64 * 32 * 16
    reduce = m["Node"](id=2, name="nccl:all_reduce", type=7, data_deps=[1])
    reduce.attr.add(name="comm_type").int64_val = 0
    reduce.attr.add(name="comm_size").int64_val = 4096
    add = m["Node"](id=3, name="aten::add", type=4, data_deps=[2])
    add.attr.add(name="num_ops").int64_val = 1024
    add.attr.add(name="tensor_size").uint64_val = 8192
    return [chakra_bytes(gemm), encode(m["GlobalMetadata"](version="0.0.4"), mm, reduce, add)]


# kind -> (file suffix, seed texts (or bytes), loader, whether the text is YAML)
KINDS: dict[str, tuple[str, Callable[[], Sequence[str | bytes]], Callable[[Path], None], bool]] = {
    "chip": (".yaml", lambda: _library_seeds("chip"), _run_chip, True),
    "family": (".yaml", lambda: _library_seeds("family"), _run_family, True),
    "memory": (".yaml", lambda: _library_seeds("memory"), lambda p: LIBRARY.memory(str(p)), True),
    "link": (".yaml", lambda: _library_seeds("link"), lambda p: LIBRARY.link(str(p)), True),
    "model": (".yaml", lambda: _library_seeds("model"), _run_model, True),
    "system": (".yaml", lambda: _library_seeds("system"), _run_system, True),
    "validation": (".yaml", _validation_seeds, lambda p: LIBRARY.validation(str(p)), True),
    "trace": (".yaml", _trace_seeds, _run_trace, True),
    "baseline": (".tsv", _baseline_seeds, read_baseline, False),
    "scalesim": (".cfg", lambda: _scalesim_seeds(".cfg"), _run_config, False),
    "topology": (
        ".csv",
        lambda: ["Layer, M, N, K,\ng1, 64, 32, 16,\ng2, 8, 8, 8,\n", *_scalesim_seeds(".csv")],
        _run_topology,
        False,
    ),
    "sweep": (".yaml", lambda: [p.read_text() for p in sorted(SWEEPS.glob("*.yaml"))], _run_sweep, True),
    "onnx": (".onnx", _onnx_seeds, _run_onnx, False),
    "chakra": (".et", _chakra_seeds, _run_chakra, False),
}


def test_at_least_2000_mutated_inputs() -> None:
    assert EXAMPLES * (len(KINDS) - 1) >= 2000


def _load(kind: str, text: str | bytes, folder: Path) -> None:
    suffix, _, loader, _ = KINDS[kind]
    path = folder / f"{kind}{next(_names)}{suffix}"  # a new name: the library caches specs by path
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
    message = ""
    try:
        loader(path)
    except ArchsimError as err:
        message = err.line()
    finally:
        path.unlink()
    assert "\n" not in message, message


@pytest.mark.parametrize("kind", list(KINDS))
def test_mutated_inputs_load_or_raise_archsim_errors(kind: str, tmp_path: Path) -> None:
    _, seeds, _, is_yaml = KINDS[kind]
    texts = seeds()
    assert texts, f"no seed for {kind}"
    for text in texts[:2]:
        _load(kind, text, tmp_path)  # the seeds themselves load
    ran = 0

    datas = [yaml.safe_load(text) for text in texts] if is_yaml else []

    @st.composite
    def inputs(draw: st.DrawFn) -> str | bytes:
        seed = draw(st.sampled_from(texts))
        if isinstance(seed, bytes):
            return draw(mutated_bytes(seed))
        if datas and draw(st.booleans()):
            data = draw(mutated(draw(st.sampled_from(datas))))
            return yaml.dump(data, Dumper=DUMPER, allow_unicode=True, sort_keys=False)
        return draw(mutated_text(seed))

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(text=inputs())
    def one(text: str | bytes) -> None:
        nonlocal ran
        ran += 1
        _load(kind, text, tmp_path)

    one()
    assert ran >= EXAMPLES
