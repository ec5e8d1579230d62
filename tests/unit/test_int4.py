"""INT4 (issue 18): half-byte elements through tensor sizes, memory, traffic and collectives; the
chips that publish an INT4 peak run it from the CLI, the API and a sweep's precision axis, every
other chip refuses it in one line."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml
from hypothesis import given, settings

from archsim import simulate
from archsim.cli import main
from archsim.models import cost_model_for
from archsim.models.energy import chip_energy
from archsim.plan import state_bytes_per_parameter
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.stack import default_efficiency
from archsim.sweep import run_sweep
from archsim.testing.strategies import ops
from archsim.workloads import build_trace
from archsim.workloads.decoder import kv_bytes_per_token
from archsim.workloads.graph import GraphBuilder
from archsim.workloads.options import TraceOptions
from archsim.workloads.trace import Mode, Op, Role
from tests.unit.test_todays_chips import check_bounds, run_json

INT4_CHIPS = {"a100-80gb": 1248e12, "a100-40gb": 1248e12, "mi250x": 383e12}
"""The chips with a published INT4 peak (TOPS, dense)."""
LIBRARY = Library(use_env=False)


def test_element_sizes_are_exact_for_half_bytes() -> None:
    # the 4-bit floats after int4: fp4 (the request a chip resolves) and its two block-scaled formats
    assert [p.bits for p in Precision] == [32, 32, 16, 16, 8, 8, 4, 4, 4, 4]
    assert Precision.INT4.nbytes(7) == 4  # ceil(7 / 2)
    assert Precision.INT4.nbytes(8) == 4
    assert Precision.INT4.elements_in(4) == 8
    assert Precision.INT4.element_bytes == 0.5
    for precision, size in zip(Precision, (4, 4, 2, 2, 1, 1), strict=False):
        assert precision.nbytes(1001) == 1001 * size
        assert precision.elements_in(1001 * size) == 1001
    assert GraphBuilder("g", Precision.INT4).act("x", 7).bytes == 4


def test_int4_tensors_are_half_the_int8_ones(library: Library) -> None:
    int8 = build_trace("resnet50", library, Mode.INFER, 8, Precision.INT8, None)
    int4 = build_trace("resnet50", library, Mode.INFER, 8, Precision.INT4, None)
    assert int4.flops == int8.flops
    for a, b in zip(int8.ops, int4.ops, strict=True):
        for t8, t4 in zip((*a.reads, *a.writes), (*b.reads, *b.writes), strict=True):
            # weights and activations at the run's precision; norm statistics stay fp32
            expected = -(-t8.bytes // 2) if t8.role in (Role.WEIGHT, Role.ACTIVATION) else t8.bytes
            assert t4.bytes == expected, (a.name, t8.name)
    model = library.model("llama2-7b").decoder
    assert model is not None
    assert 2 * kv_bytes_per_token(model, Precision.INT4) == kv_bytes_per_token(model, Precision.INT8)


def test_collectives_move_half_bytes(library: Library) -> None:
    """Tensor-parallel all-reduces of activations and data-parallel gradient all-reduces."""

    def comm_bytes(precision: Precision) -> list[int]:
        options = TraceOptions(tensor_parallel=2)
        trace = build_trace("llama2-7b", library, Mode.PREFILL, 2, precision, 64, options)
        return [op.comm.bytes for op in trace.ops if op.comm is not None]

    int8, int4 = comm_bytes(Precision.INT8), comm_bytes(Precision.INT4)
    assert int8 and [2 * b for b in int4] == int8
    gradients = {
        p: sum(c.bytes for c in simulate("dgx-a100", "resnet50", mode="train", batch=4, precision=p).collectives)
        for p in ("int8", "int4")
    }
    assert gradients["int8"] > 0
    assert 2 * gradients["int4"] == gradients["int8"]


@pytest.mark.parametrize("chip", sorted(INT4_CHIPS))
def test_int4_runs_at_its_own_peak(capsys: pytest.CaptureFixture[str], chip: str) -> None:
    int4 = run_json(capsys, "run", chip, "resnet50", "--mode", "infer", "--precision", "int4")
    int8 = run_json(capsys, "run", chip, "resnet50", "--mode", "infer", "--precision", "int8")
    assert int4["precision"] == "int4"
    check_bounds(int4)
    flops, seconds, utilization = (float(str(int4[k])) for k in ("flops", "step_time_s", "utilization"))
    assert flops / seconds / utilization == pytest.approx(INT4_CHIPS[chip], rel=0.01)  # utilization of the int4 peak
    # the same work in half the bytes at a matrix rate at least int8's: never slower
    assert int4["flops"] == int8["flops"]
    assert float(str(int4["step_time_s"])) <= float(str(int8["step_time_s"]))
    split4, split8 = int4["memory_per_chip"], int8["memory_per_chip"]
    assert isinstance(split4, dict) and isinstance(split8, dict)
    assert split4["weights"] < split8["weights"]
    assert split4["activations"] * 2 == pytest.approx(split8["activations"], rel=1e-3)


@pytest.mark.parametrize("chip", sorted(INT4_CHIPS))
@settings(max_examples=25, deadline=None)
@given(op=ops(Precision.INT4))
def test_int4_ops_are_never_below_their_roofline(chip: str, op: Op) -> None:
    spec = LIBRARY.chip(chip)
    cost = cost_model_for(spec, default_efficiency(LIBRARY, spec), Precision.INT4, 0).cost(op)
    assert cost.time_s >= cost.roofline_s > 0
    if op.gemm is not None:
        assert cost.time_s >= op.flops / spec.peak[Precision.INT4] * (1 - 1e-12)


def test_a100_int4_doubles_the_int8_rate_on_a_compute_bound_product(capsys: pytest.CaptureFixture[str]) -> None:
    gemm = "gemm:8192x8192x8192"
    int4 = run_json(capsys, "run", "a100-80gb", gemm, "--precision", "int4")
    int8 = run_json(capsys, "run", "a100-80gb", gemm, "--precision", "int8")
    check_bounds(int4)
    ratio = float(str(int8["step_time_s"])) / float(str(int4["step_time_s"]))
    assert 1.0 < ratio <= 2.0


def test_api_and_decoder_generation_at_int4(library: Library) -> None:
    common = {"mode": "generate", "batch": 8, "prompt_len": 128, "gen_len": 16, "library": library}
    int4 = simulate("a100-80gb", "llama2-7b", precision="int4", **common)
    int8 = simulate("a100-80gb", "llama2-7b", precision="int8", **common)
    assert int4.precision == "int4"
    assert int4.kv_cache_bytes is not None and int8.kv_cache_bytes is not None
    assert 2 * int4.kv_cache_bytes == int8.kv_cache_bytes
    assert int4.max_batch is not None and int8.max_batch is not None and int4.max_batch > int8.max_batch
    assert int4.output_tokens_per_s is not None and int8.output_tokens_per_s is not None
    assert int4.output_tokens_per_s >= int8.output_tokens_per_s


def test_training_keeps_fp32_master_weights() -> None:
    assert state_bytes_per_parameter(Precision.INT4, 8) == (0.5, 0.5, 12)
    assert state_bytes_per_parameter(Precision.INT8, 8) == (1.0, 1.0, 12)


def test_int4_mac_energy_is_below_int8(library: Library) -> None:
    chip, tech = library.chip("a100-80gb"), library.energy("cmos")
    int4 = chip_energy(chip, tech, Precision.INT4, 0.0)
    int8 = chip_energy(chip, tech, Precision.INT8, 0.0)
    assert int4.mac_j < int8.mac_j
    assert int4.register_mac_j < int8.register_mac_j


@pytest.mark.parametrize("chip", ["v100", "h100", "mi300x", "tpu-v5p", "bow", "ascend910", "gaudi2"])
def test_chips_without_int4_refuse_it_in_one_line(capsys: pytest.CaptureFixture[str], chip: str) -> None:
    code = main(["run", chip, "resnet50", "--mode", "infer", "--precision", "int4"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert err.startswith("archsim: error: ")
    assert "int4 is not supported (supported: " in err


def test_a_sweep_has_a_precision_axis_with_int4(tmp_path: Path) -> None:
    spec = tmp_path / "int4.yaml"
    data = {
        "schema_version": 1,
        "kind": "sweep",
        "name": "int4-sweep",
        "target": "a100-80gb",
        "workloads": ["gemm:4096x4096x4096"],
        "grid": {"run.precision": ["int8", "int4"]},
    }
    spec.write_text(yaml.safe_dump(data))
    table = run_sweep(str(spec), jobs=1, progress=False).set_index("run.precision")
    assert table["error"].isna().all()
    assert table.loc["int4", "peak_flops"] == 2 * table.loc["int8", "peak_flops"]
    assert table.loc["int4", "step_time_s"] < table.loc["int8", "step_time_s"]
    other = tmp_path / "int4-refused.yaml"
    other.write_text(yaml.safe_dump({**data, "name": "int4-refused", "target": "h100"}))
    refused = run_sweep(str(other), jobs=1, progress=False).set_index("run.precision")
    assert pd.isna(refused.loc["int8", "error"])
    assert "int4 is not supported" in refused.loc["int4", "error"]


def test_compare_takes_int4_and_refuses_a_chip_without_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "a100-40gb", "a100-80gb", "resnet50", "--precision", "int4"]) == 0
    assert "a100-80gb" in capsys.readouterr().out
    assert main(["compare", "a100-80gb", "h100", "resnet50", "--precision", "int4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "h100: --precision: int4 is not supported" in err
