"""Tensor parallelism never beats the ideal T-times speedup and never runs a chip past its peak.

A tensor-parallel group of ``T`` chips splits every product ``T`` ways, but replicates the norms and
residual adds (without sequence parallelism) and adds its collectives to each chip's stream: its
step is never shorter than one chip's step over ``T``, and its model FLOPs utilization is at most 1.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from archsim import simulate
from archsim.errors import CapacityError
from archsim.spec.library import Library

LIBRARY = Library(use_env=False)


@settings(max_examples=10, deadline=None)
@given(
    model=st.sampled_from(["gpt3-125m", "gpt3-1.3b"]),
    mode=st.sampled_from(["train", "infer", "prefill", "decode"]),
    tp=st.sampled_from([1, 2, 4]),
    sequence_parallel=st.booleans(),
    batch=st.integers(1, 8),
    tokens=st.sampled_from([64, 256, 1024]),
)
def test_tensor_parallel_is_at_most_t_times_faster(
    model: str, mode: str, tp: int, sequence_parallel: bool, batch: int, tokens: int
) -> None:
    generating = mode in ("prefill", "decode")
    seq_len, prompt_len = (None, tokens) if generating else (tokens, None)
    sp = sequence_parallel and tp > 1 and mode != "decode"
    try:
        one = simulate("h100-sxm5", model, mode, batch, seq_len=seq_len, prompt_len=prompt_len, library=LIBRARY)
    except CapacityError:
        return
    group = simulate(
        "dgx-h100",
        model,
        mode,
        batch,
        seq_len=seq_len,
        prompt_len=prompt_len,
        library=LIBRARY,
        tensor_parallel=tp,
        sequence_parallel=sp,
    )
    assert group.step_time_s * tp >= one.step_time_s * (1 - 1e-9)
    assert group.mfu is not None and one.mfu is not None
    # the group's chips do the model's work of its replicas: never more per chip than one chip alone
    assert 0 < group.mfu <= one.mfu * (1 + 1e-9) <= 1 and group.utilization <= 1
