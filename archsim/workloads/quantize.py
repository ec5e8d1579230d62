"""Block-scaled 4-bit runs (``nvfp4``, ``mxfp4``): the products of weights in the format, the rest in fp8.

What runs in 4 bits is what TensorRT-LLM's NVFP4 recipe quantizes: the GEMMs of a layer's weights and
the activations they read, at block size 16 for both (github NVIDIA/TensorRT-LLM pull 8526: "TRTLLM
supports NVFP4 precision with blocksize=16 for both activations and GEMM weights"); the producer of a
quantized activation writes it in 4 bits (TensorRT-LLM fuses the quantization into the kernel before
the GEMM, e.g. its attention kernel's NVFP4 output for ``o_proj``: ``enable_attn_nvfp4_output`` in the
same pull), so every op reading that tensor reads 4 bits. Attention's own products (scores and
context, whose operands are both activations), norms, softmax and the other element-wise ops, and the
KV cache stay in higher precision: fp8 here, TensorRT-LLM's FP8 KV cache and FP8 attention
(nvidia.github.io/TensorRT-LLM/features/quantization.html: FP8 KV cache). The output head and a
mixture's router are quantized too (Model Optimizer's NVFP4 configuration leaves them in 16 bits:
under 0.5 % of a 70B model's weights, not modelled).

:func:`quantized_trace` turns a trace built at the format's :attr:`~archsim.spec.common.Precision.storage`
(fp8) into the format's: each weight product's two operands (its ``A`` activation and ``B`` weight)
take the format's size with their scales, everywhere they are read or written, and the trace's
memory follows (weights, live activations). :func:`is_quantized` tells the cost models which ops run
at the format's matrix rate (:mod:`archsim.models.block_scaled`). Training in 4 bits is refused: its
recipes (NVIDIA Transformer Engine's NVFP4 training: 2D weight blocks, random Hadamard transforms,
stochastic rounding of gradients) are a different mechanism, not modelled.
"""

from __future__ import annotations

from collections.abc import Callable

from archsim.errors import UsageError
from archsim.spec.common import Precision
from archsim.workloads.memory import WEIGHT_BYTES_META, peak_live_bytes, weight_bytes
from archsim.workloads.trace import Mode, Op, Role, TensorAccess, Trace

GENERIC_PROBLEM = "fp4 is a chip's own block-scaled format: without a chip, name it (nvfp4 or mxfp4)"
"""The one-line refusal of ``fp4`` where no chip resolves it (a trace built or imported on its own)."""


def is_quantized(op: Op) -> bool:
    """True for a product of a weight (a matrix op whose ``B`` operand is a weight): it runs in 4 bits."""
    return op.kind.is_matrix and op.gemm is not None and len(op.reads) >= 2 and op.reads[1].role is Role.WEIGHT


def check_mode(mode: Mode, precision: Precision, source: str) -> None:
    """Refuse (one line) a block-scaled precision outside inference."""
    if precision.block_scaling is not None and mode is Mode.TRAIN:
        problem = (
            f"{precision.value} is modelled for inference (TensorRT-LLM's 4-bit GEMMs); training in 4 bits "
            f"is not modelled: train at {precision.storage.value}"
        )
        raise UsageError(source, "--precision", problem)


def at_format(precision: Precision, mode: Mode, source: str, build: Callable[[Precision], Trace]) -> Trace:
    """``build(precision)``; for a block-scaled format ``build`` at its storage, then quantized.

    ``fp4`` (no chip to resolve it) and 4-bit training are refused in one line naming ``source``.
    """
    if precision.is_generic:
        raise UsageError(source, "--precision", GENERIC_PROBLEM)
    if precision.block_scaling is None:
        return build(precision)
    check_mode(mode, precision, source)
    return quantized_trace(build(precision.storage), precision)


def quantized_trace(trace: Trace, precision: Precision) -> Trace:
    """``trace`` (built at ``precision.storage``) with its weight products' operands in ``precision``.

    A tensor read as an operand of a weight product is resized from its element count at the storage
    precision to ``precision.nbytes`` of it, in every op that reads or writes it; weights count whole
    (a product reads all of its weight). The trace's memory changes by what its weights and its peak
    of live activations change; ``meta["weight_bytes"]`` records the weights for the memory split.
    """
    storage = trace.precision
    assert precision.block_scaling is not None, precision
    assert storage is precision.storage, (precision, storage)
    quantized = {t.name for op in trace.ops if is_quantized(op) for t in op.reads[:2]}

    def resize(t: TensorAccess) -> TensorAccess:
        if t.name not in quantized:
            return t
        return TensorAccess(t.name, precision.nbytes(storage.elements_in(t.bytes)), t.role, t.cached)

    ops = tuple(
        op if not any(t.name in quantized for t in (*op.reads, *op.writes)) else _with_tensors(op, resize)
        for op in trace.ops
    )
    weights = {op.reads[1].name: storage.elements_in(op.reads[1].bytes) for op in trace.ops if is_quantized(op)}
    added = sum(precision.nbytes(n) - storage.nbytes(n) for n in weights.values())  # scales included
    memory = trace.memory_bytes + added - peak_live_bytes(trace.ops) + peak_live_bytes(ops)
    meta = {**trace.meta, WEIGHT_BYTES_META: str(weight_bytes(trace) + added)}
    return Trace(trace.name, trace.mode, trace.batch, precision, ops, trace.parameters, memory, trace.seq_len, meta)


def _with_tensors(op: Op, resize: Callable[[TensorAccess], TensorAccess]) -> Op:
    reads = tuple(resize(t) for t in op.reads)
    writes = tuple(resize(t) for t in op.writes)
    return Op(op.name, op.kind, op.phase, op.flops, reads, writes, op.deps, op.gemm, op.conv, op.comm)
