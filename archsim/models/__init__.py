"""Cost models, one module per chip family, and the factory that builds one for a chip.

:func:`cost_model_for` is the one factory: it looks the chip's family up in the family registry
(:mod:`archsim.spec.registry`), resolves the run's efficiency values into the family's complete
record, and returns the family's model ready to price ops. Each family module (``tensorcore``,
``ipu``, ``cube``, ``systolic`` here, or a plug-in's) registers its section schema, efficiency record
and model together. :func:`register_cost_model` replaces the model of a registered family from
Python, and :func:`register_op_cost` the cost of one op kind; installed packages do the same through
the ``archsim.cost_models`` entry points (:mod:`archsim.models.plugins`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, cast

from archsim.errors import PluginError
from archsim.models.base import Bound, CostModel, FrameworkDispatch, OpCost, Unit
from archsim.models.plugins import (
    CheckedModel,
    OpCostFunction,
    entry_point_plugins,
    register_op_cost,
    unregister_op_cost,
)
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Precision
from archsim.spec.efficiency import Efficiency
from archsim.spec.registry import family_definition, register_family

CostModelFactory = Callable[[ChipSpec, Any, Precision, int], CostModel]
"""Builds a model from (chip, resolved efficiency record, precision, trace memory footprint in bytes)."""

_EXPLICIT: set[str] = set()
"""Families whose model was registered from Python: these win over ``archsim.cost_models`` entry points."""


def register_cost_model(family: str, factory: CostModelFactory) -> None:
    """Use ``factory`` for every chip of the registered ``family`` from now on (replaces its model)."""
    try:
        definition = family_definition(family)
    except ValueError as err:
        raise PluginError(getattr(factory, "__qualname__", repr(factory)), "family", str(err)) from None
    register_family(replace(definition, model=factory))
    _EXPLICIT.add(family)


def cost_model_for(
    chip: ChipSpec, efficiency: Efficiency, precision: Precision, footprint_bytes: int, framework_s: float = 0.0
) -> CostModel:
    """The cost model of ``chip`` at ``precision``.

    ``efficiency`` holds the family's values merged with the software's and the chip's overrides; it
    is resolved here into the family's complete record (a value nothing set is a SpecError).
    ``footprint_bytes`` is the memory the trace needs (IPUs spill what exceeds their in-processor
    memory). A block-scaled precision (``nvfp4``, ``mxfp4``) gets the family's model twice, at the format
    and at fp8 (:mod:`archsim.models.block_scaled`). ``framework_s`` is added to every op's time (see
    :func:`~archsim.models.base.framework_overhead_s`).
    """
    family = chip.family
    definition = family_definition(family)
    record = definition.efficiency.resolve(efficiency, chip.name)
    factory = definition.model if family in _EXPLICIT else entry_point_plugins()[0].get(family, definition.model)
    model = cast(CostModel, factory(chip, record, precision, footprint_bytes))
    if precision.block_scaling is not None:  # the format's products, and the rest at fp8
        from archsim.models.block_scaled import BlockScaledModel

        rest = cast(CostModel, factory(chip, record, precision.storage, footprint_bytes))
        model = cast(CostModel, BlockScaledModel(model, rest))
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
