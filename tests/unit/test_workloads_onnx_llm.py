"""LLM idioms through ONNX: the torch modules of :mod:`tests.llm_modules` exported by ``torch.onnx.export``
(the dynamo exporter, offline; it needs ``onnxscript``) import with the built-in decoder's matrix FLOPs
and total FLOPs within 1%, and run from the command line.

Skipped without PyTorch, ONNX or onnxscript unless ``ARCHSIM_REQUIRE_TORCH=1``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from archsim.cli import main
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.workloads import build_trace
from archsim.workloads.onnx_import import import_onnx
from archsim.workloads.options import TraceOptions
from archsim.workloads.trace import Mode, OpKind, Trace
from tests.llm_configs import Config, decoder_yaml, skip_without

# the exporter needs onnxscript; CI installs both with the test extras (ARCHSIM_REQUIRE_TORCH=1): never skipped there
skip_without("torch", "onnxscript", "onnx")

BATCH, SEQ = 2, 32
GPT2 = Config()
GPT2_SDPA = Config(sdpa=True)
LLAMA_SDPA = Config(llama=True, kv_heads=2, sdpa=True)
MOE = Config(llama=True, kv_heads=2, experts=4)


def export(cfg: Config, path: Path, dynamic: bool, past: int = 0, opset: int | None = None) -> Path:
    """``cfg``'s module as ONNX; ``dynamic``: batch and sequence symbolic (bound at import); ``past``:
    a one-token step with a KV cache of that many tokens; ``opset`` 23 writes Attention and
    RMSNormalization nodes."""
    import onnxscript  # noqa: F401 - the exporter's, named here so that its absence fails plainly
    import torch

    from tests.llm_modules import Decoder, past_cache

    module = Decoder(cfg).eval()
    with torch.no_grad():  # distinct values, or the exporter shares equal initializers (norm gains of 1)
        for param in module.parameters():
            param.normal_()
    inputs = (
        (torch.zeros(BATCH, 1, dtype=torch.long), past_cache(cfg, BATCH, past))
        if past
        else (torch.zeros(BATCH, SEQ, dtype=torch.long),)
    )
    shapes = {"ids": {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", max=cfg.max_position)}}
    torch.onnx.export(
        module, inputs, dynamo=True, dynamic_shapes=shapes if dynamic else None, opset_version=opset
    ).save(str(path))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("onnx-llm")
    return {
        "gpt2": export(GPT2, root / "gpt2.onnx", dynamic=True),
        "llama": export(LLAMA_SDPA, root / "llama.onnx", dynamic=True),
        "moe": export(MOE, root / "moe.onnx", dynamic=False),
    }


def total(trace: Trace) -> int:
    return sum(op.flops for op in trace.ops)


def matrix(trace: Trace) -> int:
    return sum(op.flops for op in trace.ops if op.kind.is_matrix)


@pytest.mark.parametrize(
    ("key", "cfg", "mode"),
    [("gpt2", GPT2, Mode.INFER), ("gpt2", GPT2, Mode.TRAIN), ("llama", LLAMA_SDPA, Mode.INFER),
     ("moe", MOE, Mode.INFER)],
    ids=["gpt2-infer", "gpt2-train", "llama-sdpa", "moe"],
)  # fmt: skip
def test_exported_decoders_match_the_builtin(
    tmp_path: Path, files: dict[str, Path], key: str, cfg: Config, mode: Mode
) -> None:
    name = decoder_yaml(cfg, tmp_path, "onnx-twin")
    ref = build_trace(name, Library([tmp_path]), mode, BATCH, Precision.FP16, SEQ)
    trace = import_onnx(files[key], mode, BATCH, seq_len=SEQ if key != "moe" else None)  # moe: fixed shapes
    trace.check()
    assert matrix(trace) == matrix(ref)
    assert abs(total(trace) - total(ref)) < 0.01 * total(ref)
    # an ONNX file does not tell a buffer from a parameter: float initializers count as weights, so
    # Llama's rotary inverse frequencies (head / 2 floats) do, and with fixed shapes every constant
    # the exporter folded (rotary tables, the combine's zeros) does too
    if key != "moe":
        assert trace.parameters == ref.parameters + (cfg.head // 2 if cfg.llama else 0)
    else:
        tables, zeros = 2 * SEQ * cfg.head, cfg.layers * BATCH * SEQ * cfg.hidden
        assert trace.parameters == ref.parameters + tables + zeros


def test_exported_rms_norm_is_one_norm_op(files: dict[str, Path]) -> None:
    """Pow -> ReduceMean -> Add -> Sqrt -> Reciprocal -> Mul -> Mul(gain) is one layernorm of 4 FLOPs per element."""
    trace = import_onnx(files["llama"], batch=BATCH, seq_len=SEQ)
    norms = [op for op in trace.ops if op.kind is OpKind.LAYERNORM]
    assert [op.flops for op in norms] == [4 * BATCH * SEQ * LLAMA_SDPA.hidden] * (2 * LLAMA_SDPA.layers + 1)
    trained = import_onnx(files["llama"], Mode.TRAIN, BATCH, seq_len=SEQ)
    stats = [t for op in trained.ops if op.kind is OpKind.LAYERNORM for t in op.writes if t.name.endswith("stats")]
    assert {t.bytes for t in stats} == {4 * BATCH * SEQ}  # one fp32 statistic per row


def test_exported_decoder_runs_from_the_cli(
    tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    name = decoder_yaml(GPT2, tmp_path, "onnx-twin")
    sizes = ["--batch", str(BATCH), "--seq-len", str(SEQ)]
    assert main(["trace", "import", str(files["gpt2"]), *sizes, "--out", str(tmp_path / "gpt2.yaml")]) == 0
    assert "wrote" in capsys.readouterr().out
    assert main(["run", "a100", str(files["gpt2"]), *sizes, "--json"]) == 0
    imported = json.loads(capsys.readouterr().out)
    assert main(["run", "a100", name, "--lib", str(tmp_path), "--mode", "infer", *sizes, "--json"]) == 0
    ref = json.loads(capsys.readouterr().out)
    assert abs(imported["flops"] - ref["flops"]) < 0.01 * ref["flops"]


def test_exported_kv_cache_decode_step_is_the_builtin_decode(tmp_path: Path) -> None:
    prompt, gen = 24, 7
    context = prompt + (gen + 1) // 2
    path = export(LLAMA_SDPA, tmp_path / "step.onnx", dynamic=False, past=context - 1)
    name = decoder_yaml(LLAMA_SDPA, tmp_path, "onnx-twin")
    options = TraceOptions(gen_len=gen)
    ref = build_trace(name, Library([tmp_path]), Mode.DECODE, BATCH, Precision.FP16, prompt, options)
    assert matrix(import_onnx(path)) == matrix(ref)


def test_opset_23_attention_and_rms_nodes(tmp_path: Path) -> None:
    """At opset 23 the exporter writes SDPA as Attention and RMSNorm as RMSNormalization nodes."""
    name = decoder_yaml(GPT2_SDPA, tmp_path, "onnx-twin")
    ref = build_trace(name, Library([tmp_path]), Mode.INFER, BATCH, Precision.FP16, SEQ)
    trace = import_onnx(export(GPT2_SDPA, tmp_path / "gpt2.onnx", dynamic=False, opset=23))
    assert sorted(str(op.gemm) for op in trace.ops if op.gemm) == sorted(str(op.gemm) for op in ref.ops if op.gemm)
    assert abs(total(trace) - total(ref)) < 0.01 * total(ref)
    prompt, gen = 24, 7
    path = export(LLAMA_SDPA, tmp_path / "step.onnx", dynamic=False, past=prompt + (gen + 1) // 2 - 1, opset=23)
    name = decoder_yaml(LLAMA_SDPA, tmp_path, "onnx-twin")
    ref = build_trace(name, Library([tmp_path]), Mode.DECODE, BATCH, Precision.FP16, prompt, TraceOptions(gen_len=gen))
    step = import_onnx(path)
    assert matrix(step) == matrix(ref)
    assert sum(op.kind is OpKind.LAYERNORM for op in step.ops) == 2 * LLAMA_SDPA.layers + 1
