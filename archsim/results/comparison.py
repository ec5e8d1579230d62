"""The record of ``archsim compare``: B's speedup over A and the factors that multiply to it.

See :mod:`archsim.compare` for what each factor is and how it is obtained, and
:mod:`archsim.results.compare_report` for its HTML page.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Comparison:
    """The speedup of ``b`` over ``a`` on one workload and the factors that multiply to it."""

    a: str
    b: str
    workload: str
    mode: str
    throughput_a: float
    throughput_b: float
    """Samples (or sequences, tokens) per second of the whole target."""
    chips_a: int
    chips_b: int
    speedup: float
    """``throughput_b / throughput_a``."""
    factors: dict[str, float]
    """Factor name -> ratio, in the order of :mod:`archsim.compare`; their product is ``speedup``."""
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)
