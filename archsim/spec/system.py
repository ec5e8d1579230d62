"""System descriptions (``interconnect/NAME.yaml``, ``kind: system``): many chips joined by links.

A system names its chip and its *levels*, a mapping from level name to level, innermost first (in
file order). The first level groups ``size`` chips; each further level groups ``size`` copies of
everything before it (its *members*). Every level says how its members are joined (``topology``), by
which link type (``link``, the name of an ``interconnect/`` link file) and how many links (``links``):

=============  ==============================================================================
topology       meaning of ``links`` (and the extra field it needs)
=============  ==============================================================================
``switch``     ports of one member into a non-blocking switch fabric (NVSwitch, an InfiniBand or
               Ethernet fat tree); every other member is one hop away
``full-mesh``  links between every pair of members (Ascend HCCS within a 4-chip group)
``ring``       links from a member to each of its two ring neighbours, per direction
``torus``      links per direction in each dimension of ``shape`` (wraparound in every dimension,
               or only in those whose size is a multiple of ``wraparound_multiple``)
``graph``      none: ``connections`` lists ``[a, b, links]`` per joined pair (DGX-1's hybrid
               cube-mesh); collectives run on the edge-disjoint Hamiltonian rings found in it
=============  ==============================================================================

``scale_out`` (optional) declares the fabric that joins copies of the whole system: ``archsim run
SYSTEM ... --nodes N`` adds it as an outer level of ``N`` members, each with ``links`` ports. Without it
``--nodes`` is an error. ``collective`` is the all-reduce algorithm used when none is asked for;
``collective_library`` names the collective library (``software/``, ``kind: collective-library``) whose
protocol, latency and launch costs every collective pays (none: the bare links).

``input_pipeline`` (optional, :class:`InputPipeline`) describes how one node feeds its chips with
training samples: host CPU cores and their per-sample decode time, device-side decoding (NVIDIA
DALI's nvJPEG path), the host-to-chip link and storage. :mod:`archsim.input_pipeline` uses it when a
run asks for it (``--input-decode``).

Every number cites a source in ``sources``: the keys ``chip``, ``levels.NAME`` (or
``levels.NAME.FIELD``) for every level, ``scale_out`` (or ``scale_out.FIELD``) and ``input_pipeline``
(or ``input_pipeline.FIELD``) are required where those sections are present.

```yaml
levels:
  node: {size: 8, topology: switch, link: nvswitch2, links: 12}
scale_out: {link: ib-hdr, links: 8}
```
"""

from __future__ import annotations

import enum
import math
from typing import Literal

from pydantic import Field, StrictInt, model_validator

from archsim.limits import MAX_LINKS, MAX_SYSTEM_CHIPS
from archsim.spec.common import Bandwidth, Count, Name, Spec, Time


class Topology(enum.StrEnum):
    """How the members of one level are joined."""

    SWITCH = "switch"
    FULL_MESH = "full-mesh"
    RING = "ring"
    TORUS = "torus"
    GRAPH = "graph"


class Algorithm(enum.StrEnum):
    """All-reduce algorithms (see :mod:`archsim.engine.collectives`)."""

    AUTO = "auto"
    RING = "ring"
    TREE = "tree"
    HIERARCHICAL = "hierarchical"
    TORUS = "torus"


class Level(Spec):
    """One level of a system: ``size`` members joined by ``topology`` over links of type ``link``."""

    size: Count
    """Members in one group of this level (chips at level 0)."""
    topology: Topology
    link: Name
    """Link type, by name (``interconnect/*.yaml``, ``kind: link``)."""
    links: Count | None = None
    """Links per member (see the module docstring for each topology); not used by ``graph``."""
    shape: tuple[Count, ...] | None = None
    """Torus dimensions, innermost first; their product is ``size``."""
    connections: tuple[tuple[StrictInt, StrictInt, StrictInt], ...] | None = None
    """Graph edges ``[a, b, links]`` between members ``a`` and ``b`` (0-based)."""
    wraparound_multiple: Count | None = None
    """Torus only: a dimension wraps around when its size is a multiple of this (TPU v4: 4); the others
    are open lines (a mesh). None: every dimension wraps around."""
    description: str = ""

    @model_validator(mode="after")
    def _fields_of_topology(self) -> Level:
        graph = self.topology is Topology.GRAPH
        if graph and self.links is not None:
            raise ValueError("a graph level gives its links in connections, not in links")
        if not graph and self.links is None:
            raise ValueError(f"a {self.topology.value} level needs links (links per member)")
        if self.links is not None and self.links > MAX_LINKS:
            raise ValueError(f"links: {self.links} is more than the {MAX_LINKS} links allowed")
        if self.topology is Topology.TORUS:
            if not self.shape:
                raise ValueError("a torus level needs shape (its dimensions)")
            if math.prod(self.shape) != self.size:
                raise ValueError(f"shape {list(self.shape)} has {math.prod(self.shape)} members, size is {self.size}")
        elif self.shape is not None:
            raise ValueError(f"shape is only for torus levels, not {self.topology.value}")
        elif self.wraparound_multiple is not None:
            raise ValueError(f"wraparound_multiple is only for torus levels, not {self.topology.value}")
        if graph:
            self._check_connections()
        elif self.connections is not None:
            raise ValueError(f"connections are only for graph levels, not {self.topology.value}")
        return self

    def wraps(self, dimension: int) -> bool:
        """Whether torus dimension ``dimension`` has wraparound links (see ``wraparound_multiple``)."""
        assert self.shape is not None
        return self.wraparound_multiple is None or self.shape[dimension] % self.wraparound_multiple == 0

    def _check_connections(self) -> None:
        if not self.connections:
            raise ValueError("a graph level needs connections ([a, b, links] per joined pair)")
        seen: set[tuple[int, int]] = set()
        for a, b, count in self.connections:
            if not (0 <= a < self.size and 0 <= b < self.size) or a == b:
                raise ValueError(f"connection [{a}, {b}, {count}] must join two different members 0..{self.size - 1}")
            if not 1 <= count <= MAX_LINKS:
                raise ValueError(f"connection [{a}, {b}, {count}] needs 1 to {MAX_LINKS} links")
            pair = (min(a, b), max(a, b))
            if pair in seen:
                raise ValueError(f"members {pair[0]} and {pair[1]} are joined twice")
            seen.add(pair)


