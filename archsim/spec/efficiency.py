"""The efficiency parameters of a run, in one record every layer of the library merges.

A family file sets them, a software stack sets its dispatch costs over them, a chip file may override
them (:meth:`Efficiency.merged`); a family's cost model reads them resolved into its complete typed
record (:class:`archsim.spec.registry.FamilyEfficiency`).
"""

from __future__ import annotations

from archsim.spec.common import Duration, Fraction, Spec


class Efficiency(Spec):
    """Efficiency parameters of a run: family file, then software stack, then the chip's overrides.

    The software stack sets the dispatch costs (``op_overhead``, ``framework_overhead``,
    ``host_overhead``, ``step_overhead``; :mod:`archsim.spec.software`) and may set ``compute`` at a
    precision (its kernel choice).

    They are the only numbers fitted to measurements (``scripts/calibrate.py``, to
    ``calibration.csv`` only); nothing here may depend on the benchmark being run.
    """

    compute: Fraction | None = None
    """Fraction of the matrix unit's peak a large, well-shaped kernel reaches in its main loop."""
    memory_bandwidth: Fraction | None = None
    """Fraction of the main memory's peak bandwidth a streaming kernel reaches."""
    vector: Fraction | None = None
    """Fraction of the vector/CUDA-core peak an element-wise kernel reaches when not memory bound."""
    op_overhead: Duration | None = None
    """Device-side fixed cost of one op, part of its duration: the gap between back-to-back kernels
    (GPU), program step (IPU), task dispatch (Ascend)."""
    framework_overhead: Duration | None = None
    """Device idle time per op added by the framework that runs a model's ops one by one (eager
    dispatch, allocator and bookkeeping between kernels), on top of ``op_overhead``. Zero for a bare
    kernel library (``cublas``, the default of ``gemm:``, ``conv:`` and ``meta: {launch: kernel}``
    traces) and for a stack that compiles the whole graph."""
    host_overhead: Duration | None = None
    """Host-side cost of issuing one op (framework dispatch and launch call). The host issues ops
    ahead of the device; this cost shows only when ops are shorter than it (small batches)."""
    step_overhead: Duration | None = None
    """Fixed cost per training step outside the ops (optimizer bookkeeping, loss scaling, data feed);
    inference steps do not pay it."""
    exchange: Fraction | None = None
    """IPU and dataflow chips: fraction of the on-chip exchange (IPU) or mesh fabric (dataflow) bandwidth reached."""
    wave_overhead: Duration | None = None
    """GPU only: time each wave of thread blocks spends filling and draining its pipeline (the first
    operand tiles arriving from memory, the last results stored) when it cannot overlap a neighbour."""
    data_gradient: Fraction | None = None
    """GPU only: fraction of the matrix unit's peak a data-gradient convolution (cuDNN's dgrad
    kernels, ``bwd_data`` of a ``conv2d``) reaches in its main loop, in place of ``compute``. Measured
    dgrad kernels run 1.1 to 1.9 times as long as the forward kernel of the same shape and MACs
    (DeepBench, V100), while weight-gradient and forward kernels match ``compute``."""

    def merged(self, override: Efficiency) -> Efficiency:
        """A copy with every field that ``override`` sets replaced."""
        # iterating a model gives its (field, value) pairs: no serializer to build, as model_dump() would
        return self.model_copy(update={k: v for k, v in override if v is not None})
