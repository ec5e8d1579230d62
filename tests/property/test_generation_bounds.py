"""Prefill and decode runs stay physically possible for any batch, prompt and generation length.

Every weight is read from main memory at least once per step, so no step is shorter than the
weights over the chip's bandwidth; no run exceeds the chip's peak; tokens per second is the batch's
tokens over the step; and the memory a run reports holds its weights and whole KV cache.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from archsim import simulate
from archsim.errors import CapacityError
from archsim.spec.library import Library

LIBRARY = Library(use_env=False)


@settings(max_examples=12, deadline=None)
@given(
    chip=st.sampled_from(["v100-32gb", "a100-80gb", "h100", "ascend910", "tpu-v4"]),
    model=st.sampled_from(["gpt2", "gpt3-125m", "llama2-7b"]),
    mode=st.sampled_from(["prefill", "decode"]),
    batch=st.integers(1, 64),
    prompt=st.integers(1, 512),
    gen=st.integers(1, 256),
)
def test_generation_is_physically_possible(chip: str, model: str, mode: str, batch: int, prompt: int, gen: int) -> None:
    gen_len = gen if mode == "decode" else None
    try:
        result = simulate(chip, model, mode=mode, batch=batch, prompt_len=prompt, gen_len=gen_len, library=LIBRARY)
    except CapacityError:
        return  # refused in one line (tested elsewhere): nothing to bound
    spec = LIBRARY.chip(chip)
    cfg = LIBRARY.model(model).decoder
    assert cfg is not None
    parameters = {"gpt2": 124_439_808, "gpt3-125m": 125_226_240, "llama2-7b": 6_738_415_616}[model]
    weight_bytes = spec.default_precision.nbytes(parameters)
    # tables that are only looked up (learned positions; an untied input table) are read row by row;
    # every other weight is read whole at least once
    rows = (cfg.max_position if cfg.positions.value == "learned" else 0) + (0 if cfg.tied_embeddings else cfg.vocab)
    table = spec.default_precision.nbytes(rows * cfg.hidden)
    assert result.step_time_s >= (weight_bytes - table) / spec.memory.main.bandwidth
    assert 0 < result.utilization <= 1
    tokens = batch * (prompt if mode == "prefill" else 1)
    assert result.tokens_per_s == result.throughput
    assert abs(result.throughput * result.step_time_s - tokens) <= 1e-9 * tokens
    assert result.memory_bytes >= weight_bytes + result.kv_cache_bytes
    assert result.memory_bytes <= result.memory_capacity_bytes
