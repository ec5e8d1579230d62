"""Tensor and sequence parallelism of decoder models: the shards, their collectives, placement, results."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from archsim import simulate
from archsim.collective_run import collective
from archsim.errors import UsageError
from archsim.models.placement import place
from archsim.run.target import fabric_for
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.workloads import build_trace
from archsim.workloads.decoder import matrix_flops
from archsim.workloads.options import TraceOptions
from archsim.workloads.trace import CommGroup, CommKind, Mode, OpKind, Phase, Trace
from tests.cli import run_cli

SEQ, BATCH, HIDDEN, LAYERS = 128, 2, 768, 12  # gpt3-125m
ACTIVATION = BATCH * SEQ * HIDDEN * 2  # one B x S x h activation in fp16


def trace_of(library: Library, tp: int, sp: bool = False, mode: Mode = Mode.TRAIN, model: str = "gpt3-125m") -> Trace:
    options = TraceOptions(tensor_parallel=tp, sequence_parallel=sp)
    return build_trace(model, library, mode, BATCH, Precision.FP16, SEQ, options)


def comm_counts(trace: Trace) -> Counter[tuple[CommKind, bool, int]]:
    """(collective, in the backward pass, bytes) of every tensor-parallel comm op."""
    return Counter(
        (op.comm.kind, op.phase.is_backward, op.comm.bytes)
        for op in trace.ops
        if op.comm is not None and op.comm.group is CommGroup.TENSOR_PARALLEL
    )


def test_degree_one_is_the_plain_trace(library: Library) -> None:
    plain = build_trace("gpt3-125m", library, Mode.TRAIN, BATCH, Precision.FP16, SEQ)
    assert trace_of(library, 1).ops == plain.ops


def test_sharded_products_do_a_tth_of_the_work(library: Library) -> None:
    whole, shard = trace_of(library, 1), trace_of(library, 4)
    flops = {op.name: op.flops for op in whole.ops if op.kind is OpKind.MATMUL}
    sharded = {op.name: op.flops for op in shard.ops if op.kind is OpKind.MATMUL}
    for suffix in ("qkv", "scores", "context", "o_proj", "mlp.up", "mlp.down"):
        name = f"layers.3.{'attn.' if 'mlp' not in suffix else ''}{suffix}"
        for pass_ in ("", ".bwd_data", ".bwd_weight"):
            if name + pass_ in flops:
                assert sharded[name + pass_] * 4 == flops[name + pass_], name + pass_
    # the vocabulary splits into ceil(V / T) rows: 50257 -> 12565
    assert sharded["lm_head"] * 4 == pytest.approx(flops["lm_head"], rel=1e-4)
    # norms and residual adds are replicated without sequence parallelism, split with it
    norm = next(op for op in whole.ops if op.name == "layers.3.norm1")
    assert next(op for op in shard.ops if op.name == "layers.3.norm1").flops == norm.flops
    split = trace_of(library, 4, sp=True)
    assert next(op for op in split.ops if op.name == "layers.3.norm1").flops * 4 == norm.flops


def test_two_all_reduces_forward_and_two_backward_per_layer(library: Library) -> None:
    counts = comm_counts(trace_of(library, 4))
    # per layer two of B x S x h each way, plus the embedding's (forward) and the final norm's (backward)
    assert counts[(CommKind.ALL_REDUCE, False, ACTIVATION)] == 2 * LAYERS + 1
    assert counts[(CommKind.ALL_REDUCE, True, ACTIVATION)] == 2 * LAYERS + 1
    # the vocabulary-parallel cross-entropy: three all-reduces of one fp32 value per token
    assert counts[(CommKind.ALL_REDUCE, False, BATCH * SEQ * 4)] == 3
    assert sum(counts.values()) == 4 * LAYERS + 5


def test_sequence_parallelism_trades_each_all_reduce_for_a_pair(library: Library) -> None:
    counts = comm_counts(trace_of(library, 4, sp=True))
    assert not counts[(CommKind.ALL_REDUCE, False, ACTIVATION)] and not counts[(CommKind.ALL_REDUCE, True, ACTIVATION)]
    for backward in (False, True):
        assert counts[(CommKind.REDUCE_SCATTER, backward, ACTIVATION)] == 2 * LAYERS + 1
        assert counts[(CommKind.ALL_GATHER, backward, ACTIVATION)] == 2 * LAYERS + 1


def test_a_collective_waits_for_its_op_and_its_consumers_wait_for_it(library: Library) -> None:
    trace = trace_of(library, 2)
    trace.check()
    index = next(i for i, op in enumerate(trace.ops) if op.name == "layers.0.attn.o_proj.tp-all-reduce")
    assert trace.ops[trace.ops[index].deps[0]].name == "layers.0.attn.o_proj"
    assert any(index in op.deps for op in trace.ops[index + 1 :] if op.phase is Phase.FORWARD)


def test_memory_per_chip_shrinks_about_t_times(library: Library) -> None:
    whole, shard = trace_of(library, 1, model="gpt3-1.3b"), trace_of(library, 4, model="gpt3-1.3b")
    assert shard.parameters * 4 == pytest.approx(whole.parameters, rel=0.02)
    assert 3.5 < whole.memory_bytes / shard.memory_bytes <= 4.0


def test_grouped_kv_heads_split_or_are_replicated(library: Library) -> None:
    def cache(tp: int) -> int:
        options = TraceOptions(tensor_parallel=tp)
        trace = build_trace("llama3-8b", library, Mode.PREFILL, 1, Precision.FP16, 64, options)
        return int(trace.meta["kv_cache_bytes"])

    assert cache(1) == 4 * cache(4)  # 8 key/value heads, 2 per chip
    assert cache(1) == 8 * cache(16)  # one per chip, each replicated twice


def test_refusals_name_what_would_fit(capsys: pytest.CaptureFixture[str]) -> None:
    cases = [
        (("dgx-a100", "gpt3-1.3b", "--tensor-parallel", "3"), "1, 2, 4, 8 would"),
        (("dgx-a100", "gpt3-1.3b", "--tensor-parallel", "8", "--pipeline-stages", "2", "--nodes", "3"), "1, 3 would"),
        (("dgx-h100", "gpt3-125m", "--tensor-parallel", "8"), "1, 2, 4 would on dgx-h100 (node of 8 chips)"),
        (("dgx-a100", "resnet50", "--tensor-parallel", "2"), "decoder language models only"),
        (("a100-80gb", "gpt3-125m", "--tensor-parallel", "2"), "needs a multi-chip system"),
        (("dgx-a100", "gpt3-125m", "--sequence-parallel"), "give --tensor-parallel"),
    ]
    for argv, what in cases:
        code, out, err = run_cli(capsys, "run", *argv)
        assert code == 2 and out == "" and err.count("\n") == 1 and what in err, err
        assert err.startswith("archsim: error: ")


def test_json_reports_the_layout_mfu_and_tokens(capsys: pytest.CaptureFixture[str], library: Library) -> None:
    argv = ("run", "dgx-a100", "gpt3-125m", "--mode", "train", "--tensor-parallel", "2", "--sequence-parallel")
    argv += ("--seq-len", str(SEQ), "--batch", str(BATCH), "--json")
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    result = json.loads(out)
    assert result["tensor_parallel"] == 2 and result["sequence_parallel"] is True
    assert result["data_parallel"] == 4 and result["global_batch"] == 4 * BATCH
    assert result["tokens_per_s"] == pytest.approx(result["throughput"] * SEQ)
    spec = library.model("gpt3-125m")
    assert spec.decoder is not None
    model_flops = matrix_flops(spec.decoder, Mode.TRAIN, 4 * BATCH, SEQ, SEQ)
    peak = library.chip("a100-80gb").peak_flops(Precision.FP16) * 8
    assert result["mfu"] == pytest.approx(model_flops / (result["step_time_s"] * peak))
    assert 0 < result["mfu"] <= result["utilization"] <= 1
    assert any(layer["kind"] == "comm" and "tp-" in layer["name"] for layer in result["layers"])
    assert run_cli(capsys, *argv)[1] == out  # deterministic


def test_mfu_is_null_but_for_decoders(library: Library) -> None:
    assert simulate("a100-80gb", "resnet50", batch=2, library=library).mfu is None
    assert simulate("a100-80gb", "gpt3-125m", batch=2, seq_len=SEQ, library=library).mfu is not None


def test_generation_runs_tensor_parallel(library: Library) -> None:
    one = simulate("h100-sxm5", "llama2-7b", "prefill", 1, prompt_len=512, library=library)
    four = simulate("dgx-h100", "llama2-7b", "prefill", 1, prompt_len=512, tensor_parallel=4, library=library)
    assert four.ttft_s is not None and one.ttft_s is not None
    assert one.ttft_s / 4 <= four.ttft_s < one.ttft_s
    assert four.kv_cache_bytes * 4 == one.kv_cache_bytes
    decode = simulate("dgx-h100", "llama2-7b", "decode", 8, prompt_len=128, tensor_parallel=2, library=library)
    assert decode.tpot_s is not None and decode.tensor_parallel == 2


def test_pipeline_stages_span_nodes(library: Library) -> None:
    system = library.system("dgx-a100")
    placement = place(fabric_for(system, library, 8, "dgx-a100"), 8, tensor_parallel=8)
    assert placement.data_parallel == 1 and placement.send_tier(0) == 1
    wide = place(fabric_for(system, library, 16, "dgx-a100"), 8, tensor_parallel=8)
    assert wide.data_parallel == 2 and wide.tiers[1].group == 2 and wide.tiers[1].stride == 8
    result = simulate(
        "dgx-a100", "gpt3-1.3b", "train", 4, seq_len=512, nodes=4, tensor_parallel=8, pipeline_stages=2,
        microbatches=4, library=library,
    )  # fmt: skip
    assert result.pipeline_stages == 2 and result.data_parallel == 2 and result.num_chips == 32
    assert any(link.tier == "scale-out" and link.bytes > 0 for link in result.links)
    assert result.mfu is not None and 0 < result.mfu < 1


def test_one_shard_per_degree_is_refused_before_any_trace(library: Library) -> None:
    with pytest.raises(UsageError, match="--tensor-parallel"):
        simulate("dgx-a100", "gpt3-125m", tensor_parallel=16, library=library)


def test_tensor_parallel_is_a_sweep_axis(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    spec = tmp_path / "tp.yaml"
    spec.write_text(
        "schema_version: 1\nkind: sweep\nname: tp\ndescription: tensor parallel degrees\ntarget: [dgx-h100]\n"
        "workloads: [gpt3-125m]\nsettings: {mode: infer, batch: 2, seq_len: 128}\n"
        "grid:\n  run.tensor_parallel: [1, 2, 4]\n"
    )
    code, _, err = run_cli(capsys, "sweep", str(spec), "--out", str(tmp_path / "out"), "--no-progress", "--jobs", "1")
    assert code == 0, err
    rows = pd.read_parquet(tmp_path / "out" / "results.parquet").sort_values("run.tensor_parallel")
    assert list(rows["tensor_parallel"]) == [1, 2, 4]
    assert rows["mfu"].between(0, 1).all()


def test_each_collective_takes_one_library_call_on_the_group(library: Library) -> None:
    # T = 8 fills a DGX H100 node: its calls are exactly what `archsim collective dgx-h100` prices
    result = simulate("dgx-h100", "llama2-7b", "prefill", 2, prompt_len=256, tensor_parallel=8, library=library)
    layer = next(layer for layer in result.layers if layer.name == "layers.0.attn.o_proj.tp-all-reduce")
    call = collective("dgx-h100", "all-reduce", [2 * 256 * 4096 * 2], library=library)[0]
    assert layer.end_s - layer.start_s == pytest.approx(call.time_s, rel=1e-12)
    assert layer.bound == "communication"


def test_the_human_summary_names_the_layout(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("run", "dgx-a100", "gpt3-125m", "--mode", "train", "--tensor-parallel", "2", "--seq-len", "128")
    code, out, err = run_cli(capsys, *argv, "--batch", "2")
    assert code == 0, err
    assert "tensor par.   2 chips per layer" in out and "% MFU" in out and "tokens/s" in out


def test_in_stream_collectives_count_as_communication(library: Library) -> None:
    """A tensor-parallel step's all-reduces are in ``comm_s`` and ``exposed_comm_s``, not only in ``time_by_bound``."""
    for pipeline in ({}, {"pipeline_stages": 2, "microbatches": 4}):
        tp = simulate("dgx-a100", "gpt3-1.3b", "train", 4, seq_len=512, tensor_parallel=4, library=library, **pipeline)
        calls = [layer.end_s - layer.start_s for layer in tp.layers if layer.bound == "communication"]
        assert calls and all(t > 0 for t in calls)
        # every call of the step is in flight while comm_s runs: at least the first microbatch's on one chip
        assert tp.comm_s >= sum(calls) * (1 - 1e-9)
        assert 0 < tp.exposed_comm_s <= tp.step_time_s
    plain = simulate("dgx-a100", "gpt3-1.3b", "train", 4, seq_len=512, tensor_parallel=4, library=library)
    # the in-stream calls are counted once: their ops, plus what the links expose
    assert plain.exposed_comm_s == pytest.approx(plain.time_by_bound["communication"], rel=1e-9)


def test_issue35_20_tensor_parallel_suggestions_divide_the_node_and_the_heads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # gpt2's 12 heads split over 1, 2, 3, 4, 6, 12 chips, a DGX A100 node over 1, 2, 4, 8: both hold for 1, 2, 4
    for degree, where in (("8", "gpt2"), ("3", "interconnect/systems/dgx-a100.yaml")):
        code, out, err = run_cli(capsys, "run", "dgx-a100", "gpt2", "--mode", "train", "--tensor-parallel", degree)
        assert (code, out) == (2, "")
        assert err.startswith(f"archsim: error: {where}: --tensor-parallel: {degree} ") and err.count("\n") == 1
        assert "; 1, 2, 4 would" in err, err
