"""Expert parallelism of mixture-of-experts decoders: the shards, their all-to-alls, groups, refusals, results."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from archsim import simulate
from archsim.collective_run import collective
from archsim.run.expert_parallel import expert_data_fabric
from archsim.run.target import fabric_for
from archsim.run.tensor_parallel import group_fabric
from archsim.spec.common import Precision
from archsim.spec.library import Library
from archsim.workloads import build_trace
from archsim.workloads.decoder import expert_tokens
from archsim.workloads.expert_parallel import is_expert_gradient
from archsim.workloads.memory import memory_per_chip
from archsim.workloads.options import Recompute, TraceOptions
from archsim.workloads.trace import CommGroup, CommKind, Mode, OpKind, Phase, Role, Trace
from archsim.workloads.transforms import with_gradient_all_reduces
from tests.cli import run_cli

MODEL, LAYERS, EXPERTS, HIDDEN, FFN = "mixtral-8x7b", 32, 8, 4096, 14336
BATCH, SEQ = 1, 64


def trace_of(library: Library, ep: int, mode: Mode = Mode.TRAIN, recompute: str = "none") -> Trace:
    options = TraceOptions(recompute=recompute, expert_parallel=ep)
    return build_trace(MODEL, library, mode, BATCH, Precision.FP16, SEQ, options)


def all_to_alls(trace: Trace) -> list[tuple[str, int, Phase]]:
    """(name, bytes, phase) of every expert-parallel comm op."""
    return [
        (op.name, op.comm.bytes, op.phase)
        for op in trace.ops
        if op.comm is not None and op.comm.group is CommGroup.EXPERT_PARALLEL
    ]


def buffer_bytes(library: Library) -> int:
    """One MoE layer's dispatch buffers: E experts x tokens per expert x h, fp16."""
    spec = library.model(MODEL)
    assert spec.decoder is not None
    return EXPERTS * expert_tokens(spec.decoder, BATCH * SEQ) * HIDDEN * 2


def test_degree_one_is_the_plain_trace(library: Library) -> None:
    plain = build_trace(MODEL, library, Mode.INFER, BATCH, Precision.FP16, SEQ)
    assert trace_of(library, 1, Mode.INFER).ops == plain.ops


@pytest.mark.parametrize(
    ("mode", "recompute", "per_layer"), [("train", "none", 4), ("train", "full", 6), ("infer", "none", 2)]
)
def test_all_to_alls_per_layer_each_of_the_buffers_bytes(
    library: Library, mode: str, recompute: str, per_layer: int
) -> None:
    trace = trace_of(library, 8, Mode(mode), recompute)
    comms = all_to_alls(trace)
    assert len(comms) == per_layer * LAYERS
    assert {nbytes for _, nbytes, _ in comms} == {buffer_bytes(library)}
    assert all(op.comm.kind is CommKind.ALL_TO_ALL and op.comm.in_stream for op in trace.ops if op.comm is not None)
    layer0 = Counter(phase for name, _, phase in comms if name.startswith("layers.0."))
    assert layer0[Phase.BACKWARD_DATA] == (2 if mode == "train" else 0)
    assert layer0[Phase.RECOMPUTE] == (2 if recompute == "full" else 0)


def test_decode_exchanges_each_new_tokens_buffers(library: Library) -> None:
    trace = build_trace(MODEL, library, Mode.DECODE, 4, Precision.FP16, 128, TraceOptions(expert_parallel=4))
    comms = all_to_alls(trace)
    assert len(comms) == 2 * LAYERS
    spec = library.model(MODEL)
    assert spec.decoder is not None
    assert {b for _, b, _ in comms} == {EXPERTS * expert_tokens(spec.decoder, 4) * HIDDEN * 2}


def test_the_experts_wait_for_their_tokens_and_the_combine_for_their_outputs(library: Library) -> None:
    trace = trace_of(library, 2)
    index = {op.name: i for i, op in enumerate(trace.ops)}
    gate_up = trace.ops[index["layers.3.moe.experts.gate_up"]]
    assert gate_up.deps == (index["layers.3.moe.dispatch.ep-all-to-all"],)
    combine = trace.ops[index["layers.3.moe.combine"]]
    assert index["layers.3.moe.experts.down.ep-all-to-all"] in combine.deps
    backward = trace.ops[index["layers.3.moe.experts.down.bwd_data"]]
    assert index["layers.3.moe.experts.down.out.grad.ep-all-to-all"] in backward.deps
    assert trace.ops[index["layers.3.moe.dispatch.out.grad.ep-all-to-all"]].phase is Phase.BACKWARD_DATA


