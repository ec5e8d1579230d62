"""Cost models, one module per chip family, and the registry that picks one for a chip.

:func:`cost_model_for` is the one factory: it returns a model ready to price ops.
:func:`register_cost_model` lets a user replace or add the model of a family from Python, and
:func:`register_op_cost` the cost of one op kind; installed packages do the same through the
``archsim.cost_models`` entry points (:mod:`archsim.models.plugins`).
"""

from __future__ import annotations

from collections.abc import Callable

from archsim.models.base import Bound, CostModel, FrameworkDispatch, OpCost, Unit
from archsim.models.cube import CubeModel
from archsim.models.ipu import IpuModel
from archsim.models.plugins import (
    CheckedModel,
    OpCostFunction,
    entry_point_plugins,
    register_op_cost,
    unregister_op_cost,
)
from archsim.models.systolic import SystolicModel
from archsim.models.tensorcore import TensorCoreModel
from archsim.spec.chip import ChipSpec, Efficiency, Family
from archsim.spec.common import Precision

CostModelFactory = Callable[[ChipSpec, Efficiency, Precision, int], CostModel]
"""Builds a model from (chip, merged efficiency, precision, trace memory footprint in bytes)."""

_REGISTRY: dict[str, CostModelFactory] = {
    Family.TENSORCORE.value: lambda chip, eff, precision, _: TensorCoreModel(chip, eff, precision),
    Family.IPU.value: lambda chip, eff, precision, footprint: IpuModel(chip, eff, precision, footprint),
    Family.CUBE.value: lambda chip, eff, precision, _: CubeModel(chip, eff, precision),
    Family.SYSTOLIC.value: lambda chip, eff, precision, _: SystolicModel(chip, eff, precision),
}


_EXPLICIT: set[str] = set()
"""Families whose model was registered from Python: these win over entry points."""


def register_cost_model(family: str, factory: CostModelFactory) -> None:
    """Use ``factory`` for every chip of ``family`` from now on (replaces the built-in model)."""
    _REGISTRY[family] = factory
    _EXPLICIT.add(family)


def cost_model_for(
    chip: ChipSpec, efficiency: Efficiency, precision: Precision, footprint_bytes: int, framework_s: float = 0.0
) -> CostModel:
    """The cost model of ``chip`` at ``precision``.

    ``efficiency`` holds the family's values merged with the chip's overrides; ``footprint_bytes`` is
    the memory the trace needs (IPUs spill what exceeds their in-processor memory); ``framework_s``
    is added to every op's time (see :func:`~archsim.models.base.framework_overhead_s`).
    """
    family = chip.family.value
    factory = _REGISTRY[family] if family in _EXPLICIT else entry_point_plugins()[0].get(family, _REGISTRY[family])
    model = factory(chip, efficiency, precision, footprint_bytes)
    return CheckedModel(FrameworkDispatch(model, framework_s) if framework_s else model, family)


__all__ = [
    "Bound",
    "CostModel",
    "CostModelFactory",
    "OpCost",
    "OpCostFunction",
    "Unit",
    "cost_model_for",
    "register_cost_model",
    "register_op_cost",
    "unregister_op_cost",
]
