"""LLM idioms through from_torch and ONNX: GPT-2 and Llama-style modules written in plain PyTorch.

Each module (:mod:`tests.llm_modules`) is configured like a small ``decoder`` workload, whose YAML is
written to a tmp ``--lib`` folder; the imported trace must have the built-in's parameters and matrix
FLOPs exactly and its total FLOPs within 1%. Skipped without PyTorch unless ``ARCHSIM_REQUIRE_TORCH=1``.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from archsim.cli import main
from archsim.errors import SpecError
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.workloads import build_trace, from_torch, write_trace
from archsim.workloads.decoder import matrix_flops
from archsim.workloads.options import TraceOptions
from archsim.workloads.trace import Gemm, Mode, OpKind, Trace
from tests.llm_configs import Config, decoder_yaml, skip_without

if TYPE_CHECKING:
    import torch

skip_without("torch")  # CI installs PyTorch's CPU build (ARCHSIM_REQUIRE_TORCH=1): there it must run, never skip

BATCH, SEQ = 2, 32
GPT2 = Config()
GPT2_SDPA = Config(sdpa=True)
LLAMA = Config(llama=True, kv_heads=2)
LLAMA_SDPA = Config(llama=True, kv_heads=2, sdpa=True)
MOE = Config(llama=True, kv_heads=2, experts=4)


def total(trace: Trace) -> int:
    return sum(op.flops for op in trace.ops)


def matrix(trace: Trace) -> int:
    return sum(op.flops for op in trace.ops if op.kind.is_matrix)


def builtin(tmp_path: Path, cfg: Config, mode: Mode, seq: int = SEQ, gen: int | None = None) -> Trace:
    name = decoder_yaml(cfg, tmp_path, "torch-twin")
    return build_trace(name, Library([tmp_path]), mode, BATCH, Precision.FP16, seq, TraceOptions(gen_len=gen))


def ids(seq: int = SEQ) -> torch.Tensor:
    import torch

    return torch.zeros(BATCH, seq, dtype=torch.long)


def imported(cfg: Config, mode: Mode = Mode.INFER) -> Trace:
    """``cfg``'s module through ``from_torch`` once per configuration and mode (its FLOPs do not depend
    on the weights' values, and ``torch.export`` takes a second or two a module)."""
    return _imported(cfg, mode)  # mode passed explicitly: imported(c) and imported(c, INFER) share one export


@functools.cache
def _imported(cfg: Config, mode: Mode) -> Trace:
    from tests.llm_modules import Decoder

    return from_torch(Decoder(cfg), (ids(),), mode=mode)


@pytest.mark.parametrize(
    ("cfg", "mode"),
    [(GPT2, Mode.INFER), (GPT2, Mode.TRAIN), (GPT2_SDPA, Mode.INFER), (LLAMA, Mode.INFER), (LLAMA, Mode.TRAIN),
     (LLAMA_SDPA, Mode.INFER), (MOE, Mode.INFER)],
    ids=["gpt2-infer", "gpt2-train", "gpt2-sdpa", "llama-infer", "llama-train", "llama-sdpa", "moe-infer"],
)  # fmt: skip
def test_torch_decoders_match_the_builtin(tmp_path: Path, cfg: Config, mode: Mode) -> None:
    ref = builtin(tmp_path, cfg, mode)
    trace = imported(cfg, mode)
    trace.check()
    assert trace.parameters == ref.parameters
    spec = Library([tmp_path]).model("torch-twin").decoder
    assert spec is not None
    assert matrix(trace) == matrix(ref) == matrix_flops(spec, mode, BATCH, SEQ, SEQ)
    assert abs(total(trace) - total(ref)) < 0.01 * total(ref)


def test_attention_and_projections_are_the_builtins_products(tmp_path: Path) -> None:
    """GPT-2 with SDPA: every matrix product has the built-in's Gemm view (fused QKV split, tied head)."""
    ref = builtin(tmp_path, GPT2_SDPA, Mode.INFER)
    trace = imported(GPT2_SDPA)
    gemms = sorted((op.gemm for op in trace.ops if op.gemm is not None), key=str)
    assert gemms == sorted((op.gemm for op in ref.ops if op.gemm is not None), key=str)
    d = GPT2.head
    assert Gemm(BATCH * GPT2.heads, SEQ, SEQ, d) in gemms  # scores Q K^T
    assert Gemm(BATCH * GPT2.heads, SEQ, d, SEQ) in gemms  # context P V


def test_grouped_query_attention_shares_keys(tmp_path: Path) -> None:
    trace = imported(LLAMA_SDPA)
    group, d = LLAMA.heads // LLAMA.kv_heads, LLAMA.head
    scores = [op.gemm for op in trace.ops if op.name.endswith(".scores")]
    assert scores == [Gemm(BATCH * LLAMA.kv_heads, group * SEQ, SEQ, d)] * LLAMA.layers
    softmax = [op for op in trace.ops if op.kind is OpKind.SOFTMAX]
    assert [op.flops for op in softmax] == [5 * BATCH * LLAMA.heads * SEQ * SEQ] * LLAMA.layers