def test_balanced_routing_keeps_each_chips_expert_work(library: Library) -> None:
    def matmul_flops(trace: Trace) -> int:
        return sum(op.flops for op in trace.ops if op.kind is OpKind.MATMUL)

    one, eight = trace_of(library, 1), trace_of(library, 8)
    assert matmul_flops(eight) == matmul_flops(one)
    shapes = {op.name: op.gemm for op in eight.ops if op.gemm is not None}
    assert shapes["layers.0.moe.experts.down"].batch == 1  # one local expert ...
    assert shapes["layers.0.moe.experts.down"].m == 8 * expert_tokens(library.model(MODEL).decoder, SEQ)  # type: ignore[arg-type]


def test_expert_weights_gradients_and_optimizer_state_shrink_e_times(library: Library) -> None:
    experts = LAYERS * EXPERTS * 3 * HIDDEN * FFN  # SwiGLU: gate, up, down per expert
    one, eight = memory_per_chip(trace_of(library, 1)), memory_per_chip(trace_of(library, 8))
    assert one.weights - eight.weights == experts * 2 * 7 // 8
    assert one.gradients - eight.gradients == experts * 2 * 7 // 8
    assert one.optimizer_state - eight.optimizer_state == experts * 12 * 7 // 8  # fp32 master + two moments
    assert eight.weights < one.weights / 5  # the experts are most of Mixtral's 46.7B parameters


def test_expert_gradients_are_bucketed_apart(library: Library) -> None:
    trace = trace_of(library, 2)
    grads = {t.name: t.bytes for op in trace.ops for t in op.writes if t.role is Role.GRADIENT}
    expert = sum(b for n, b in grads.items() if is_expert_gradient(n))
    assert 0 < expert < sum(grads.values())
    step = with_gradient_all_reduces(trace, keep=is_expert_gradient, group=CommGroup.EXPERT_DATA_PARALLEL)
    reduces = [op for op in step.ops if op.comm is not None and op.comm.kind is CommKind.ALL_REDUCE]
    assert sum(op.comm.bytes for op in reduces if op.comm is not None) == expert
    assert all(op.name.startswith("expert-data-parallel all-reduce b") for op in reduces)


def test_group_fabrics_follow_the_placement(library: Library) -> None:
    fabric = fabric_for(library.system("dgx-h100"), library, 4, "dgx-h100")
    node = fabric.tiers[0]
    inside = group_fabric(fabric, 8, 1)  # 8 replicas of one chip: the node's NVSwitch
    assert inside.num_chips == 8 and [t.size for t in inside.tiers] == [8] and inside.tiers[0].lanes == node.lanes
    across = group_fabric(fabric, 4, 8)  # T = 8: one chip per node, a NIC each
    assert [(t.name, t.size, t.lanes) for t in across.tiers] == [("scale-out", 4, 1)] and across.nodes == 4
    split = group_fabric(fabric, 8, 2)  # T = 2: 4 chips of a node, 2 nodes
    assert [(t.name, t.size) for t in split.tiers] == [("node", 4), ("scale-out", 2)]
    replicas = expert_data_fabric(fabric, 2, 8)  # the 2 replicas of 2 chips that hold the same experts
    assert replicas.num_chips == 4 and [(t.name, t.size) for t in replicas.tiers] == [("node", 2), ("scale-out", 2)]


def test_refusals_name_what_would_fit(capsys: pytest.CaptureFixture[str]) -> None:
    cases = [
        (("dgx-h100", "gpt3-125m", "--expert-parallel", "2"), "gpt3-125m is dense"),
        (
            ("dgx-h100", MODEL, "--expert-parallel", "8", "--tensor-parallel", "2"),
            "4 data-parallel replicas; 1, 2, 4 would",
        ),
        (("dgx-h100", MODEL, "--expert-parallel", "3", "--nodes", "3"), "8 experts; 1, 2, 4, 8 would"),
        (("dgx-h100", MODEL, "--expert-parallel", "2", "--zero", "1", "--mode", "train"), "--zero"),
        (("h100-sxm5", MODEL, "--expert-parallel", "2"), "needs a multi-chip system"),
        (("dgx-h100", "gemm:64x64x64", "--expert-parallel", "2"), "a mixture of experts"),
    ]
    for argv, what in cases:
        code, out, err = run_cli(capsys, "run", *argv)
        assert code == 2 and out == "" and err.count("\n") == 1 and what in err, err
        assert err.startswith("archsim: error: ")


def test_json_reports_the_layout_and_is_deterministic(capsys: pytest.CaptureFixture[str], library: Library) -> None:
    argv = ("run", "dgx-h100", MODEL, "--mode", "prefill", "--expert-parallel", "8", "--prompt-len", "128")
    argv += ("--batch", "2", "--json")
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    result = json.loads(out)
    assert result["expert_parallel"] == 8 and result["data_parallel"] == 8 and result["tensor_parallel"] == 1
    assert 0 < result["mfu"] <= result["utilization"] <= 1
    assert result["scaling_efficiency"] is None and "experts" in result["scaling_note"]
    comms = [layer for layer in result["layers"] if layer["name"].endswith("ep-all-to-all")]
    assert len(comms) == 2 * LAYERS and all(layer["bound"] == "communication" for layer in comms)
    assert run_cli(capsys, *argv)[1] == out


