"""FP4 (issue 38 item 4): ``--precision fp4`` runs a chip's block-scaled 4-bit format (NVFP4 on B200 and
GB200, MXFP4 on MI355X), refused in one line elsewhere naming what the chip has; the block scales are
counted in every byte; the products of weights run in 4 bits and attention, norms and the KV cache
stay in fp8."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsim import simulate
from archsim.cli import main
from archsim.models import cost_model_for
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.stack import default_efficiency
from archsim.sweep.batch import batch_reason
from archsim.testing.strategies import ops
from archsim.workloads import build_trace
from archsim.workloads.decoder import DEFAULT_GEN_LEN, kv_bytes_per_token
from archsim.workloads.memory import memory_per_chip
from archsim.workloads.quantize import is_quantized
from archsim.workloads.trace import Mode, Op, Trace
from tests.unit.test_todays_chips import check_bounds, run_json

LIBRARY = Library(use_env=False)
FORMATS = {"b200": Precision.NVFP4, "gb200-nvl72": Precision.NVFP4, "mi355x": Precision.MXFP4}
"""What ``fp4`` runs as on the chips (and a system of them) that have it."""


def test_block_scaled_sizes_count_their_scales() -> None:
    nv, mx = Precision.NVFP4, Precision.MXFP4
    # NVFP4: 2 elements a byte, an E4M3 scale per 16, an FP32 scale per tensor; MXFP4: an E8M0 scale per 32
    assert nv.nbytes(16) == 8 + 1 + 4
    assert nv.nbytes(1000) == 500 + 63 + 4
    assert mx.nbytes(1000) == 500 + 32
    assert (nv.element_bytes, mx.element_bytes) == (0.5625, 0.53125)
    assert nv.storage is mx.storage is Precision.FP8
    assert Precision.FP8.storage is Precision.FP8 and Precision.FP8.block_scaling is None
    with pytest.raises(ValueError, match="resolve it to nvfp4 or mxfp4"):
        Precision.FP4.nbytes(16)


@given(fmt=st.sampled_from([Precision.NVFP4, Precision.MXFP4]), nbytes=st.integers(0, 10**7))
@settings(max_examples=200)
def test_elements_in_is_the_most_that_fit(fmt: Precision, nbytes: int) -> None:
    elements = fmt.elements_in(nbytes)
    assert fmt.nbytes(elements) <= nbytes
    assert fmt.nbytes(elements + 1) > nbytes


@pytest.mark.parametrize(("chip", "has"), [("h100", "int8"), ("a100-80gb", "int4"), ("tpu-v6e", "int8")])
def test_fp4_is_refused_in_one_line_naming_the_precisions(
    capsys: pytest.CaptureFixture[str], chip: str, has: str
) -> None:
    code = main(["run", chip, "llama2-7b", "--mode", "prefill", "--precision", "fp4"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert f"{chip}: --precision: fp4 is not supported (supported: " in err
    assert has in err


def test_a_format_the_chip_lacks_is_refused_naming_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "mi355x", "llama2-7b", "--mode", "prefill", "--precision", "nvfp4"]) == 2
    assert "nvfp4 is not supported (supported: fp32, fp16, bf16, fp8, int8, mxfp4)" in capsys.readouterr().err


@pytest.mark.parametrize("target", sorted(FORMATS))
def test_fp4_runs_the_chips_own_format(capsys: pytest.CaptureFixture[str], target: str) -> None:
    result = run_json(capsys, "run", target, "llama2-7b", "--mode", "infer", "--batch", "4", "--precision", "fp4")
    assert result["precision"] == FORMATS[target].value
    check_bounds(result)


def test_a_four_bit_product_runs_faster_than_fp8_never_past_twice(capsys: pytest.CaptureFixture[str]) -> None:
    gemm = "gemm:8192x8192x8192"
    fp4 = run_json(capsys, "run", "b200", gemm, "--precision", "fp4")
    fp8 = run_json(capsys, "run", "b200", gemm, "--precision", "fp8")
    check_bounds(fp4)
    ratio = float(str(fp8["step_time_s"])) / float(str(fp4["step_time_s"]))
    assert 1.0 < ratio <= 2.0
    flops, seconds, utilization = (float(str(fp4[k])) for k in ("flops", "step_time_s", "utilization"))
    assert flops / seconds / utilization == pytest.approx(LIBRARY.chip("b200").peak_flops(Precision.NVFP4))


def traces(fmt: Precision, workload: str = "llama2-7b", mode: Mode = Mode.PREFILL) -> tuple[Trace, Trace]:
    """The same step at ``fmt`` and at fp8."""
    return (
        build_trace(workload, LIBRARY, mode, 2, fmt, 64),
        build_trace(workload, LIBRARY, mode, 2, Precision.FP8, 64),
    )


@pytest.mark.parametrize("fmt", [Precision.NVFP4, Precision.MXFP4])
def test_only_the_products_of_weights_are_four_bit(fmt: Precision) -> None:
    quantized, fp8 = traces(fmt)
    assert quantized.flops == fp8.flops
    names = set()
    for q, e in zip(quantized.ops, fp8.ops, strict=True):
        assert (q.name, q.kind) == (e.name, e.kind)
        assert is_quantized(q) == is_quantized(e)
        if is_quantized(q):  # its activation and its weight in the format, scales included
            names.add(q.name.split(".")[-1])
            for t4, t8 in zip(q.reads[:2], e.reads[:2], strict=True):
                assert t4.bytes == fmt.nbytes(t8.bytes)  # fp8 holds one element a byte
    # the projections of attention and the feed-forward, and the head: what TensorRT-LLM runs in NVFP4
    assert names == {"qkv", "o_proj", "gate_up", "down", "lm_head"}
    for q, e in zip(quantized.ops, fp8.ops, strict=True):
        if q.name.endswith((".scores", ".context")):  # attention's own products stay fp8, operands and all
            assert not is_quantized(q)
            assert [t.bytes for t in q.reads] == [t.bytes for t in e.reads]
        if "norm" in q.name:  # a norm reads the fp8 residual; it writes the quantized input of the product
            assert q.reads[0].bytes == e.reads[0].bytes


def test_memory_counts_the_scales_and_keeps_the_cache_in_fp8() -> None:
    nv, fp8 = traces(Precision.NVFP4, mode=Mode.DECODE)
    weights = {t.name: t.bytes for op in fp8.ops if is_quantized(op) for t in op.reads[1:2]}
    quantized_weights = sum(Precision.NVFP4.nbytes(size) for size in weights.values())
    split, split8 = memory_per_chip(nv), memory_per_chip(fp8)
    assert split.weights == split8.weights - sum(weights.values()) + quantized_weights
    # half a byte per element is not all: an E4M3 scale per 16 and an FP32 scale per weight tensor
    assert quantized_weights == sum(size // 2 + -(-size // 16) + 4 for size in weights.values())
    assert split.kv_cache == split8.kv_cache > 0
    model = LIBRARY.model("llama2-7b").decoder
    assert model is not None
    # 2 sequences of 64 prompt and 128 generated tokens, at fp8
    assert split.kv_cache == 2 * (64 + DEFAULT_GEN_LEN) * kv_bytes_per_token(model, Precision.FP8)
    assert nv.memory_bytes == split.total < fp8.memory_bytes


def test_attention_is_priced_at_fp8_and_projections_at_fp4() -> None:
    chip = LIBRARY.chip("b200")
    nv, fp8 = traces(Precision.NVFP4)
    efficiency = default_efficiency(LIBRARY, chip, Precision.NVFP4)
    mixed = cost_model_for(chip, efficiency, Precision.NVFP4, nv.memory_bytes)
    eight = cost_model_for(chip, efficiency, Precision.FP8, fp8.memory_bytes)
    for q, e in zip(nv.ops, fp8.ops, strict=True):
        if q.name.endswith(".scores"):
            assert mixed.cost(q) == eight.cost(e)
        if q.name.endswith(".qkv"):
            assert mixed.cost(q).time_s < eight.cost(e).time_s
            assert mixed.cost(q).dram_bytes < eight.cost(e).dram_bytes


def test_training_in_four_bits_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "b200", "resnet50", "--mode", "train", "--precision", "fp4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "nvfp4 is modelled for inference" in err and "train at fp8" in err


def test_fp4_without_a_chip_is_refused_and_a_named_format_builds() -> None:
    from archsim.errors import UsageError

    with pytest.raises(UsageError, match="without a chip, name it"):
        build_trace("llama2-7b", LIBRARY, Mode.PREFILL, 1, Precision.FP4, 16)
    assert build_trace("llama2-7b", LIBRARY, Mode.PREFILL, 1, Precision.MXFP4, 16).precision is Precision.MXFP4


def test_the_api_and_a_sweep_take_fp4() -> None:
    run = simulate("mi355x", "llama2-7b", mode="prefill", batch=2, precision="fp4", library=LIBRARY)
    assert run.precision == "mxfp4"
    from archsim.spec.sweep import SweepSpec

    spec = SweepSpec.model_validate(
        {
            "schema_version": 1,
            "kind": "sweep",
            "name": "fp4",
            "target": ["b200"],
            "workloads": ["resnet50"],
            "settings": {"precision": "fp4"},
            "grid": {"chip.memory.main.bandwidth": ["4 TB/s", "8 TB/s"]},
        }
    )
    assert batch_reason(spec, LIBRARY) == "a 4-bit block-scaled run (two matrix precisions per step)"


def test_llama2_70b_generates_faster_in_fp4_on_a_dgx_b200(capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's acceptance run: the MLPerf Llama-2-70B shape on 8 B200 under TensorRT-LLM."""
    args = ["run", "dgx-b200", "llama2-70b", "--mode", "generate", "--batch", "256", "--prompt-len", "222"]
    args += ["--gen-len", "273", "--software", "tensorrt-llm", "--precision"]
    fp4 = run_json(capsys, *args, "fp4")
    fp8 = run_json(capsys, *args, "fp8")
    assert fp4["precision"] == "nvfp4"
    assert 0.0 < float(str(fp4["utilization"])) <= 1.0  # of the NVFP4 peak
    assert int(str(fp4["memory_bytes"])) <= int(str(fp4["memory_capacity_bytes"]))
    assert float(str(fp4["tokens_per_s"])) > float(str(fp8["tokens_per_s"]))
    four, eight = (cast(dict[str, int], r["memory_per_chip"]) for r in (fp4, fp8))
    assert 0.5 < four["weights"] / eight["weights"] < 0.6  # 0.5625 bytes per weight against 1
    assert four["kv_cache"] == eight["kv_cache"]


