"""Collective libraries (``software/NAME.yaml``, ``kind: collective-library``): what a library adds to the wire.

A link file gives what the hardware moves; a collective library (NCCL, Graphcore's GCL, Huawei's HCCL,
XLA's collectives on ICI) decides how a collective uses it, and that costs time of its own:

* ``launch_latency``: paid once per collective call (kernel launch, the start handshake between ranks).
* ``wire_efficiency``: the fraction of a link's bandwidth the library's data movement reaches at all
  inside a node (NCCL's kernels copy through the GPU's SMs; NCCL's own model caps an A100's bus
  bandwidth at 235 of 300 GB/s, a cap the scale-out fabric's ports never reach). Each protocol
  multiplies it by its own, on every tier.
* ``protocols``: the wire formats the library can use. Each has a ``wire_efficiency`` (the fraction of
  what the library moves that is payload: NCCL's LL protocol sends a 4-byte flag with every 4 bytes of
  data), a ``launch_latency`` of its own, a per-step latency inside a node (``hop_latency``) and across
  the scale-out fabric (``network_hop_latency``), and the ``chunk`` a ring step is pipelined in. A
  protocol with ``max_bytes`` is only considered up to that size; one with ``in_network: true`` reduces
  in the switches and is only considered for an all-reduce on switches that offer it (a link file's
  ``in_network_reduction: true``; NVLink SHARP on NVSwitch 3). Like NCCL's tuner, the library picks,
  for each call, the protocol its alpha-beta estimate says is fastest
  (:func:`archsim.models.collective_cost.choose_protocol`).
* ``algorithms``: rules, first match wins, naming the algorithm per call: ``{algorithm: tree,
  min_nodes: 2, max_bytes: "64 MiB"}``; ``auto`` is the system's own ``collective``.

Every number cites a source in ``sources`` (keys ``launch_latency`` and ``protocols.NAME``, or
deeper); a fitted one names the calibration rows it was fitted to.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from archsim.spec.common import Bytes, Count, Duration, Fraction, Name, Spec
from archsim.spec.system import Algorithm


class Protocol(Spec):
    """One wire protocol of a library: its payload efficiency, latencies and pipelining chunk."""

    wire_efficiency: Fraction
    """Fraction of what the library moves that is payload (times the library's ``wire_efficiency``)."""
    launch_latency: Duration
    """Fixed latency of a call with this protocol (NCCL's ``baseLat``), on top of the library's."""
    hop_latency: Duration
    """Latency of one step between chips of a node (includes the link's; the larger of the two is used)."""
    network_hop_latency: Duration
    """Latency of one step across the scale-out fabric."""
    chunk: Bytes
    """Bytes a ring step is pipelined in (the library's buffer slot)."""
    max_bytes: Bytes | None = None
    """Largest call the protocol is considered for (None: any)."""
    in_network: bool = False
    """The protocol reduces in the switches (NVLink SHARP): only for all-reduce, only where every tier's
    switch offers it; each chip sends its buffer once and the call takes one step."""


class AlgorithmRule(Spec):
    """Use ``algorithm`` for calls of at most ``max_bytes`` on at least ``min_nodes`` nodes."""

    algorithm: Algorithm
    max_bytes: Bytes | None = None
    min_nodes: Count = 1


class CollectiveLibrarySpec(Spec):
    """A collective library: per-call latency, its protocols and how it picks algorithms."""

    schema_version: Literal[1]
    kind: Literal["collective-library"]
    name: Name
    aliases: tuple[Name, ...] = ()
    description: str
    launch_latency: Duration
    """Per collective call, whatever the protocol: launch and start-up synchronization."""
    wire_efficiency: Fraction = 1.0
    """Fraction of a link's bandwidth the library's data movement reaches, whatever the protocol."""
    protocols: dict[Name, Protocol] = Field(min_length=1)
    algorithms: tuple[AlgorithmRule, ...] = Field(default_factory=lambda: (AlgorithmRule(algorithm=Algorithm.AUTO),))
    sources: dict[str, str]

    @model_validator(mode="after")
    def _rules_end_unconditionally(self) -> CollectiveLibrarySpec:
        last = self.algorithms[-1] if self.algorithms else None
        if last is None or last.max_bytes is not None or last.min_nodes != 1:
            raise ValueError("algorithms: the last rule must have no max_bytes or min_nodes (it catches every call)")
        return self

    def missing_sources(self) -> list[str]:
        """YAML paths whose numbers cite no source."""
        keys = list(self.sources)

        def covered(path: str) -> bool:
            return any(k == path or k.startswith(path + ".") or path.startswith(k + ".") for k in keys)

        needed = ["launch_latency", "wire_efficiency", *(f"protocols.{name}" for name in self.protocols)]
        return [path for path in needed if not covered(path)]
