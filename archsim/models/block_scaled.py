"""The cost model of a block-scaled 4-bit run: the family's model at the format and at fp8, op by op.

An ``nvfp4`` or ``mxfp4`` run (:mod:`archsim.workloads.quantize`) runs its products of weights in the
4-bit format and everything else (attention's products, element-wise work) at fp8. The chip's family
model is built twice, once per precision, and each op is priced by the one its precision is:
:func:`~archsim.workloads.quantize.is_quantized` ops at the format's matrix rate and element size
(block scales counted in the bytes they move), the rest at fp8's. The block scales cost the matrix
units no extra time: the 4-bit MMA instructions take the scales as operands and apply them per block
in the tensor core (PTX ``tcgen05.mma ... kind::mxf4nvf4.block_scale`` on Blackwell; AMD CDNA 4's
``V_MFMA_SCALE_F32_*_F8F6F4``, which consumes MXFP4 operands with their E8M0 scales natively), so no
dequantization pass is priced. Quantizing an activation is fused into the kernel that writes it and
its few element-wise operations per element are not counted.
"""

from __future__ import annotations

from archsim.models.base import CostModel, OpCost
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Precision
from archsim.workloads.quantize import is_quantized
from archsim.workloads.trace import Op


class BlockScaledModel:
    """Prices a block-scaled run's ops with ``quantized`` (at the format) or ``rest`` (at its storage)."""

    def __init__(self, quantized: CostModel, rest: CostModel) -> None:
        assert quantized.precision.block_scaling is not None, quantized.precision
        assert rest.precision is quantized.precision.storage, (quantized.precision, rest.precision)
        self.quantized = quantized
        self.rest = rest
        self.chip: ChipSpec = quantized.chip
        self.precision: Precision = quantized.precision
        self.separate_units: bool = quantized.separate_units

    def __getattr__(self, name: str) -> object:
        # what a caller reads of the family model (rates, sections) is the format's
        return getattr(self.quantized, name)

    def cost(self, op: Op) -> OpCost:
        """The op's cost on the model of its precision."""
        return (self.quantized if is_quantized(op) else self.rest).cost(op)