class ScaleOut(Spec):
    """The fabric that joins copies of the whole system (``--nodes N``)."""

    topology: Literal["switch"] = "switch"
    link: Name
    links: Count
    """Ports of one copy of the system (one node) into the scale-out fabric."""
    max_nodes: Count | None = None
    """Largest ``--nodes`` the fabric is documented for (None: no stated limit)."""

    @model_validator(mode="after")
    def _bounded(self) -> ScaleOut:
        if self.links > MAX_LINKS:
            raise ValueError(f"links: {self.links} is more than the {MAX_LINKS} links allowed")
        return self


class InputPipeline(Spec):
    """How one node (one copy of the system) feeds its chips with training samples.

    Decoding and augmenting a JPEG sample takes ``host_decode_time`` of one of the ``host_cores``
    (the host path), or ``device_decode_time`` of a chip (the device path, e.g. NVIDIA DALI with
    nvJPEG; None where the chips cannot decode). Samples cross ``host_link`` (one link per chip, a
    ``link`` name) decoded on the host path and encoded on the device path, and are read from storage
    at ``storage_bandwidth`` per node (None: not a limit, e.g. a data set cached in host memory).
    """

    host_cores: Count
    host_decode_time: Time
    """Core-seconds to read, decode and augment one sample on one host core."""
    device_decode_time: Time | None = None
    """Chip-seconds to decode and augment one sample on the chip (None: no device-side decoding)."""
    host_link: Name
    """Link type between the host and each chip (``interconnect/*.yaml``, e.g. ``pcie3``)."""
    storage_bandwidth: Bandwidth | None = None
    description: str = ""


class SystemSpec(Spec):
    """A multi-chip system: its chip, its levels innermost first, and an optional scale-out fabric."""

    schema_version: Literal[1]
    kind: Literal["system"]
    name: Name
    aliases: tuple[Name, ...] = ()
    description: str
    chip: Name
    """The chip, by name or alias (``chips/*.yaml``)."""
    levels: dict[Name, Level] = Field(min_length=1)
    """Levels by name, innermost first."""
    scale_out: ScaleOut | None = None
    collective: Algorithm = Algorithm.HIERARCHICAL
    """Default all-reduce algorithm (``--collective auto`` picks it)."""
    collective_library: Name | None = None
    """Collective library run by default (``software/*.yaml``, ``kind: collective-library``)."""
    input_pipeline: InputPipeline | None = None
    """How a node feeds its chips with samples (None: not described; see :class:`InputPipeline`)."""
    sources: dict[str, str]

    @model_validator(mode="after")
    def _consistent(self) -> SystemSpec:
        if self.num_chips > MAX_SYSTEM_CHIPS:
            raise ValueError(f"levels: {self.num_chips} chips in all, more than the {MAX_SYSTEM_CHIPS} allowed")
        if self.collective is Algorithm.AUTO:
            raise ValueError("collective: name an algorithm (ring, tree, hierarchical, torus), not auto")
        if self.collective is Algorithm.TORUS and not any(lv.topology is Topology.TORUS for lv in self.levels.values()):
            raise ValueError("collective: torus needs a torus level")
        return self

    @property
    def num_chips(self) -> int:
        """Chips in one copy of the system (one node)."""
        return math.prod(level.size for level in self.levels.values())

    def missing_sources(self) -> list[str]:
        """YAML paths whose numbers cite no source (``chip``, ``levels.NAME``, ``scale_out``)."""
        keys = list(self.sources)

        def covered(path: str) -> bool:
            return any(k == path or k.startswith(path + ".") for k in keys)

        needed = ["chip", *(f"levels.{name}" for name in self.levels)]
        if self.scale_out is not None:
            needed.append("scale_out")
        if self.input_pipeline is not None:
            needed.append("input_pipeline")
        return [path for path in needed if not covered(path)]
