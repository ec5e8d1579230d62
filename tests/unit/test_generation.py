"""Prefill and decode runs of decoder language models: API, CLI, tokens/s fields, KV cache and refusals."""

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


def test_decode_reports_time_per_output_token(library: Library) -> None:
    result = simulate("a100-80gb", "llama2-7b", mode="decode", batch=8, prompt_len=512, gen_len=64, library=library)
    assert result.throughput_unit == "tokens/s"
    assert result.tpot_s == result.step_time_s
    assert result.ttft_s is None
    assert result.tokens_per_s == result.throughput == pytest.approx(8 / result.step_time_s)
    assert (result.prompt_len, result.gen_len, result.seq_len) == (512, 64, 512)
    assert result.kv_cache_bytes == 8 * (512 + 64) * 2 * 32 * 32 * 128 * 2
    assert result.memory_bytes > result.kv_cache_bytes


def test_prefill_reports_time_to_first_token(library: Library) -> None:
    result = simulate("h100", "llama3-8b", mode="prefill", batch=2, prompt_len=1024, library=library)
    assert result.ttft_s == result.step_time_s
    assert result.tpot_s is None and result.gen_len is None
    assert result.tokens_per_s == pytest.approx(2 * 1024 / result.step_time_s)


def test_samples_per_second_elsewhere(library: Library) -> None:
    result = simulate("a100-80gb", "gpt2", mode="infer", batch=2, seq_len=128, library=library)
    assert result.throughput_unit == "sequences/s"
    # a decoder's infer and train runs count their tokens too (issue 22): the step's tokens over its time
    assert result.tokens_per_s == pytest.approx(2 * 128 / result.step_time_s)
    assert result.ttft_s is None and result.tpot_s is None
    assert result.kv_cache_bytes == 0


def test_decode_weights_are_read_from_memory(library: Library) -> None:
    # one token per sequence: every weight product is a matrix-vector product, bound by HBM -- or, at
    # batch 1, by the framework's per-op dispatch where that is longer still (the ``overhead`` label),
    # never by compute
    for chip in ("v100", "a100-80gb", "h100", "ascend910"):
        result = simulate(chip, "llama2-7b", mode="decode", batch=1, library=library)
        weights = [layer for layer in result.layers if layer.name.endswith(("qkv", "o_proj", "gate_up", "down"))]
        assert weights and all(layer.bound in ("memory", "overhead") for layer in weights), chip
        assert any(layer.bound == "memory" for layer in weights), chip


def test_decode_step_is_never_faster_than_reading_the_weights(library: Library) -> None:
    chip = library.chip("h100")
    result = simulate("h100", "llama3-8b", mode="decode", batch=4, library=library)
    weight_bytes = 8_030_261_248 * 2
    assert result.step_time_s >= (weight_bytes + result.kv_cache_bytes / 2) / chip.memory.main.bandwidth


def test_longer_generations_cost_more_per_token(library: Library) -> None:
    short = simulate("a100-80gb", "llama2-7b", mode="decode", batch=16, prompt_len=128, gen_len=16, library=library)
    long = simulate("a100-80gb", "llama2-7b", mode="decode", batch=16, prompt_len=128, gen_len=2048, library=library)
    assert long.tpot_s is not None and short.tpot_s is not None
    assert long.tpot_s > short.tpot_s
    assert long.kv_cache_bytes > short.kv_cache_bytes


def test_a_kv_cache_that_does_not_fit_names_the_largest_batch(library: Library) -> None:
    with pytest.raises(CapacityError) as err:
        simulate("a100-80gb", "llama2-7b", mode="decode", batch=512, prompt_len=1024, gen_len=1024, library=library)
    line = err.value.line()
    assert "KV cache" in line and "the largest batch that fits is 66" in line
    fits = simulate("a100-80gb", "llama2-7b", mode="decode", batch=66, prompt_len=1024, gen_len=1024, library=library)
    assert fits.memory_bytes <= fits.memory_capacity_bytes
    with pytest.raises(CapacityError):
        simulate("a100-80gb", "llama2-7b", mode="decode", batch=67, prompt_len=1024, gen_len=1024, library=library)


