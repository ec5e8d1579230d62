"""The layer trace: an ordered list of ops with shapes, FLOPs, bytes per tensor and dependencies.

A trace is built for one mode (training or inference), one per-chip batch, one precision and, for
sequence models, one sequence length; byte counts already include the element size. Ops are in a
topological order: every dependency of op ``i`` has an index smaller than ``i``.

Conventions:

* ``flops`` counts a multiply-accumulate as 2 operations.
* A matrix product is described by its :class:`Gemm` view ``C[b, m, n] += A[b, m, k] @ B[b, k, n]``;
  a convolution also keeps its :class:`ConvShape` and has the implicit-GEMM view of its pass
  (forward: ``m = N*P*Q, n = K, k = C*R*S``).
* ``reads`` and ``writes`` list every tensor an op touches once, with its bytes and role; cost models
  decide how much of that traffic reaches each memory level. For an op with a ``gemm`` view the first
  read is the ``A`` operand (the ``m x k`` side), the second the ``B`` operand (the ``k x n`` side);
  any further reads (a bias, saved statistics) follow.
* A communication op (kind :attr:`OpKind.COMM`) carries a :class:`CommOp`: what it does (a collective
  or a send or receive), over which chips and how many bytes; it has no FLOPs and no tensors. Chip
  cost models never see one: the multi-chip engine runs it on the system's links
  (:mod:`archsim.engine.parallel`). Built traces hold compute ops only; data parallelism adds its
  gradient all-reduces as a transform (:mod:`archsim.workloads.transforms`), and a Chakra ET brings
  its own (:mod:`archsim.workloads.chakra`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from archsim.spec.common import Precision

LAUNCH_KERNEL = "kernel"
"""``Trace.meta["launch"]`` of a bare library kernel that a benchmark calls back to back, without a
framework between the calls (``gemm:`` and ``conv:`` workloads set it; so may a trace file)."""


class OpKind(enum.StrEnum):
    """What an op computes; cost models dispatch on it."""

    CONV = "conv2d"
    MATMUL = "matmul"
    BATCHNORM = "batchnorm"
    LAYERNORM = "layernorm"
    SOFTMAX = "softmax"
    ELEMENTWISE = "elementwise"
    POOL = "pool"
    EMBEDDING = "embedding"
    LOSS = "loss"
    OPTIMIZER = "optimizer"
    COMM = "comm"
    """Communication between chips (its :class:`CommOp` says what): priced by the system's links, never
    by a chip's cost model."""

    @property
    def is_matrix(self) -> bool:
        """True for ops that run on the matrix unit (tensor cores, AMP, cube, systolic array)."""
        return self in (OpKind.CONV, OpKind.MATMUL)

    @property
    def is_comm(self) -> bool:
        """True for communication ops (see :class:`CommOp`)."""
        return self is OpKind.COMM


COMPUTE_KINDS = tuple(kind for kind in OpKind if not kind.is_comm)
"""The kinds a chip's cost model prices (every kind but :attr:`OpKind.COMM`)."""


class CommKind(enum.StrEnum):
    """What a communication op does: a collective over its group, or one side of a point-to-point copy."""

    ALL_REDUCE = "all-reduce"
    ALL_GATHER = "all-gather"
    REDUCE_SCATTER = "reduce-scatter"
    BROADCAST = "broadcast"
    ALL_TO_ALL = "all-to-all"
    REDUCE = "reduce"
    GATHER = "gather"
    SCATTER = "scatter"
    BARRIER = "barrier"
    SEND = "send"
    RECV = "recv"

    @property
    def is_point_to_point(self) -> bool:
        """True for a send or a receive (one peer), False for a collective (a group)."""
        return self in (CommKind.SEND, CommKind.RECV)


