"""User cost models: per-op-kind functions, installed packages' entry points, and the check on every cost.

Two ways to plug a model in, both used by every run (CLI and API) once registered:

* **From Python.** :func:`archsim.models.register_cost_model` replaces the model of a whole family;
  :func:`register_op_cost` prices one op kind (``softmax``, ``matmul``, ...) with a function of
  ``(op, model)``, on every family or on one. ``model`` is the family's own model, so the function can
  start from ``model.cost(op)``, read ``model.chip`` and ``model.precision``, or return None to keep
  the family's cost for that op.
* **From an installed package**, through the entry-point group :data:`ENTRY_POINT_GROUP`
  (``archsim.cost_models``). The entry point's name says what it replaces: a family (``tensorcore``)
  names a cost-model factory called as ``factory(chip, efficiency, precision, footprint_bytes)``; an op
  kind (``softmax``) or a family and an op kind (``tensorcore.softmax``) names an op-cost function.
  Entry points are loaded once, on the first run, in name order; a registration made from Python
  takes precedence over an entry point for the same thing.

Every cost, built-in or not, is checked by :class:`CheckedModel`: a record that is not an
:class:`~archsim.models.base.OpCost` of finite, non-negative times no longer than
:data:`~archsim.limits.MAX_OP_SECONDS`, and non-negative bytes, is refused with one line naming the
chip and the op (a :class:`~archsim.errors.PluginError` for a user function, a
:class:`~archsim.errors.LimitError` for a built-in model fed absurd numbers).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache
from typing import Any

from archsim.errors import ArchsimError, LimitError, PluginError
from archsim.limits import MAX_OP_SECONDS
from archsim.models.base import Bound, CostModel, OpCost, Unit
from archsim.spec.chip import ChipSpec
from archsim.spec.common import Precision
from archsim.spec.registry import entry_points_of, family_definition, family_names
from archsim.workloads.trace import Op, OpKind

ENTRY_POINT_GROUP = "archsim.cost_models"
"""Entry-point group of user cost models (see the module docstring for the names it accepts)."""

OpCostFunction = Callable[[Op, CostModel], OpCost | None]
"""Prices one op given the family's model; None keeps the family model's cost."""

ANY_FAMILY = "*"
"""Family key of an op-cost function that applies to every family."""

_OP_COSTS: dict[tuple[str, OpKind], OpCostFunction] = {}
"""Op-cost functions registered from Python, by (family or ``*``, op kind)."""


def _op_kind(kind: str | OpKind, source: str) -> OpKind:
    try:
        return OpKind(kind)
    except ValueError:
        known = ", ".join(k.value for k in OpKind)
        raise PluginError(source, "op kind", f"{kind!r} is not one of {known}") from None


def _family(family: str, source: str) -> str:
    try:
        return family_definition(family).name
    except ValueError:
        known = ", ".join(family_names())
        raise PluginError(source, "family", f"{family!r} is not one of {known}") from None


def register_op_cost(kind: str | OpKind, function: OpCostFunction, family: str | None = None) -> None:
    """Price every op of ``kind`` with ``function(op, model)`` (on chips of ``family``, or on all).

    ``model`` is the family's cost model (built-in or registered), so ``model.cost(op)`` is the cost
    the function replaces. Returning None keeps that cost. A later registration for the same kind
    and family replaces an earlier one; a family-specific function wins over an all-family one.
    """
    source = getattr(function, "__qualname__", repr(function))
    key = (ANY_FAMILY if family is None else _family(family, source), _op_kind(kind, source))
    _OP_COSTS[key] = function


def unregister_op_cost(kind: str | OpKind, family: str | None = None) -> None:
    """Remove what :func:`register_op_cost` registered for ``kind`` and ``family`` (no error if none)."""
    _OP_COSTS.pop((ANY_FAMILY if family is None else _family(family, "unregister"), _op_kind(kind, "unregister")), None)


@cache
def entry_point_plugins() -> tuple[dict[str, Any], dict[tuple[str, OpKind], OpCostFunction]]:
    """Load the ``archsim.cost_models`` entry points once: (family factories, op-cost functions).

    A name that is neither a family, an op kind nor ``family.kind``, or an entry point that fails to
    import, is a PluginError naming the entry point. ``entry_point_plugins.cache_clear()`` reloads them
    (after ``archsim.spec.registry.installed_entry_points.cache_clear()`` for newly installed packages).
    """
    families: dict[str, Any] = {}
    ops: dict[tuple[str, OpKind], OpCostFunction] = {}
    for point in entry_points_of(ENTRY_POINT_GROUP):
        source = f"entry point {point.name} = {point.value}"
        family_name, _, kind_name = point.name.rpartition(".")
        is_family = not family_name and kind_name in family_names()
        try:
            loaded = point.load()
        except Exception as err:  # any failure of a user's package is one line
            raise PluginError(source, ENTRY_POINT_GROUP, f"cannot load: {type(err).__name__}: {err}") from None
        if not callable(loaded):
            raise PluginError(source, ENTRY_POINT_GROUP, "does not name a callable")
        if is_family:
            families[kind_name] = loaded
        else:
            family = _family(family_name, source) if family_name else ANY_FAMILY
            ops[(family, _op_kind(kind_name, source))] = loaded
    return families, ops


def op_cost_function(family: str, kind: OpKind) -> OpCostFunction | None:
    """The function pricing ``kind`` on ``family``: Python registrations first, then entry points."""
    python_first = (_OP_COSTS, entry_point_plugins()[1])
    for key in ((family, kind), (ANY_FAMILY, kind)):
        for registry in python_first:
            if key in registry:
                return registry[key]
    return None


def has_op_costs(family: str) -> bool:
    """True when some op kind has a user function on ``family``."""
    keys = {*_OP_COSTS, *entry_point_plugins()[1]}
    return any(f in (family, ANY_FAMILY) for f, _ in keys)


class CheckedModel:
    """A cost model that routes user-priced op kinds to their functions and checks every cost."""

    def __init__(self, base: CostModel, family: str) -> None:
        self.base = base
        self.family = family
        self.chip: ChipSpec = base.chip
        self.precision: Precision = base.precision
        self.separate_units: bool = base.separate_units
        self._user = has_op_costs(family)

    def __getattr__(self, name: str) -> Any:
        # attributes a caller reads from the family model (rates, sections) pass through
        return getattr(self.base, name)

    def cost(self, op: Op) -> OpCost:
        """The family model's cost of ``op``, or the user function's for its kind; checked."""
        function = op_cost_function(self.family, op.kind) if self._user else None
        if function is not None:
            name = getattr(function, "__qualname__", repr(function))
            try:
                priced = function(op, self.base)
            except ArchsimError:
                raise
            except Exception as err:  # a user function's failure is one line
                raise PluginError(name, f"op {op.name}", f"raised {type(err).__name__}: {err}") from None
            if priced is not None:
                check_cost(priced, self.chip.name, op, name)
                return priced
        cost = self.base.cost(op)
        check_cost(cost, self.chip.name, op, None)
        return cost


def _plainly_valid(cost: object) -> bool:
    """True for the usual record: an OpCost of float seconds in range, int bytes, a Bound and a Unit.

    The quick test :func:`check_cost` makes first (it runs on every op of every run); anything else,
    an int zero included, takes the full check. ``0.0 <= v <= MAX`` is False for NaN and for infinities.
    """
    if type(cost) is not OpCost:
        return False
    top = MAX_OP_SECONDS
    seconds = (cost.time_s, cost.compute_s, cost.memory_s, cost.overhead_s, cost.roofline_s, cost.communication_s)
    for value in seconds:
        if type(value) is not float or not 0.0 <= value <= top:
            return False
    return (
        type(cost.dram_bytes) is int and cost.dram_bytes >= 0 and type(cost.bound) is Bound and type(cost.unit) is Unit
    )


def check_cost(cost: object, chip: str, op: Op, plugin: str | None) -> None:
    """Refuse a cost record that is malformed or out of range (see the module docstring)."""
    if _plainly_valid(cost):
        return
    source = plugin if plugin is not None else chip
    field = f"op {op.name}"
    if not isinstance(cost, OpCost):
        raise PluginError(source, field, f"returned {type(cost).__name__}, expected an OpCost or None")
    error = PluginError if plugin is not None else LimitError
    for name in ("time_s", "compute_s", "memory_s", "overhead_s", "roofline_s", "communication_s"):
        value = getattr(cost, name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise error(source, field, f"{name} is {type(value).__name__}, expected seconds as a float")
        if not (math.isfinite(value) and 0.0 <= value <= MAX_OP_SECONDS):
            raise error(
                source,
                field,
                f"{name} is {value!r} s, outside [0, {MAX_OP_SECONDS:g}] s (a quantity or size in the input is "
                "out of proportion)",
            )
    if isinstance(cost.dram_bytes, bool) or not isinstance(cost.dram_bytes, int) or cost.dram_bytes < 0:
        raise error(source, field, f"dram_bytes is {cost.dram_bytes!r}, expected a non-negative int")
    if not isinstance(cost.bound, Bound) or not isinstance(cost.unit, Unit):
        raise error(source, field, "bound and unit must be a models.Bound and a models.Unit")
