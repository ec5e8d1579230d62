"""The ONNX ``Attention`` node -> the ops :mod:`archsim.workloads.decoder` builds for attention.

``Attention`` (opset 23) is what ``torch.onnx.export`` writes for ``scaled_dot_product_attention``
at that opset. With ``B`` sequences, ``A`` query heads, ``G`` key/value heads (grouped-query attention when fewer),
``S`` queries and ``C`` keys of size ``d`` (``dv`` for values): scores ``Q K^T`` (Gemm
``batch = B G, m = (A/G) S, n = C, k = d``), scale and mask (``scale_mask``, 2 FLOPs per score; 1
without ``is_causal`` or a mask), softmax, context ``P V`` (Gemm ``batch = B G, m = (A/G) S, n = dv,
k = C``). Inputs are 4-D ``(B, heads, S, d)`` or 3-D ``(B, S, heads * d)`` with the ``q_num_heads``
and ``kv_num_heads`` attributes. A ``past_key`` / ``past_value`` (a KV cache) is joined to the new
keys and values by a 0-FLOP copy that writes ``present_key`` / ``present_value``, and the products
read the whole cache, as the built-in decode step does. ``softcap`` and a ``qk_matmul_output`` other
than the raw scores are not modelled (refused).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from archsim.errors import SpecError
from archsim.workloads.graph import BackwardRule
from archsim.workloads.onnx_import.load import node_attrs
from archsim.workloads.trace import Gemm, OpKind, TensorAccess

if TYPE_CHECKING:
    from archsim.workloads.onnx_import.importer import Importer


def _heads(dims: tuple[int, ...], heads: int | None, source: str, node: Any) -> tuple[int, int, int]:
    """(heads, tokens, head size) of a 4-D or 3-D (with ``heads``) operand."""
    if len(dims) == 4:
        return dims[1], dims[2], dims[3]
    if len(dims) == 3 and heads:
        return heads, dims[1], dims[2] // heads
    raise SpecError(
        source, f"node {node.name or 'Attention'!r}", "a 3-D Attention input needs q_num_heads and kv_num_heads"
    )


def attention(imp: Importer, index: int, node: Any) -> None:
    """``Attention`` -> scores, scale and mask, softmax, context (see the module docstring)."""
    g, attrs, name = imp.g, node_attrs(node), imp.op_name(node, index)
    inputs = list(node.input) + [""] * (6 - len(node.input))
    outputs = list(node.output) + [""] * (4 - len(node.output))
    where = f"node {node.name or 'Attention'!r}"
    if attrs.get("softcap", 0.0) or (outputs[3] and attrs.get("qk_matmul_output_mode", 0)):
        raise SpecError(imp.source, where, "softcap and a qk_matmul_output after scaling are not modelled")
    q, k, v = (imp.info(n, node) for n in inputs[:3])
    assert q.dims is not None
    assert k.dims is not None
    assert v.dims is not None
    heads, queries, d = _heads(q.dims, attrs.get("q_num_heads"), imp.source, node)
    kv_heads, new_keys, _ = _heads(k.dims, attrs.get("kv_num_heads"), imp.source, node)
    dv = _heads(v.dims, attrs.get("kv_num_heads"), imp.source, node)[2]
    batch, group = q.dims[0], heads // max(1, kv_heads)
    keys, values = imp.access(inputs[1], node), imp.access(inputs[2], node)
    context = new_keys
    if inputs[4] and inputs[5]:  # a KV cache: past and new keys and values, copied into present
        past_k = imp.info(inputs[4], node)
        assert past_k.dims is not None
        context += past_k.dims[2]
        reads = [keys, values, *imp.reads(node, inputs[4:6])]
        present = [
            TensorAccess(outputs[i] or f"{name}.present.{i}", g.size(batch * kv_heads * context * width))
            for i, width in ((1, d), (2, dv))
        ]
        moved = g.precision.elements_in(sum(t.bytes for t in present))
        g.add(f"{name}.present", OpKind.ELEMENTWISE, 0, reads, present, rule=BackwardRule((), moved))
        keys, values = present
    scores_n = batch * heads * queries * context
    scores = TensorAccess(outputs[3] or f"{name}.scores.out", g.size(scores_n))
    query = imp.access(inputs[0], node)
    g.matmul(f"{name}.scores", Gemm(batch * kv_heads, group * queries, context, d), (query, keys), scores)
    masked = g.act(f"{name}.scale_mask.out", scores_n)
    mask = imp.reads(node, inputs[3:4]) if inputs[3] else []
    if inputs[3] or attrs.get("is_causal", 0):
        g.elementwise(f"{name}.scale_mask", "scale_mask", (scores, *mask), masked, scores_n)
    else:
        g.add(f"{name}.scale", OpKind.ELEMENTWISE, scores_n, (scores,), (masked,), rule=BackwardRule((), scores_n))
    probs = g.act(f"{name}.softmax.out", scores_n)
    g.elementwise(f"{name}.softmax", "softmax", (masked,), probs, scores_n, saved=(probs.name,), kind=OpKind.SOFTMAX)
    out = imp.out(outputs[0], node)
    g.matmul(f"{name}.context", Gemm(batch * kv_heads, group * queries, dv, context), (probs, values), out)