class CommGroup(enum.StrEnum):
    """Which chips take part in a communication op.

    ``data-parallel``: the chips that hold replicas of the same stage (all of them without pipelining);
    ``all``: every chip of the system; ``peer``: one neighbour over the innermost tier (send, receive);
    ``tensor-parallel``: the ``T`` consecutive chips of the innermost tier that split each layer of a
    decoder model between them (:mod:`archsim.workloads.tensor_parallel`); ``expert-parallel``: the
    ``E`` chips of the data-parallel group (same stage and tensor-parallel rank) that share a mixture
    of experts' experts between them (:mod:`archsim.workloads.expert_parallel`); ``expert-data-parallel``:
    the data-parallel replicas that hold the same experts (``1/E`` of the data-parallel group), over
    which the expert weights' gradients are all-reduced; ``pipeline``: the neighbouring stages of one
    pipeline, between which activations and their gradients are sent (:mod:`archsim.workloads.microbatches`);
    ``batch-norm``: the ``G`` consecutive chips that share their batch-norm statistics
    (:mod:`archsim.workloads.sync_batchnorm`).
    """

    DATA_PARALLEL = "data-parallel"
    ALL = "all"
    PEER = "peer"
    TENSOR_PARALLEL = "tensor-parallel"
    EXPERT_PARALLEL = "expert-parallel"
    EXPERT_DATA_PARALLEL = "expert-data-parallel"
    PIPELINE = "pipeline"
    BATCH_NORM = "batch-norm"


@dataclass(frozen=True, slots=True)
class CommOp:
    """The communication an op of kind :attr:`OpKind.COMM` does: what, over which chips, how many bytes.

    ``bytes`` is the per-chip buffer as nccl-tests counts it (the whole vector of an all-reduce, the
    gathered result of an all-gather, the input of a reduce-scatter, what a send moves).
    """

    kind: CommKind
    bytes: int
    group: CommGroup = CommGroup.DATA_PARALLEL

    @property
    def in_stream(self) -> bool:
        """True for a collective that runs in order with the chip's compute, blocking it (tensor, expert parallel).

        Megatron-LM does not overlap its tensor-parallel collectives with compute: each is priced as
        an op of the chip's stream (:mod:`archsim.run.tensor_parallel`); the others run on the
        system's communication stream, beside the compute (:mod:`archsim.engine.parallel`). An expert
        layer waits for its all-to-alls the same way (DeepSpeed-MoE and Megatron-LM run them between
        the router and the experts), and a synchronized batch-norm for its group's statistics.
        """
        return self.group in (CommGroup.TENSOR_PARALLEL, CommGroup.EXPERT_PARALLEL, CommGroup.BATCH_NORM)


class Phase(enum.StrEnum):
    """Which pass of a training step an op belongs to.

    ``recompute`` is a forward op run again during the backward pass, because its output was not
    kept from the forward pass (activation checkpointing); it computes what its forward op does.
    """

    FORWARD = "fwd"
    BACKWARD_DATA = "bwd_data"
    BACKWARD_WEIGHT = "bwd_weight"
    UPDATE = "update"
    RECOMPUTE = "recompute"

    @property
    def computes_forward(self) -> bool:
        """True for the phases whose ops compute a forward op (and are priced as one)."""
        return self in (Phase.FORWARD, Phase.RECOMPUTE)

    @property
    def is_backward(self) -> bool:
        """True for the ops of the backward pass: gradients, and forward ops recomputed for them."""
        return self in (Phase.BACKWARD_DATA, Phase.BACKWARD_WEIGHT, Phase.RECOMPUTE)


class Mode(enum.StrEnum):
    """Training replays forward, backward and update; inference replays forward only.

    ``prefill`` and ``decode`` are the two phases of generating text with a decoder language model
    (:mod:`archsim.workloads.decoder`): the forward pass over the prompt, which fills the KV cache,
    and one step that produces one new token per sequence from the KV cache. Both are forward only.
    ``generate`` is a whole request: a prefill, then decode steps (:mod:`archsim.run.generation`); it
    is a run of two traces, never the mode of one trace.
    """

    TRAIN = "train"
    INFER = "infer"
    PREFILL = "prefill"
    DECODE = "decode"
    GENERATE = "generate"

    @property
    def is_generation(self) -> bool:
        """True for the modes of text generation (prefill, decode, generate), which count tokens, not samples."""
        return self in (Mode.PREFILL, Mode.DECODE, Mode.GENERATE)


class Role(enum.StrEnum):
    """What a tensor holds; decides where it lives and whether it counts as a weight."""

    ACTIVATION = "activation"
    WEIGHT = "weight"
    GRADIENT = "gradient"
    STATE = "state"


@dataclass(frozen=True, slots=True)
class TensorAccess:
    """One tensor an op reads or writes, with its size in bytes."""

    name: str
    bytes: int
    role: Role = Role.ACTIVATION
    cached: bool = False
    """A read served by the chip's on-chip cache, which still holds the tensor from the op that wrote it
    (set on a chip with ``memory.cache`` by :func:`archsim.workloads.cache.cached_reads`, never stored in
    a trace file): it moves no main-memory byte."""