@pytest.mark.parametrize(
    ("workload", "kwargs", "fragment"),
    [
        ("resnet50", {"mode": "decode"}, "decoder language models only, not resnet50"),
        ("bert-base", {"mode": "prefill"}, "decoder language models only, not bert-base"),
        ("gemm:64x64x64", {"mode": "decode"}, "decoder language models only"),
        ("gpt2", {"mode": "decode", "seq_len": 64}, "use --prompt-len"),
        ("gpt2", {"mode": "infer", "prompt_len": 64}, "other modes take --seq-len"),
        ("gpt2", {"mode": "prefill", "gen_len": 8}, "--mode decode only"),
        ("gpt2", {"mode": "decode", "prompt_len": 1000, "gen_len": 100}, "exceed gpt2's max_position of 1024"),
        ("gpt2", {"mode": "train", "seq_len": 2048}, "2048 tokens exceed gpt2's max_position"),
        ("gpt2", {"mode": "decode", "gen_len": 0}, "must be a positive integer"),
    ],
)
def test_refusals(library: Library, workload: str, kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(UsageError) as err:
        simulate("a100-80gb", workload, library=library, **kwargs)
    assert fragment in err.value.line()


def test_cli_decode_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys, "run", "a100-80gb", "gpt2", "--mode", "decode", "--prompt-len", "100", "--gen-len", "20", "--json"
    )
    assert (code, err) == (0, "")
    record = json.loads(out)
    assert record["mode"] == "decode" and record["throughput_unit"] == "tokens/s"
    assert record["tpot_s"] == record["step_time_s"] and record["ttft_s"] is None
    assert (record["prompt_len"], record["gen_len"]) == (100, 20)
    assert record["tokens_per_s"] == record["throughput"]


def test_cli_prefill_summary(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "run", "h100", "llama3-8b", "--mode", "prefill", "--prompt-len", "256")
    assert code == 0
    assert "tokens/s" in out and "time to first token" in out and "kv cache" in out


def test_cli_data_parallel_decode(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "run", "dgx-a100", "llama2-7b", "--mode", "decode", "--batch", "4", "--json")
    assert code == 0
    record = json.loads(out)
    assert record["num_chips"] == 8
    assert record["tokens_per_s"] == pytest.approx(8 * 4 / record["step_time_s"])
    assert record["scaling_efficiency"] <= 1.0


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["run", "v100", "resnet50", "--mode", "prefill"], "resnet50: --mode: prefill generates text"),
        (["run", "a100-80gb", "llama2-70b", "--mode", "decode"], "not even a batch of 1 fits"),
        (["run", "a100-80gb", "gpt2", "--mode", "decode", "--gen-len", "x"], "--gen-len"),
    ],
)
def test_cli_errors_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("archsim: error: ") and fragment in err


def test_report_and_plots_take_the_generation_options(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    page = tmp_path / "decode.html"
    argv = ("report", "run", "a100-80gb", "gpt2", "--mode", "decode", "--prompt-len", "64", "--gen-len", "32")
    code, _, err = run_cli(capsys, *argv, "--out", str(page))
    assert (code, err) == (0, "")
    assert "tokens/s" in page.read_text()
    figure = tmp_path / "roofline.html"
    plot = ("plot", "roofline", "h100", "llama3-8b", "--mode", "prefill", "--prompt-len", "128")
    assert run_cli(capsys, *plot, "--out", str(figure))[0] == 0


def test_generation_on_a_system_is_data_parallel_only(library: Library) -> None:
    with pytest.raises(UsageError, match="pipelined generation is not modelled"):
        simulate("dgx-a100", "llama2-7b", mode="decode", pipeline_stages=2, batch=4, library=library)
    with pytest.raises(CapacityError) as err:
        simulate("a100-80gb", "gpt3-175b", mode="decode", library=library)
    assert "pipeline" not in err.value.line()  # no remedy that generation cannot take


def test_cli_system_summary_counts_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "run", "dgx-a100", "gpt2", "--mode", "decode", "--batch", "2")
    assert code == 0
    assert "tokens/s alone" in out and "samples/s" not in out


def test_a_decode_trace_file_runs_as_built(library: Library, tmp_path: Path) -> None:
    from archsim.spec.common import Precision
    from archsim.workloads import build_trace, write_trace
    from archsim.workloads.options import TraceOptions
    from archsim.workloads.trace import Mode

    trace = build_trace("gpt2", library, Mode.DECODE, 2, Precision.FP16, 64, TraceOptions(gen_len=16))
    path = tmp_path / "decode.yaml"
    write_trace(trace, path)
    result = simulate("a100-80gb", str(path), mode="decode", library=library)
    built = simulate("a100-80gb", "gpt2", mode="decode", batch=2, prompt_len=64, gen_len=16, library=library)
    assert (result.gen_len, result.kv_cache_bytes, result.tpot_s) == (16, built.kv_cache_bytes, built.tpot_s)
    with pytest.raises(UsageError, match="already built for its generation length"):
        simulate("a100-80gb", str(path), mode="decode", gen_len=8, library=library)
