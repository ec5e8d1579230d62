"""Which reads an on-chip cache serves: tensors an op writes stay on chip for the ops after it.

A chip that describes ``memory.cache`` (TPU v4's 128 MiB common memory, CMEM: an SRAM between its
cores' vector memories and HBM) keeps what its ops write, as far as it fits, so that a later op reads
it from the chip instead of from main memory. :func:`cached_reads` walks a trace in its order with
that rule and marks each read it serves (:attr:`~archsim.workloads.trace.TensorAccess.cached`); the
family's cost model moves no main-memory byte for a marked read.

The rule, a write-allocate cache with least-recently-used replacement:

* a tensor an op writes enters the cache, evicting the least recently used tensors until it fits;
  one larger than the whole cache never enters;
* a read of a tensor in the cache is served from it and makes the tensor the most recently used;
  a read of any other tensor comes from main memory and does not enter the cache (reads stream, as
  weights and saved activations do on their way to the arrays);
* every write still reaches main memory (write-through), so nothing is lost on eviction and the
  tensors saved for the backward pass are where memory planning puts them;
* a communication op's writes (a reduced gradient, say) replace what the cache held under that name:
  the cache drops it.

The cache's own bandwidth is not published for TPU v4 and is not modelled: a cached read costs no
time of its own, the arrays still wait for their compute. What XLA's compiler really places in CMEM
is not published either; this rule is the simplest that keeps a producer's output for its consumer.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

from archsim.workloads.trace import Op, OpKind, TensorAccess, Trace


def cached_reads(trace: Trace, capacity_bytes: int) -> Trace:
    """``trace`` with every read the cache of ``capacity_bytes`` serves marked ``cached`` (see the module)."""
    held: OrderedDict[str, int] = OrderedDict()
    used = 0
    ops: list[Op] = []
    for op in trace.ops:
        if op.kind is OpKind.COMM:
            for t in op.writes:
                used -= held.pop(t.name, 0)
            ops.append(op)
            continue
        reads = op.reads
        if any(t.name in held for t in reads):
            marked = []
            for t in reads:
                if t.name in held:
                    held.move_to_end(t.name)
                    t = TensorAccess(t.name, t.bytes, t.role, True)
                marked.append(t)
            op = op.with_reads(tuple(marked))
        for t in op.writes:
            used -= held.pop(t.name, 0)
            if t.bytes > capacity_bytes:
                continue
            held[t.name] = t.bytes
            used += t.bytes
            while used > capacity_bytes:
                used -= held.popitem(last=False)[1]
        ops.append(op)
    return replace(trace, ops=tuple(ops))
