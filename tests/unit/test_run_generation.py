"""``--mode generate`` (a prefill then decode steps) and ``max_batch``: API, CLI, JSON, sweeps, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from archsim import simulate
from archsim.errors import CapacityError, UsageError
from archsim.spec.library import Library
from tests.cli import run_cli


@pytest.fixture(scope="module")
def library() -> Library:
    return Library(use_env=False)


def test_generate_is_a_prefill_then_n_decode_steps(library: Library) -> None:
    asked = {"batch": 4, "prompt_len": 96, "library": library}
    generate = simulate("a100-80gb", "gpt2", mode="generate", gen_len=33, **asked)
    prefill = simulate("a100-80gb", "gpt2", mode="prefill", **asked)
    decode = simulate("a100-80gb", "gpt2", mode="decode", gen_len=33, **asked)
    assert generate.mode == "generate" and generate.throughput_unit == "tokens/s"
    assert generate.ttft_s == prefill.step_time_s
    assert generate.tpot_s == decode.step_time_s  # the mean-context step: 33 steps cost 33 of it
    assert generate.e2e_s == generate.step_time_s == pytest.approx(prefill.step_time_s + 33 * decode.step_time_s)
    assert generate.flops == prefill.flops + 33 * decode.flops
    assert generate.output_tokens_per_s == generate.throughput == pytest.approx(4 * 33 / generate.e2e_s)
    assert generate.tokens_per_s == pytest.approx(4 * (96 + 33) / generate.e2e_s)
    assert generate.energy_j == pytest.approx(prefill.energy_j + 33 * decode.energy_j)
    assert generate.kv_cache_bytes == decode.kv_cache_bytes
    assert generate.memory_bytes == max(prefill.memory_bytes, decode.memory_bytes)
    for bound, seconds in generate.time_by_bound.items():
        assert seconds == pytest.approx(prefill.time_by_bound[bound] + 33 * decode.time_by_bound[bound])
    assert generate.ops_time_s == pytest.approx(prefill.ops_time_s + 33 * decode.ops_time_s)
    assert 0 < generate.utilization <= 1
    names = [layer.name for layer in generate.layers]
    assert names == [f"prefill.{x.name}" for x in prefill.layers] + [f"decode.{x.name}" for x in decode.layers]
    assert prefill.max_batch is not None and decode.max_batch is not None
    assert generate.max_batch == min(prefill.max_batch, decode.max_batch)


def test_n_mean_context_steps_cost_the_n_steps_of_the_generation(library: Library) -> None:
    # the t-th step attends to P + t keys: a decode run of one token at prompt P + t - 1 prices it alone
    n, prompt = 9, 64
    generate = simulate("h100", "gpt2", mode="generate", batch=8, prompt_len=prompt, gen_len=n, library=library)
    steps = [
        simulate("h100", "gpt2", mode="decode", batch=8, prompt_len=prompt + t - 1, gen_len=1, library=library)
        for t in range(1, n + 1)
    ]
    assert generate.tpot_s is not None
    assert n * generate.tpot_s == pytest.approx(sum(step.step_time_s for step in steps), rel=1e-4)


def test_generate_without_a_batch_takes_the_smaller_default(library: Library) -> None:
    generate = simulate("a100-80gb", "llama2-7b", mode="generate", prompt_len=1024, gen_len=1024, library=library)
    decode = simulate("a100-80gb", "llama2-7b", mode="decode", prompt_len=1024, gen_len=1024, library=library)
    assert generate.batch == decode.batch
    assert generate.tpot_s == decode.tpot_s


@pytest.mark.parametrize("mode", ["prefill", "decode", "generate"])
def test_max_batch_fits_and_one_more_is_refused(capsys: pytest.CaptureFixture[str], mode: str) -> None:
    lengths = ["--prompt-len", "1024"] + (["--gen-len", "1024"] if mode != "prefill" else [])
    argv = ["run", "a100-80gb", "llama2-7b", "--mode", mode, *lengths]
    code, out, err = run_cli(capsys, *argv, "--batch", "1", "--json")
    assert (code, err) == (0, "")
    largest = json.loads(out)["max_batch"]
    assert largest > 1
    if mode != "prefill":  # the decode step's KV cache of 2048 tokens per sequence decides (test_generation)
        assert largest == 66
    code, out, err = run_cli(capsys, *argv, "--batch", str(largest), "--json")
    assert (code, err) == (0, "")
    record = json.loads(out)
    assert record["batch"] == largest and record["max_batch"] == largest
    assert record["memory_bytes"] <= record["memory_capacity_bytes"]
    code, out, err = run_cli(capsys, *argv, "--batch", str(largest + 1))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"the largest batch that fits is {largest}" in err


def test_max_batch_on_a_system_counts_per_replica(library: Library) -> None:
    chip = simulate("a100-80gb", "llama2-7b", mode="generate", batch=2, library=library)
    system = simulate("dgx-a100", "llama2-7b", mode="generate", batch=2, library=library)
    assert system.max_batch == chip.max_batch
    assert system.num_chips == 8 and system.global_batch == 16
    assert system.output_tokens_per_s == pytest.approx(16 * 128 / system.e2e_s)
    assert system.scaling_efficiency is not None and system.scaling_efficiency <= 1.0
    with pytest.raises(CapacityError):
        simulate("dgx-a100", "llama2-7b", mode="generate", batch=system.max_batch + 1, library=library)


def test_other_modes_have_no_generation_fields(library: Library) -> None:
    result = simulate("a100-80gb", "gpt2", mode="infer", batch=2, library=library)
    assert (result.max_batch, result.e2e_s, result.output_tokens_per_s) == (None, None, None)


def test_cli_generate_json_and_summary(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("run", "h100", "gpt2", "--mode", "generate", "--batch", "8", "--prompt-len", "64", "--gen-len", "16")
    code, out, err = run_cli(capsys, *argv, "--json")
    assert (code, err) == (0, "")
    record = json.loads(out)
    for name in ("ttft_s", "tpot_s", "e2e_s", "output_tokens_per_s", "tokens_per_s", "max_batch"):
        assert isinstance(record[name], (int, float)) and record[name] > 0, name
    assert (record["mode"], record["prompt_len"], record["gen_len"]) == ("generate", 64, 16)
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0
    assert "time to first token" in out and "output tokens/s" in out and "the largest batch that fits is" in out


def test_report_and_timeline_take_generate(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = ("h100", "gpt2", "--mode", "generate", "--prompt-len", "32", "--gen-len", "8")
    code, _, err = run_cli(capsys, "plot", "timeline", *argv, "--out", str(tmp_path / "t.html"))
    assert (code, err) == (0, "")
    code, _, err = run_cli(capsys, "run", *argv, "--timeline", str(tmp_path / "t.json"))
    assert (code, err) == (0, "")
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    names = {e["name"] for e in events if e["ph"] == "X"}
    assert "embed_tokens" in names and "decode.embed_tokens" in names  # the prefill, then one decode step


def test_generate_in_a_sweep(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    spec = tmp_path / "gen.yaml"
    spec.write_text(
        "schema_version: 1\nkind: sweep\nname: gen\ndescription: generate over batches\ntarget: [h100]\n"
        "workloads: [gpt2]\nsettings: {mode: generate, prompt_len: 64, gen_len: 16}\ngrid:\n  run.batch: [1, 4]\n"
    )
    code, _, err = run_cli(capsys, "sweep", str(spec), "--out", str(tmp_path / "out"), "--jobs", "1", "--no-progress")
    assert code == 0, err
    rows = pd.read_parquet(tmp_path / "out" / "results.parquet").sort_values("run.batch")
    assert list(rows["mode"]) == ["generate", "generate"]
    assert (rows["e2e_s"] > rows["ttft_s"]).all() and (rows["max_batch"] > 4).all()


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (
            ["run", "v100", "resnet50", "--mode", "generate"],
            "--mode: prefill generates text: decoder language models only",
        ),
        (["run", "h100", "gpt2", "--mode", "generate", "--seq-len", "64"], "use --prompt-len"),
        (["run", "h100", "gpt2", "--mode", "generate", "--prompt-len", "1000", "--gen-len", "100"], "max_position"),
        (["run", "dgx-a100", "gpt2", "--mode", "generate", "--pipeline-stages", "2"], "pipelined generation"),
        (["run", "a100-80gb", "llama2-70b", "--mode", "generate"], "not even a batch of 1 fits"),
        (["trace", "export", "gpt2", "--mode", "generate", "--out", "x.et"], "--mode"),
    ],
)
def test_cli_refusals_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("archsim: error: ") and fragment in err


def test_a_generate_trace_is_never_built(library: Library) -> None:
    from archsim.spec.common import Precision
    from archsim.workloads import build_trace
    from archsim.workloads.trace import Mode

    with pytest.raises(UsageError, match="prefill then decode steps"):
        build_trace("gpt2", library, Mode.GENERATE, 1, Precision.FP16, 64)
