"""Family descriptions (``chips/families/NAME.yaml``, ``kind: family``).

A family file holds the efficiency parameters its cost model needs, with their meaning documented
in :class:`archsim.spec.chip.Efficiency`. They are fitted by ``scripts/calibrate.py`` to
``calibration.csv`` and shared by every chip of the family; a chip may override any of them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from archsim.spec.chip import Efficiency, Family
from archsim.spec.common import Spec

_COMMON = (
    "compute",
    "memory_bandwidth",
    "vector",
    "op_overhead",
    "framework_overhead",
    "host_overhead",
    "step_overhead",
)
REQUIRED = {
    Family.TENSORCORE: (*_COMMON, "wave_overhead", "data_gradient"),
    Family.IPU: (*_COMMON, "exchange"),
    Family.CUBE: _COMMON,
    Family.SYSTOLIC: _COMMON,
}


class FamilySpec(Spec):
    """Efficiency parameters shared by all chips of one family."""

    schema_version: Literal[1]
    kind: Literal["family"]
    name: Family
    description: str
    efficiency: Efficiency
    sources: dict[str, str]

    @model_validator(mode="after")
    def _complete(self) -> FamilySpec:
        missing = [f for f in REQUIRED[self.name] if getattr(self.efficiency, f) is None]
        if missing:
            raise ValueError(f"efficiency: family {self.name.value} needs {', '.join(missing)}")
        return self
