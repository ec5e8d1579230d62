"""Synchronized batch normalization: batch-norm statistics shared by a group of chips, as comm ops.

A data-parallel step normalizes each batch-norm layer over the chip's own images. With small
batches per chip, training runs normalize over a group of ``G`` consecutive chips instead: Google's
MLPerf ResNet-50 logs name the span in images (``model_bn_span``: 64 images over 4 TPU v4 chips of
16 each in its v1.0 2,048-chip run, 128 over 4 TPU v3 chips of 32 in its v0.6 1,024-chip run), and
NVIDIA's MXNet ResNet-50 takes ``--bn-group`` in GPUs. Each batch-norm then all-reduces its
statistics over the group before it normalizes: in the forward pass the per-channel sum and sum of
squares, in the backward pass the per-channel sums of the output gradient and of its product with
the normalized input (Ioffe & Szegedy 2015, section 3; the two reductions of a batch-norm's backward
pass). Each is ``2 x C`` fp32 values for ``C`` channels, the size of the statistics a batch-norm
saves.

The all-reduces are ops of group :attr:`~archsim.workloads.trace.CommGroup.BATCH_NORM`, inserted
right after the batch-norm op that needs them (its forward op, and its backward op), in the chip's
stream: the normalization cannot go on before the group's statistics arrive
(:attr:`~archsim.workloads.trace.CommOp.in_stream`). The batch-norm's own time is unchanged (it is
priced whole, statistics and normalization together). A group of 1 gives the trace back unchanged.
"""

from __future__ import annotations

from dataclasses import replace

from archsim.workloads.trace import CommGroup, CommKind, Op, OpKind, Phase, Role, Trace
from archsim.workloads.transforms import Inserted, in_stream_after

STAT_BYTES = 4
"""Bytes of one statistic: batch-norm statistics are kept in fp32 whatever the precision."""


def channels(op: Op, element_bytes: float) -> int:
    """The channels a batch-norm op normalizes: the elements of its scale (its first weight)."""
    weight = next(t for t in op.reads if t.role is Role.WEIGHT)
    return round(weight.bytes / element_bytes)


def with_batch_norm_group(trace: Trace, chips: int) -> Trace:
    """``trace`` with each batch-norm's statistics all-reduced over ``chips`` chips (see the module docstring)."""
    if chips == 1:
        return trace
    element = trace.precision.element_bytes

    def after(index: int, op: Op) -> Inserted:
        if op.kind is not OpKind.BATCHNORM or op.phase not in (Phase.FORWARD, Phase.BACKWARD_DATA):
            return []
        nbytes = 2 * STAT_BYTES * channels(op, element)
        return [(f"{op.name}.bn-all-reduce", CommKind.ALL_REDUCE, nbytes)]

    ops = in_stream_after(trace, after, CommGroup.BATCH_NORM)
    return replace(trace, ops=ops, meta=dict(trace.meta) | {"bn_group": str(chips)})
