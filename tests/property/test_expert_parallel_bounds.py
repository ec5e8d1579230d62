"""Expert parallelism never runs a chip past its peak and never moves its all-to-alls faster than the links.

With expert parallelism of degree ``E`` every chip still does its own tokens' expert work (balanced
routing), so its model FLOPs utilization stays at most its utilization, itself at most 1; and each
all-to-all sends ``(E-1)/E`` of its buffer off the chip, which no link of the group's fabric can carry
faster than the chip's fastest egress.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from archsim import simulate
from archsim.errors import CapacityError
from archsim.run.target import fabric_for
from archsim.run.tensor_parallel import group_fabric
from archsim.spec.library import Library
from archsim.workloads.decoder import expert_tokens

LIBRARY = Library(use_env=False)
FABRIC = fabric_for(LIBRARY.system("dgx-h100"), LIBRARY, 2, "dgx-h100")


@settings(max_examples=6, deadline=None)
@given(
    mode=st.sampled_from(["train", "infer", "prefill", "decode"]),
    ep=st.sampled_from([2, 4, 8]),
    tp=st.sampled_from([1, 2]),
    batch=st.integers(1, 4),
    tokens=st.sampled_from([32, 128]),
)
def test_expert_parallel_stays_under_peak_and_above_the_links(
    mode: str, ep: int, tp: int, batch: int, tokens: int
) -> None:
    if mode == "train":  # the one layout of 16 H100s whose optimizer state fits: experts over 8, layers over 2
        ep, tp = 8, 2
    generating = mode in ("prefill", "decode")
    seq_len, prompt_len = (None, tokens) if generating else (tokens, None)
    try:
        result = simulate(
            "dgx-h100", "mixtral-8x7b", mode, batch, seq_len=seq_len, prompt_len=prompt_len, nodes=2,
            tensor_parallel=tp, expert_parallel=ep, recompute="full" if mode == "train" else None, library=LIBRARY,
        )  # fmt: skip
    except CapacityError:
        return
    assert result.expert_parallel == ep
    assert result.mfu is not None and 0 < result.mfu <= result.utilization * (1 + 1e-9) <= 1 + 1e-9
    group = group_fabric(FABRIC, ep, tp)
    fastest = max(tier.egress_bytes_per_s / tier.chips_per_member for tier in group.tiers)
    cfg = LIBRARY.model("mixtral-8x7b").decoder
    assert cfg is not None and cfg.moe is not None
    queries = 1 if mode == "decode" else tokens
    nbytes = cfg.moe.experts * expert_tokens(cfg, batch * queries) * cfg.hidden * 2  # fp16 buffers
    comms = [layer for layer in result.layers if layer.name.endswith("ep-all-to-all")]
    assert len(comms) >= 2 * cfg.layers
    for layer in comms:
        assert layer.end_s - layer.start_s >= nbytes * (ep - 1) / ep / fastest