def test_a_trace_file_keeps_its_format(tmp_path: Path) -> None:
    """A trace written at nvfp4 is read back as stored (not quantized twice); asked at fp8 it is refused."""
    from archsim.errors import UsageError
    from archsim.workloads import write_trace

    built = build_trace("gemm:256x256x256", LIBRARY, Mode.INFER, None, Precision.NVFP4, None)
    path = tmp_path / "nvfp4.yaml"
    write_trace(built, path)
    again = build_trace(str(path), LIBRARY, Mode.INFER, None, Precision.NVFP4, None)
    assert [t.bytes for op in again.ops for t in op.reads] == [t.bytes for op in built.ops for t in op.reads]
    assert again.memory_bytes == built.memory_bytes and again.precision is Precision.NVFP4
    with pytest.raises(UsageError, match="built for nvfp4, not fp8"):
        build_trace(str(path), LIBRARY, Mode.INFER, None, Precision.FP8, None)


def test_an_onnx_model_imports_at_a_format(tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    from archsim.errors import UsageError
    from archsim.workloads.onnx_import import import_onnx
    from tests.onnx_models import save, small_cnn_model

    path = save(small_cnn_model(), tmp_path / "cnn.onnx")
    nv = import_onnx(path, Mode.INFER, 2, Precision.NVFP4)
    fp8 = import_onnx(path, Mode.INFER, 2, Precision.FP8)
    assert nv.precision is Precision.NVFP4 and any(is_quantized(op) for op in nv.ops)
    for q, e in zip(nv.ops, fp8.ops, strict=True):
        if is_quantized(q):
            assert q.reads[1].bytes == Precision.NVFP4.nbytes(e.reads[1].bytes)
    with pytest.raises(UsageError, match="without a chip, name it"):
        import_onnx(path, Mode.INFER, 2, Precision.FP4)


@settings(max_examples=25, deadline=None)
@given(
    chip_format=st.sampled_from([("b200", Precision.NVFP4), ("mi355x", Precision.MXFP4)]),
    op=ops(Precision.NVFP4),
)
def test_no_op_of_a_four_bit_run_beats_its_roofline_or_the_peak(chip_format: tuple[str, Precision], op: Op) -> None:
    """Products of weights at the format's peak, everything else at fp8's: never faster than either allows."""
    name, fmt = chip_format
    chip = LIBRARY.chip(name)
    cost = cost_model_for(chip, default_efficiency(LIBRARY, chip, fmt), fmt, 0).cost(op)
    assert cost.time_s >= cost.roofline_s > 0
    if op.gemm is not None:
        peak = chip.peak_flops(fmt if is_quantized(op) else Precision.FP8)
        assert cost.time_s >= op.flops / peak * (1 - 1e-12)