def test_rms_norm_is_one_norm_op(tmp_path: Path) -> None:
    import torch

    trace = imported(LLAMA)
    norms = [op for op in trace.ops if op.kind is OpKind.LAYERNORM]
    assert [op.flops for op in norms] == [4 * BATCH * SEQ * LLAMA.hidden] * (2 * LLAMA.layers + 1)
    assert not any(word in op.name for op in trace.ops for word in ("pow", "rsqrt", "mean"))

    class TorchRms(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = torch.nn.RMSNorm(64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.norm(x)

    (op,) = from_torch(TorchRms(), (torch.zeros(2, 8, 64),), mode=Mode.TRAIN).ops[:1]
    assert op.kind is OpKind.LAYERNORM
    assert op.flops == 4 * 2 * 8 * 64


@pytest.mark.parametrize("cfg", [GPT2, LLAMA, LLAMA_SDPA], ids=["gpt2", "llama", "llama-sdpa"])
def test_kv_cache_decode_step_is_the_builtin_decode(tmp_path: Path, cfg: Config) -> None:
    """One token attending to a cache of ``c - 1`` tokens and itself: the built-in decode step at context c."""
    from tests.llm_modules import Decoder, past_cache

    prompt, gen = 24, 7
    context = prompt + (gen + 1) // 2
    ref = builtin(tmp_path, cfg, Mode.DECODE, prompt, gen)
    trace = from_torch(Decoder(cfg), (ids(1), past_cache(cfg, BATCH, context - 1)))
    spec = Library([tmp_path]).model("torch-twin").decoder
    assert spec is not None
    assert matrix(trace) == matrix(ref) == matrix_flops(spec, Mode.DECODE, BATCH, 1, context)
    cache = BATCH * cfg.kv_heads * context * cfg.head * 2  # one layer's K (or V), fp16
    copies = [op for op in trace.ops if op.flops == 0 and op.kind is OpKind.ELEMENTWISE]
    assert sum(1 for op in copies if op.bytes_written == cache) == 2 * cfg.layers  # cat of K, of V


def test_moe_routing_is_the_builtins(tmp_path: Path) -> None:
    trace = imported(MOE)
    tokens, experts, k, h = BATCH * SEQ, MOE.experts, MOE.top_k, MOE.hidden
    topk = [op for op in trace.ops if op.name.startswith("topk")]
    assert [op.flops for op in topk] == [tokens * experts] * MOE.layers  # with softmax: the router's 6
    expert_mm = [op.gemm for op in trace.ops if op.gemm is not None and op.gemm.k == h and op.gemm.n == MOE.ffn]
    assert expert_mm == [Gemm(1, tokens * k // experts, MOE.ffn, h)] * (2 * experts * MOE.layers)
    combine = [op for op in trace.ops if op.name.startswith("index_put")]
    assert [op.flops for op in combine] == [tokens * k * h] * MOE.layers


def test_unsupported_ops_are_named_with_counts() -> None:
    import torch

    class Odd(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cumsum(x, 0) + torch.cumsum(x, 1)

    with pytest.raises(SpecError, match=r"unsupported ATen ops: cumsum x2$"):
        from_torch(Odd(), (torch.zeros(4, 4),))


def test_an_imported_decoder_runs_from_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_trace(imported(LLAMA), tmp_path / "llama-torch.yaml")
    name = decoder_yaml(LLAMA, tmp_path, "torch-twin")
    assert main(["run", "a100", str(tmp_path / "llama-torch.yaml"), "--json"]) == 0
    ran = json.loads(capsys.readouterr().out)
    args = ["run", "a100", name, "--lib", str(tmp_path), "--mode", "infer", "--batch", str(BATCH)]
    assert main([*args, "--seq-len", str(SEQ), "--json"]) == 0
    ref = json.loads(capsys.readouterr().out)
    assert abs(ran["flops"] - ref["flops"]) < 0.01 * ref["flops"]


def test_attention_with_a_mask_input_reads_it() -> None:
    import torch

    class Masked(torch.nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    q = torch.zeros(2, 4, 8, 16)
    trace = from_torch(Masked(), (q, q, q, torch.ones(8, 8, dtype=torch.bool)))
    assert [op.kind for op in trace.ops] == [OpKind.MATMUL, OpKind.ELEMENTWISE, OpKind.SOFTMAX, OpKind.MATMUL]
    assert trace.ops[1].flops == 2 * 2 * 4 * 8 * 8  # scale and mask
    assert "mask" in {t.name for t in trace.ops[1].reads}


def test_data_dependent_routing_is_refused_in_one_line() -> None:
    """MoE written as a loop over experts with ``where(chosen == e)`` has shapes known only at run time."""
    import torch

    class LoopMoe(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.router = torch.nn.Linear(8, 4)
            self.experts = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            gates, chosen = self.router(x).softmax(-1).topk(2)
            out = torch.zeros_like(x)
            for e, expert in enumerate(self.experts):
                rows, slot = torch.where(chosen == e)
                out = out.index_add(0, rows, expert(x[rows]) * gates[rows, slot, None])
            return out

    with pytest.raises(SpecError, match="a shape that depends on the data") as err:
        from_torch(LoopMoe(), (torch.zeros(16, 8),))
    assert "\n" not in str(err.value)
