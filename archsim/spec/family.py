"""Family descriptions (``chips/families/NAME.yaml``, ``kind: family``).

A family file holds the efficiency parameters its cost model needs, with their meaning documented
in :class:`archsim.spec.efficiency.Efficiency`. They are fitted by ``scripts/calibrate.py`` to
``calibration.csv`` and shared by every chip of the family; a chip may override any of them. The
per-op and per-step costs belong to the software that runs the graph (:mod:`archsim.spec.software`):
the family names its chips' default stack (``software``) and the bare kernel library that runs an
inline ``gemm:`` or ``conv:`` (``kernel_software``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from archsim.spec.chip import FamilyName
from archsim.spec.common import Name, Spec
from archsim.spec.efficiency import Efficiency
from archsim.spec.registry import DISPATCH, family_definition


def required(family: str) -> tuple[str, ...]:
    """The efficiency fields the file of ``family`` must set (its registered record's, less dispatch)."""
    return family_definition(family).efficiency.required()


class FamilySpec(Spec):
    """Efficiency parameters shared by all chips of one family."""

    schema_version: Literal[1]
    kind: Literal["family"]
    name: FamilyName
    description: str
    efficiency: Efficiency
    software: Name
    """The software stack a chip of the family runs by default (a ``kind: software`` name)."""
    kernel_software: Name
    """The stack that runs a bare library kernel (``gemm:``, ``conv:``, ``meta: {launch: kernel}``)."""
    sources: dict[str, str]

    @model_validator(mode="after")
    def _complete(self) -> FamilySpec:
        missing = [f for f in required(self.name) if getattr(self.efficiency, f, None) is None]
        if missing:
            raise ValueError(f"efficiency: family {self.name} needs {', '.join(missing)}")
        dispatch = [f for f in DISPATCH if getattr(self.efficiency, f) is not None]
        if dispatch:
            raise ValueError(f"efficiency.{dispatch[0]}: per-op and per-step costs belong to the software (software/)")
        return self
