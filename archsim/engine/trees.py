"""Double binary trees on a switched tier, simulated along one root-to-leaf path of the representative.

:class:`TreePorts` holds the lanes of one port of the path's tree nodes and runs the pipelined reduce
(chunks flow up, a node sends once both children's chunk arrived) and broadcast (chunks flow down) of
:meth:`archsim.engine.collectives.CollectiveEngine._tree` on them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from archsim.engine.network import Direction, LaneId, Route, send

if TYPE_CHECKING:
    import simpy

    from archsim.engine.collectives import CollectiveEngine


@dataclass
class TreePorts:
    """The lanes of one port of the path's tree nodes, and the pipelined reduce and broadcast on them."""

    engine: CollectiveEngine
    tier_index: int
    member: str
    port: int
    label: str

    def lane(self, node: str, direction: Direction) -> LaneId:
        """The lane of ``node``'s port in ``direction`` (``out`` or ``in``); n0's egress is the member's."""
        if node == "n0":
            return LaneId(self.member, direction, self.port)
        return LaneId(f"{self.member} {node}", direction, self.port)

    def route(self, *lanes: LaneId) -> Route:
        """A route holding the given lanes."""
        return self.engine.net.route(self.tier_index, list(lanes))

    def reduce(self, depth: int, nbytes: float) -> simpy.events.ProcessGenerator:
        """Chunks flow up: a node sends chunk ``c`` once both its children's chunk ``c`` arrived."""
        env, engine = self.engine.env, self.engine
        chunks = engine.chunks(nbytes)
        chunk = nbytes / chunks
        arrived = [[env.event() for _ in range(chunks)] for _ in range(depth + 1)]
        pending = [[2] * chunks for _ in range(depth + 1)]

        def arrive(d: int, c: int) -> Callable[[simpy.Event], None]:
            def callback(_: simpy.Event) -> None:
                pending[d][c] -= 1
                if pending[d][c] == 0:
                    arrived[d][c].succeed()

            return callback

        def child(d: int, node: str) -> simpy.events.ProcessGenerator:
            route = self.route(self.lane(node, Direction.OUT), self.lane(f"n{d - 1}", Direction.IN))
            for c in range(chunks):
                if d < depth:
                    yield arrived[d][c]
                yield from send(env, route, chunk, self.label)
                env.timeout(route.latency_s).callbacks.append(arrive(d - 1, c))

        processes = []
        for d in range(depth, 0, -1):
            processes += [env.process(child(d, f"n{d}")), env.process(child(d, f"s{d}"))]
        for node in ["n0", *(f"{x}{d}" for d in range(1, depth + 1) for x in "ns")]:
            # the second tree's half goes up through the same ports (this node is a leaf there)
            processes.append(env.process(engine.stream(self.route(self.lane(node, Direction.OUT)), nbytes, self.label)))
        yield env.all_of(processes + arrived[0])

    def broadcast(self, depth: int, nbytes: float) -> simpy.events.ProcessGenerator:
        """Chunks flow down: a node forwards chunk ``c`` to both children once it holds it."""
        env, engine = self.engine.env, self.engine
        chunks = engine.chunks(nbytes)
        chunk = nbytes / chunks
        received = [[env.event() for _ in range(chunks)] for _ in range(depth + 1)]
        landed: list[simpy.Event] = []

        def mark(d: int, c: int) -> Callable[[simpy.Event], None]:
            def callback(_: simpy.Event) -> None:
                received[d][c].succeed()

            return callback

        def parent(d: int, child_node: str, on_path: bool) -> simpy.events.ProcessGenerator:
            route = self.route(self.lane(f"n{d}", Direction.OUT), self.lane(child_node, Direction.IN))
            for c in range(chunks):
                if d > 0:
                    yield received[d][c]
                yield from send(env, route, chunk, self.label)
                timer = env.timeout(route.latency_s)
                if on_path:
                    timer.callbacks.append(mark(d + 1, c))
                landed.append(timer)

        processes = []
        for d in range(depth):
            processes += [env.process(parent(d, f"n{d + 1}", True)), env.process(parent(d, f"s{d + 1}", False))]
        yield env.all_of(processes)
        yield env.all_of(landed)
