"""Tensor (and sequence) parallelism of a decoder model: the collectives between its shards, as comm ops.

The decoder builder (:mod:`archsim.workloads.decoder`) already gives one chip's shard of every layer
when built with a tensor-parallel degree ``T`` -- the shapes are the builder's business, since only it
knows which dimension each product splits. This transform adds what the ``T`` chips say to each other,
as Megatron-LM does it (Shoeybi et al. 2019, section 3; Narayanan et al. 2021): communication ops of
group :attr:`~archsim.workloads.trace.CommGroup.TENSOR_PARALLEL`, each of the ``B x q x h``
activation (``activation_bytes``), found by the names the builder gives its ops. It runs on the
finished trace (after the training derivation and any rewrite), so that it sees the backward ops and
the recomputed forward ops too:

* forward (and recomputed forward) ops: an all-reduce after each row-parallel op -- the attention's
  output projection ``o_proj``, the feed-forward's ``down`` (a mixture of experts': its ``combine``),
  the vocabulary-parallel token embedding ``embed_tokens`` -- Megatron's ``g`` operator;
* backward ops: an all-reduce of the gradient of each column-parallel op's input -- the outputs of
  ``norm1`` (read by ``qkv``), ``norm2`` (the feed-forward) and the final ``norm`` (``lm_head``) --
  after the last op that writes it, before the norm's backward reads it (Megatron's ``f``);
* the vocabulary-parallel cross-entropy's three all-reduces of one fp32 value per token (the
  logits' maximum, the target's logit, the sum of exponentials) after the ``loss``;
* generation (prefill, decode): an all-gather of the last token's logits after ``lm_head``, to pick
  the next token.

With sequence parallelism (Korthikanti et al. 2022, section 4.2.2) each all-reduce of an activation
becomes a reduce-scatter (``g``: after the row-parallel op) and an all-gather (``g-bar``: after the
norm, before the column-parallel op), and in the backward pass the conjugates: a reduce-scatter
where the all-reduce of the norm output's gradient was, an all-gather of the row-parallel op's
output gradient before its backward. Every such collective moves the same ``activation_bytes``
(the all-gather's gathered result, the reduce-scatter's input, as nccl-tests counts them).

A comm op goes right after the op it follows and every later op that depended on that op depends on
the comm op instead; the engine runs these ops in order with the chip's compute (see
:attr:`~archsim.workloads.trace.CommOp.in_stream`). Not modelled: Megatron's re-gather of a
sequence-parallel input for the weight gradient (overlapped with the data gradient there), and the
all-reduce of the replicated norm weights' gradients under sequence parallelism (a few KiB).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from archsim.workloads.trace import CommGroup, CommKind, Mode, Op, Phase, Trace
from archsim.workloads.training import GRAD, RECOMPUTE
from archsim.workloads.transforms import Inserted, in_stream_after

ROW_PARALLEL = (".attn.o_proj", ".mlp.down", ".moe.combine")
"""Name endings of the forward ops whose output is a partial sum over the shards (plus ``embed_tokens``)."""
EMBEDDING = "embed_tokens"
NORMS = (".norm1", ".norm2")
"""Name endings of the norms whose output a column-parallel op reads (plus the final ``norm``)."""
FINAL_NORM = "norm"
LOSS_VALUES = 3
"""All-reduces of the vocabulary-parallel cross-entropy: max logit, target logit, sum of exponentials."""
LOSS_VALUE_BYTES = 4
"""Each of one fp32 value per token."""


@dataclass(frozen=True)
class ShardComm:
    """What the shards of one decoder step exchange (bytes per chip, as nccl-tests counts them)."""

    tensor_parallel: int
    sequence_parallel: bool
    activation_bytes: int
    """One ``B x q x h`` activation in the run's precision."""
    loss_tokens: int = 0
    """Tokens whose cross-entropy is computed (training)."""
    logits_bytes: int = 0
    """The gathered logits a generation step picks its tokens from (prefill, decode)."""


def _base(name: str) -> str:
    """An op's name without a fused epilogue (``+add``) and without the recompute suffix."""
    base = name.split("+", 1)[0]
    return base.removesuffix(RECOMPUTE)


def _is_row(base: str) -> bool:
    return base == EMBEDDING or base.endswith(ROW_PARALLEL)


def _is_norm(base: str) -> bool:
    return base == FINAL_NORM or base.endswith(NORMS)


def _forward_comms(op: Op, shard: ShardComm, mode: Mode) -> list[tuple[str, CommKind, int]]:
    """(name, kind, bytes) of the collectives after forward (or recomputed) op ``op``."""
    base = _base(op.name)
    sp = shard.sequence_parallel
    out: list[tuple[str, CommKind, int]] = []
    if _is_row(base):
        kind = CommKind.REDUCE_SCATTER if sp else CommKind.ALL_REDUCE
        out.append((f"{op.name}.tp-{kind.value}", kind, shard.activation_bytes))
    if sp and _is_norm(base):
        out.append((f"{op.name}.tp-all-gather", CommKind.ALL_GATHER, shard.activation_bytes))
    if base == "loss" and shard.loss_tokens:
        nbytes = shard.loss_tokens * LOSS_VALUE_BYTES
        out += [(f"loss.tp-all-reduce{k}", CommKind.ALL_REDUCE, nbytes) for k in range(LOSS_VALUES)]
    if base == "lm_head" and mode.is_generation and shard.logits_bytes:
        out.append(("lm_head.tp-all-gather", CommKind.ALL_GATHER, shard.logits_bytes))
    return out


def _backward_targets(trace: Trace, shard: ShardComm) -> dict[int, list[tuple[str, CommKind, int]]]:
    """Backward collectives, keyed by the op after which each goes (the last writer of its gradient)."""
    last_writer: dict[str, int] = {}
    for index, op in enumerate(trace.ops):
        if op.phase in (Phase.BACKWARD_DATA, Phase.BACKWARD_WEIGHT):
            for t in op.writes:
                if t.name.endswith(GRAD):
                    last_writer[t.name] = index
    sp = shard.sequence_parallel
    after: dict[int, list[tuple[str, CommKind, int]]] = {}
    for name in sorted(last_writer, key=lambda n: (last_writer[n], n)):
        tensor = name.removesuffix(GRAD).removesuffix(".out")
        if _is_norm(tensor):  # f's conjugate: the column-parallel ops' input gradient
            kind = CommKind.REDUCE_SCATTER if sp else CommKind.ALL_REDUCE
        elif sp and _is_row(tensor):  # g's conjugate under sequence parallelism
            kind = CommKind.ALL_GATHER
        else:
            continue
        label = f"{name}.tp-{kind.value}"
        after.setdefault(last_writer[name], []).append((label, kind, shard.activation_bytes))
    return after


def with_tensor_parallel(trace: Trace, shard: ShardComm) -> Trace:
    """``trace`` (one shard's ops) with the collectives between the shards (see the module docstring).

    A degree of 1 gives ``trace`` back unchanged.
    """
    if shard.tensor_parallel == 1:
        return trace
    backward = _backward_targets(trace, shard)

    def after(index: int, op: Op) -> Inserted:
        forward = _forward_comms(op, shard, trace.mode) if op.phase.computes_forward else []
        return forward + backward.get(index, [])

    ops = in_stream_after(trace, after, CommGroup.TENSOR_PARALLEL)
    meta = dict(trace.meta) | {
        "tensor_parallel": str(shard.tensor_parallel),
        "sequence_parallel": str(shard.sequence_parallel).lower(),
    }
    return replace(trace, ops=ops, meta=meta)