@dataclass(frozen=True, slots=True)
class Gemm:
    """A (batched) matrix product ``C[b, m, n] += A[b, m, k] @ B[b, k, n]``."""

    batch: int
    m: int
    n: int
    k: int

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the product."""
        return self.batch * self.m * self.n * self.k


@dataclass(frozen=True, slots=True)
class ConvShape:
    """A 2-D convolution: batch ``n``, ``c`` -> ``k`` channels, ``h x w`` input, ``r x s`` filter."""

    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    stride: int = 1
    pad: int = 0

    @property
    def p(self) -> int:
        """Output height."""
        return (self.h + 2 * self.pad - self.r) // self.stride + 1

    @property
    def q(self) -> int:
        """Output width."""
        return (self.w + 2 * self.pad - self.s) // self.stride + 1


@dataclass(frozen=True, slots=True)
class Op:
    """One op of a trace."""

    name: str
    kind: OpKind
    phase: Phase
    flops: int
    reads: tuple[TensorAccess, ...]
    writes: tuple[TensorAccess, ...]
    deps: tuple[int, ...] = ()
    gemm: Gemm | None = None
    conv: ConvShape | None = None
    comm: CommOp | None = None
    """What a communication op moves (set exactly when ``kind`` is :attr:`OpKind.COMM`)."""

    def with_deps(self, deps: tuple[int, ...]) -> Op:
        """The same op with other dependencies (for transforms that move ops; faster than ``replace``)."""
        return Op(
            self.name, self.kind, self.phase, self.flops, self.reads, self.writes, deps, self.gemm, self.conv, self.comm
        )

    def with_reads(self, reads: tuple[TensorAccess, ...]) -> Op:
        """The same op reading ``reads`` (for transforms that mark its reads; faster than ``replace``)."""
        return Op(
            self.name, self.kind, self.phase, self.flops, reads, self.writes, self.deps, self.gemm, self.conv, self.comm
        )

    @property
    def bytes_read(self) -> int:
        """Bytes of every tensor read, once each."""
        return sum(t.bytes for t in self.reads)

    @property
    def bytes_written(self) -> int:
        """Bytes of every tensor written, once each."""
        return sum(t.bytes for t in self.writes)

    @property
    def bytes(self) -> int:
        """Bytes read plus bytes written (the op's minimum memory traffic)."""
        return self.bytes_read + self.bytes_written

    @property
    def cached_bytes(self) -> int:
        """Bytes of the reads the chip's cache serves (:attr:`TensorAccess.cached`), not main memory."""
        return sum(t.bytes for t in self.reads if t.cached)


@dataclass(frozen=True)
class Trace:
    """A whole workload for one mode, batch, precision and sequence length."""

    name: str
    mode: Mode
    batch: int
    precision: Precision
    ops: tuple[Op, ...]
    parameters: int
    """Number of trainable parameters (elements)."""
    memory_bytes: int
    """Device memory the step needs: weights, and in training gradients, optimizer state and saved
    activations; in inference the largest set of live activations."""
    seq_len: int | None = None
    meta: dict[str, str] = field(default_factory=dict)

    @property
    def flops(self) -> int:
        """FLOPs of one step (the whole batch)."""
        return sum(op.flops for op in self.ops)

    def check(self) -> None:
        """Assert the structural invariants (topological deps, non-negative counts)."""
        for index, op in enumerate(self.ops):
            if any(d < 0 or d >= index for d in op.deps):
                raise ValueError(f"op {index} ({op.name}) depends on a later or invalid op: {op.deps}")
            if op.flops < 0 or any(t.bytes < 0 for t in (*op.reads, *op.writes)):
                raise ValueError(f"op {index} ({op.name}) has a negative count")
            if op.kind.is_comm != (op.comm is not None) or (op.comm is not None and op.comm.bytes < 0):
                raise ValueError(f"op {index} ({op.name}): a comm op, and only one, has a non-negative CommOp")

    @property
    def has_comm(self) -> bool:
        """True when some op communicates between chips (the trace needs a system to run on)."""
        return any(op.kind.is_comm for op in self.ops)

    @property
    def has_link_comm(self) -> bool:
        """True when some communication op runs off the compute stream (all but tensor-parallel ones)."""
        return any(op.comm is not None and not op.comm.in_stream for op in self.ops)
