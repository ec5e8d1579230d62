"""Decoder language models: parameter counts, FLOPs against the closed form, shapes, MoE, bad descriptions."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from archsim.errors import SpecError
from archsim.spec.common import Precision
from archsim.spec.library import Library, builtin_roots
from archsim.workloads import build_trace
from archsim.workloads.decoder import expert_tokens, kv_bytes_per_token, matrix_flops
from archsim.workloads.options import TraceOptions
from archsim.workloads.trace import Mode, OpKind, Phase, Trace

PUBLISHED_PARAMETERS = {
    # GPT-3 sizes: Brown et al. 2020, arXiv 2005.14165, Table 2.1 (n_params)
    "gpt3-125m": 125e6,
    "gpt3-1.3b": 1.3e9,
    "gpt3-6.7b": 6.7e9,
    "gpt3-13b": 13.0e9,
    "gpt3-175b": 175.0e9,
    "gpt2": 124e6,  # the released small checkpoint, huggingface.co/openai-community/gpt2 (124M params)
    "llama2-7b": 6.74e9,  # huggingface.co/meta-llama/Llama-2-7b-hf model card (6.74B params)
    "llama2-13b": 13.0e9,  # huggingface.co/meta-llama/Llama-2-13b-hf (13B)
    "llama2-70b": 69.0e9,  # huggingface.co/meta-llama/Llama-2-70b-hf (69B params)
    "llama3-8b": 8.03e9,  # huggingface.co/meta-llama/Meta-Llama-3-8B (8.03B params)
    "llama3-70b": 70.6e9,  # huggingface.co/meta-llama/Meta-Llama-3-70B (70.6B params)
    "llama3-405b": 406e9,  # huggingface.co/meta-llama/Llama-3.1-405B (406B params)
    "megatron-gpt-22b": 22e9,  # Korthikanti et al. 2022, arXiv 2205.05198, Table 3 (22B)
    # Megatron-LM's weak-scaling models: Narayanan et al. 2021, arXiv 2104.04473, Table 1 (billions)
    # Table 1 prints 1.7 for the 1.653B its parameter formula, 12lh^2 (1 + 13/12h + (V + s)/12lh), gives
    "megatron-gpt-1.7b": 1.653e9,
    "megatron-gpt-3.6b": 3.6e9,
    "megatron-gpt-7.5b": 7.5e9,
    "megatron-gpt-18.4b": 18.4e9,
    "megatron-gpt-39.1b": 39.1e9,
    "megatron-gpt-76.1b": 76.1e9,
    "megatron-gpt-145.6b": 145.6e9,
    "megatron-gpt-310.1b": 310.1e9,
    "megatron-gpt-529.6b": 529.6e9,
    "megatron-gpt-1t": 1008.0e9,
    "gptj-6b": 6.053e9,  # huggingface.co/EleutherAI/gpt-j-6b model card (n_parameters 6,053,381,344)
    "mixtral-8x7b": 46.7e9,  # Jiang et al. 2024, arXiv 2401.04088, Sec. 2 (47B; 46.7B in mistral.ai's release)
}


@pytest.fixture(scope="module")
def library() -> Library:
    return Library(use_env=False)


def trace_of(library: Library, name: str, mode: Mode, batch: int, seq: int, gen: int | None = None) -> Trace:
    return build_trace(name, library, mode, batch, Precision.BF16, seq, TraceOptions(gen_len=gen))


def matrix(trace: Trace) -> int:
    return sum(op.flops for op in trace.ops if op.kind.is_matrix)


def test_every_shipped_decoder_is_tested(library: Library) -> None:
    decoders = {e.name for e in library.entries("model") if library.model(e.name).architecture.value == "decoder"}
    assert decoders == set(PUBLISHED_PARAMETERS)


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMETERS))
def test_parameters_match_the_published_size(library: Library, name: str) -> None:
    trace = trace_of(library, name, Mode.INFER, 1, 16)
    assert trace.parameters == pytest.approx(PUBLISHED_PARAMETERS[name], rel=0.02)


def test_mixtral_active_parameters(library: Library) -> None:
    cfg = library.model("mixtral-8x7b").decoder
    assert cfg is not None
    trace = trace_of(library, "mixtral-8x7b", Mode.INFER, 1, 16)
    # 12.9B active parameters per token (Jiang et al. 2024, Sec. 1): the inactive experts' share removed
    inactive = cfg.layers * (cfg.moe.experts - cfg.moe.top_k) * 3 * cfg.hidden * cfg.ffn  # type: ignore[union-attr]
    assert trace.parameters - inactive == pytest.approx(12.9e9, rel=0.02)


@pytest.mark.parametrize(
    ("name", "mode", "batch", "seq", "gen"),
    [
        ("gpt2", Mode.TRAIN, 2, 1024, None),
        ("gpt3-1.3b", Mode.TRAIN, 1, 2048, None),
        ("gpt3-13b", Mode.INFER, 2, 512, None),
        ("llama2-70b", Mode.TRAIN, 1, 512, None),
        ("llama3-8b", Mode.PREFILL, 4, 300, None),
        ("llama3-8b", Mode.DECODE, 16, 1000, 51),
        ("mixtral-8x7b", Mode.TRAIN, 1, 256, None),
        ("mixtral-8x7b", Mode.DECODE, 8, 100, 8),
    ],
)
def test_matrix_flops_are_the_closed_form(
    library: Library, name: str, mode: Mode, batch: int, seq: int, gen: int | None
) -> None:
    cfg = library.model(name).decoder
    assert cfg is not None
    trace = trace_of(library, name, mode, batch, seq, gen)
    queries, context = (1, seq + ((gen or 0) + 1) // 2) if mode is Mode.DECODE else (seq, seq)
    assert matrix(trace) == matrix_flops(cfg, mode, batch, queries, context)
    # norms, activations, softmax and the like add little on top of the products (the optimizer apart)
    steps = sum(op.flops for op in trace.ops if op.phase is not Phase.UPDATE)
    assert matrix(trace) < steps < 1.02 * matrix(trace)


@pytest.mark.parametrize("name", ["gpt2", "gpt3-175b", "llama2-7b", "llama3-70b"])
def test_training_flops_per_token_are_6n_plus_attention(library: Library, name: str) -> None:
    # PaLM's convention (Chowdhery et al. 2022, Appendix B): 6N + 12 L S (A d) per token; N here counts
    # every parameter, so an untied input table and learned positions (looked up, not multiplied) make
    # the model's own count a little smaller
    cfg = library.model(name).decoder
    assert cfg is not None
    seq = 2048 if name != "gpt2" else 1024
    trace = trace_of(library, name, Mode.TRAIN, 1, seq)
    per_token = matrix(trace) / seq
    closed = 6 * trace.parameters + 12 * cfg.layers * seq * cfg.heads * cfg.head_size
    assert per_token == pytest.approx(closed, rel=0.025)
    assert per_token <= closed


def test_gpt3_175b_training_is_megatrons_formula(library: Library) -> None:
    # Narayanan et al. 2021, arXiv 2104.04473, Eq. 3 without recomputation: 72 B s l h^2 (1 + s/6h + V/12hl)
    batch, s, layers, h, vocab = 1, 2048, 96, 12288, 50257
    trace = trace_of(library, "gpt3-175b", Mode.TRAIN, batch, s)
    megatron = 72 * batch * s * layers * h**2 * (1 + s / (6 * h) + vocab / (12 * h * layers))
    assert matrix(trace) == pytest.approx(megatron, rel=1e-12)


def test_grouped_query_attention_reads_shared_keys(library: Library) -> None:
    trace = trace_of(library, "llama2-70b", Mode.PREFILL, 2, 64)
    scores = next(op for op in trace.ops if op.name == "layers.0.attn.scores")
    assert scores.gemm is not None
    assert (scores.gemm.batch, scores.gemm.m, scores.gemm.n, scores.gemm.k) == (2 * 8, 8 * 64, 64, 128)
    assert scores.reads[1].bytes == 2 * 64 * 8 * 128 * 2  # K: 8 heads, not 64
    qkv = next(op for op in trace.ops if op.name == "layers.0.attn.qkv")
    assert qkv.gemm is not None and qkv.gemm.n == (64 + 2 * 8) * 128


def test_decode_attends_to_the_mean_context_and_holds_the_whole_cache(library: Library) -> None:
    cfg = library.model("llama2-7b").decoder
    assert cfg is not None
    trace = trace_of(library, "llama2-7b", Mode.DECODE, 4, 1000, 200)
    scores = next(op for op in trace.ops if op.name == "layers.0.attn.scores")
    assert scores.gemm is not None
    assert (scores.gemm.m, scores.gemm.n) == (1, 1000 + 100)  # the 100.5th generated token on average
    cache = 4 * (1000 + 200) * kv_bytes_per_token(cfg, Precision.BF16)
    assert cache == 4 * 1200 * 2 * 32 * 32 * 128 * 2
    assert int(trace.meta["kv_cache_bytes"]) == cache
    assert trace.memory_bytes > trace.parameters * 2 + cache
    lm_head = next(op for op in trace.ops if op.name == "lm_head")
    assert lm_head.gemm is not None and lm_head.gemm.m == 4  # one new token per sequence


def test_prefill_keeps_the_prompts_cache_and_computes_the_last_logits(library: Library) -> None:
    cfg = library.model("gpt3-1.3b").decoder
    assert cfg is not None
    trace = trace_of(library, "gpt3-1.3b", Mode.PREFILL, 3, 500)
    assert int(trace.meta["kv_cache_bytes"]) == 3 * 500 * kv_bytes_per_token(cfg, Precision.BF16)
    lm_head = next(op for op in trace.ops if op.name == "lm_head")
    assert lm_head.gemm is not None and lm_head.gemm.m == 3
    infer = trace_of(library, "gpt3-1.3b", Mode.INFER, 3, 500)
    assert "kv_cache_bytes" not in infer.meta
    assert trace.flops < infer.flops  # logits of the last token only


def test_training_replays_backward_and_update(library: Library) -> None:
    trace = trace_of(library, "llama3-8b", Mode.TRAIN, 1, 128)
    phases = {op.phase for op in trace.ops}
    assert {Phase.FORWARD, Phase.BACKWARD_DATA, Phase.BACKWARD_WEIGHT, Phase.UPDATE} <= phases
    assert [op.kind for op in trace.ops if op.phase is Phase.UPDATE] == [OpKind.OPTIMIZER]
    assert trace.ops[-1].name == "adam.update"
    recomputed = build_trace("llama3-8b", library, Mode.TRAIN, 1, Precision.BF16, 128, TraceOptions(recompute=True))
    assert recomputed.memory_bytes < trace.memory_bytes
    assert any(op.phase is Phase.RECOMPUTE for op in recomputed.ops)


def test_tied_embeddings_are_one_tensor(library: Library) -> None:
    trace = trace_of(library, "gpt2", Mode.TRAIN, 1, 64)
    grads = [t.name for op in trace.ops for t in op.writes if t.name == "embed_tokens.weight.grad"]
    assert len(grads) == 2  # the lookup's scatter and the output projection accumulate into one gradient
    llama = trace_of(library, "llama2-7b", Mode.INFER, 1, 8)
    assert any(t.name == "lm_head.weight" for op in llama.ops for t in op.reads)


def model_file(tmp_path: Path, base: str, **changes: object) -> str:
    root = next(r for r in builtin_roots() if r.name == "workloads")
    data = yaml.safe_load((root / f"{base}.yaml").read_text())
    data["name"] = "mine"
    data.pop("aliases", None)
    for key, value in changes.items():
        if value is None:
            data["decoder"].pop(key, None)
        else:
            data["decoder"][key] = value
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_capacity_factor_pads_the_experts_buffers(library: Library, tmp_path: Path) -> None:
    moe = {"experts": 8, "top_k": 2, "capacity_factor": 1.25}
    padded = build_trace(model_file(tmp_path, "mixtral-8x7b", moe=moe), library, Mode.INFER, 1, Precision.BF16, 64)
    dropless = trace_of(library, "mixtral-8x7b", Mode.INFER, 1, 64)
    experts = [op for op in padded.ops if op.name == "layers.0.moe.experts.gate_up"]
    assert experts[0].gemm is not None and experts[0].gemm.m == 20 and experts[0].gemm.batch == 8  # 1.25 * 64 * 2 / 8
    names = ("layers.0.moe.experts.gate_up", "layers.0.moe.experts.down")
    padded_flops = sum(op.flops for op in padded.ops if op.name in names)
    dropless_flops = sum(op.flops for op in dropless.ops if op.name in names)
    assert padded_flops == pytest.approx(1.25 * dropless_flops)
    cfg = library.model("mixtral-8x7b").decoder
    assert cfg is not None and expert_tokens(cfg, 7) == 2  # ceil(7 * 2 / 8)


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"kv_heads": 5}, "multiple of kv_heads"),
        ({"heads": 7, "head_dim": None}, "multiple of heads"),
        ({"default_seq_len": 100000}, "default_seq_len exceeds max_position"),
        ({"moe": {"experts": 2, "top_k": 3}}, "top_k (3) exceeds experts (2)"),
        ({"moe": {"experts": 8, "top_k": 2, "capacity_factor": 0.5}}, "capacity_factor must be in 1..64"),
        ({"activation": "relu"}, "activation"),
        ({"layers": 5000}, "more than the 1000 allowed"),
        ({"rope": True}, "rope"),
    ],
)
def test_bad_descriptions_name_the_field(
    library: Library, tmp_path: Path, changes: dict[str, object], fragment: str
) -> None:
    with pytest.raises(SpecError, match="decoder") as err:
        build_trace(model_file(tmp_path, "llama2-7b", **changes), library, Mode.INFER, 1, Precision.BF16, 16)
    assert fragment in err.value.line()


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMETERS))
def test_every_field_cites_its_source(name: str) -> None:
    root = next(r for r in builtin_roots() if r.name == "workloads")
    data = yaml.safe_load((root / f"{name}.yaml").read_text())
    keys = set(data["sources"])

    def paths(node: object, prefix: str) -> list[str]:
        if not isinstance(node, dict):
            return [prefix]
        return [p for key, value in node.items() for p in paths(value, f"{prefix}.{key}")]

    fields = [*paths(data["decoder"], "decoder"), "default_batch", "optimizer"]
    missing = [f for f in fields if not any(f == k or f.startswith(k + ".") for k in keys)]
    assert not missing
    assert all(isinstance(text, str) and text.strip() for text in data["sources"].values())
