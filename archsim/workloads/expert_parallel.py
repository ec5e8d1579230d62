"""Expert parallelism of a mixture-of-experts decoder: the all-to-alls between its expert shards, as comm ops.

With expert parallelism of degree ``X`` the decoder builder (:mod:`archsim.workloads.decoder`) gives a
chip ``E/X`` of the ``E`` experts, each processing the tokens routed to it from all ``X`` chips of
the expert-parallel group (DeepSpeed-MoE, Rajbhandari et al. 2022, section 5; Megatron-LM's
``--expert-model-parallel-size``). This transform adds what those chips exchange, as communication
ops of group :attr:`~archsim.workloads.trace.CommGroup.EXPERT_PARALLEL`, found by the names the
builder gives its ops. Under balanced routing every chip sends ``1/X`` of its ``E x rows x h``
dispatch buffer to each chip of the group (``(X-1)/X`` of it leaves the chip), and receives as
much: one all-to-all of the buffer's bytes (as nccl-tests counts an all-to-all: the per-chip
buffer). Per mixture-of-experts layer:

* forward (and recomputed forward): an all-to-all after ``.moe.dispatch`` (the tokens go to their
  experts' chips) and one after ``.moe.experts.down`` (the experts' outputs come back for the
  gate-weighted ``combine``);
* backward: the two conjugates, an all-to-all of the gradient of the experts' output (after the
  ``combine``'s backward writes it, before the experts' backward reads it) and one of the gradient
  of the dispatch buffers (after the experts' backward, before the dispatch's backward).

The expert weights' gradients are all-reduced only over the data-parallel replicas that hold the
same experts (``1/X`` of the data-parallel group, Megatron-LM's expert-data-parallel group; none
when ``X`` is the whole group): :func:`is_expert_gradient` tells them apart by name.

So a training step has four all-to-alls per layer (six with full recomputation, which runs the
forward again), a forward-only step two. Each runs in order with the chip's compute
(:attr:`~archsim.workloads.trace.CommOp.in_stream`): the expert layer waits for its tokens. A comm op
goes right after the op it follows and every later op that depended on that op depends on the comm
op instead. The trace is finished (training derivation, rewrites, tensor parallelism) before this.
"""

from __future__ import annotations

from dataclasses import replace

from archsim.spec.model import DecoderSection
from archsim.workloads.trace import CommGroup, CommKind, Op, Phase, Trace
from archsim.workloads.training import GRAD, RECOMPUTE
from archsim.workloads.transforms import Inserted, in_stream_after

DISPATCH = ".moe.dispatch"
"""Name ending of the op that packs each token into its experts' buffers."""
EXPERTS_OUT = ".moe.experts.down"
"""Name ending of the experts' last product (their outputs, before the combine)."""


EXPERT_WEIGHTS = ".moe.experts."
"""Infix of the experts' weights (and so of their gradients): ``layers.{i}.moe.experts.down.weight``."""


def expert_parallel_problem(cfg: DecoderSection, expert_parallel: int) -> str | None:
    """Why ``cfg``'s experts cannot be sharded over ``expert_parallel`` chips (None: they can)."""
    if expert_parallel == 1:
        return None
    if cfg.moe is None:
        return "shards a mixture of experts' experts: this model is dense (no moe section)"
    if cfg.moe.experts % expert_parallel:
        fits = ", ".join(str(x) for x in range(1, cfg.moe.experts + 1) if cfg.moe.experts % x == 0)
        return f"{expert_parallel} must divide the {cfg.moe.experts} experts; {fits} would"
    return None


def is_expert_gradient(name: str) -> bool:
    """True for the gradient of an expert's weight (sharded by expert parallelism)."""
    return EXPERT_WEIGHTS in name and name.endswith(GRAD)


def _base(name: str) -> str:
    """An op's name without a fused epilogue (``+add``) and without the recompute suffix."""
    return name.split("+", 1)[0].removesuffix(RECOMPUTE)


def _forward_comm(op: Op) -> tuple[str, int] | None:
    """(name, bytes) of the all-to-all after forward (or recomputed) op ``op``, if any."""
    base = _base(op.name)
    if base.endswith(DISPATCH):
        return f"{op.name}.ep-all-to-all", op.writes[0].bytes
    if base.endswith(EXPERTS_OUT):
        return f"{op.name}.ep-all-to-all", op.writes[0].bytes
    return None


def _backward_comms(trace: Trace) -> dict[int, list[tuple[str, int]]]:
    """Backward all-to-alls, keyed by the op after which each goes (the last writer of its gradient)."""
    last: dict[str, tuple[int, int]] = {}
    for index, op in enumerate(trace.ops):
        if op.phase in (Phase.BACKWARD_DATA, Phase.BACKWARD_WEIGHT):
            for t in op.writes:
                tensor = t.name.removesuffix(GRAD).removesuffix(".out")
                if t.name.endswith(GRAD) and tensor.endswith((DISPATCH, EXPERTS_OUT)):
                    last[t.name] = (index, t.bytes)
    after: dict[int, list[tuple[str, int]]] = {}
    for name in sorted(last, key=lambda n: (last[n][0], n)):
        index, nbytes = last[name]
        after.setdefault(index, []).append((f"{name}.ep-all-to-all", nbytes))
    return after


def with_expert_parallel(trace: Trace, expert_parallel: int) -> Trace:
    """``trace`` (one expert shard's ops) with the all-to-alls of the module docstring.

    A degree of 1 gives ``trace`` back unchanged.
    """
    if expert_parallel == 1:
        return trace
    backward = _backward_comms(trace)

    def after(index: int, op: Op) -> Inserted:
        forward = _forward_comm(op) if op.phase.computes_forward else None
        named = ([forward] if forward is not None else []) + backward.get(index, [])
        return [(name, CommKind.ALL_TO_ALL, nbytes) for name, nbytes in named]

    ops = in_stream_after(trace, after, CommGroup.EXPERT_PARALLEL)
    meta = dict(trace.meta) | {"expert_parallel": str(expert_parallel)}
    return replace(trace, ops=ops, meta=meta)