def test_each_all_to_all_takes_one_library_call_on_the_group(library: Library) -> None:
    # E = 8 replicas of one chip fill a DGX H100 node: each call is what `archsim collective` prices
    result = simulate("dgx-h100", MODEL, "prefill", 2, prompt_len=128, expert_parallel=8, library=library)
    layer = next(layer for layer in result.layers if layer.name == "layers.0.moe.dispatch.ep-all-to-all")
    spec = library.model(MODEL)
    assert spec.decoder is not None
    nbytes = EXPERTS * expert_tokens(spec.decoder, 2 * 128) * HIDDEN * 2
    call = collective("dgx-h100", "all-to-all", [nbytes], library=library)[0]
    assert layer.end_s - layer.start_s == pytest.approx(call.time_s, rel=1e-12)


def test_expert_gradients_all_reduce_over_the_replicas_holding_the_same_experts(library: Library) -> None:
    def run(nodes: int, ep: int) -> list[str]:
        result = simulate(
            "dgx-h100", MODEL, "train", 1, seq_len=256, nodes=nodes, tensor_parallel=2, expert_parallel=ep,
            recompute=Recompute.FULL.value, library=library,
        )  # fmt: skip
        assert result.data_parallel == 4 * nodes and result.expert_parallel == ep
        assert result.mfu is not None and 0 < result.mfu <= result.utilization <= 1
        return [c.name for c in result.collectives]

    spread = run(4, 8)  # DP / E = 2 replicas hold each expert
    assert any(n.startswith("expert-data-parallel all-reduce") for n in spread)
    assert any(n.startswith("all-reduce b") for n in spread)
    whole = run(2, 8)  # E = DP: no other replica holds a chip's experts, nothing to all-reduce for them
    assert not any(n.startswith("expert-data-parallel") for n in whole)
    assert any(n.startswith("all-reduce b") for n in whole)


def test_with_pipeline_stages_and_generation(library: Library) -> None:
    staged = simulate(
        "dgx-h100", MODEL, "train", 4, seq_len=256, nodes=4, tensor_parallel=2, pipeline_stages=2,
        expert_parallel=4, library=library,
    )  # fmt: skip
    assert staged.pipeline_stages == 2 and staged.expert_parallel == 4 and staged.data_parallel == 8
    assert any(layer.name.endswith("ep-all-to-all") for layer in staged.layers)
    # DP / E = 2 replicas of each stage hold the same experts: their gradients have buckets of their own
    assert any(c.name.startswith("expert all-reduce") for c in staged.collectives)
    assert any(c.name.startswith("all-reduce") for c in staged.collectives)
    whole = simulate(
        "dgx-h100", MODEL, "train", 4, seq_len=256, nodes=4, tensor_parallel=2, pipeline_stages=2,
        expert_parallel=8, library=library,
    )  # fmt: skip
    assert not any(c.name.startswith("expert") for c in whole.collectives)
    generated = simulate(
        "dgx-h100",
        MODEL,
        "generate",
        4,
        prompt_len=64,
        gen_len=8,
        expert_parallel=4,
        tensor_parallel=2,
        library=library,
    )
    assert generated.expert_parallel == 4 and generated.ttft_s is not None and generated.tpot_s is not None


def test_the_human_summary_names_the_layout(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("run", "dgx-h100", MODEL, "--mode", "decode", "--expert-parallel", "4", "--batch", "2")
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    assert "expert par.   4 chips share the experts (all-to-all)" in out


def test_expert_parallel_is_a_sweep_axis(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    spec = tmp_path / "ep.yaml"
    spec.write_text(
        "schema_version: 1\nkind: sweep\nname: ep\ndescription: expert parallel degrees\ntarget: [dgx-h100]\n"
        f"workloads: [{MODEL}]\nsettings: {{mode: decode, batch: 2, prompt_len: 64, gen_len: 8}}\n"
        "grid:\n  run.expert_parallel: [2, 8]\n"
    )
    code, _, err = run_cli(capsys, "sweep", str(spec), "--out", str(tmp_path / "out"), "--no-progress", "--jobs", "1")
    assert code == 0, err
    rows = pd.read_parquet(tmp_path / "out" / "results.parquet").sort_values("run.expert_parallel")
    assert list(rows["expert_parallel"]) == [2, 8]
    assert rows["error"].isna().all()
