"""Constraints of a sweep: small arithmetic expressions over axis values, evaluated without ``eval``.

A constraint such as ``chip.systolic.array_rows * chip.systolic.array_cols <= 16384`` keeps a
configuration when true and drops it when false. Names are axis paths (and ``target``); a quantity
value is its number in SI base units (bytes, B/s, Hz, s), so ``chip.systolic.ifmap_sram <= 2 * 2**20``
compares bytes. Allowed: numbers, strings, ``True``/``False``, ``+ - * / // % **``, comparisons,
``and``/``or``/``not``, ``x if c else y`` and the functions ``min``, ``max`` and ``abs``.

Bounded work: arithmetic is over numbers only (a string, written or an axis value, may be compared,
never multiplied or added), and no integer grows past :data:`MAX_INT_BITS` bits (checked before
``*`` and ``**`` compute it), so one evaluation takes microseconds and little memory.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

from archsim.errors import SpecError

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {"min": min, "max": max, "abs": abs}
MAX_INT_BITS = 1024
"""Largest integer a constraint computes, in bits (past it ``*`` and ``**`` could take unbounded time
and memory); floats overflow to an error instead."""


def _bits(value: Any) -> int:
    """Bits of an integer operand (a bool is 1 bit, a float counts as none: it cannot grow)."""
    return abs(value).bit_length() if isinstance(value, int) else 0


def _check_size(op: ast.operator, left: Any, right: Any) -> None:
    """Refuse an integer ``*`` or ``**`` whose result would pass :data:`MAX_INT_BITS` bits."""
    if isinstance(op, ast.Pow) and isinstance(left, int) and isinstance(right, int) and right > 0:
        bits = math.ceil(right * math.log2(abs(left))) if abs(left) > 1 else 1
    elif isinstance(op, ast.Mult) and isinstance(left, int) and isinstance(right, int):
        bits = _bits(left) + _bits(right) - 1
    else:
        bits = max(_bits(left), _bits(right))
    if bits > MAX_INT_BITS:
        raise ValueError(f"an integer of more than {MAX_INT_BITS} bits")


def dotted_name(node: ast.expr) -> str | None:
    """``chip.systolic.array_rows`` written in Python syntax -> the path, or None if not a name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = dotted_name(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


class Constraint:
    """One parsed constraint; :meth:`holds` evaluates it on a configuration's values."""

    def __init__(self, text: str, names: set[str], source: str, field: str) -> None:
        self.text = text  # as written
        self._source, self._field = source, field
        # a path that is not a Python name (``link.ib-hdr.bandwidth``) is replaced by a placeholder
        self._aliases: dict[str, str] = {}
        for i, name in enumerate(sorted(names, key=len, reverse=True)):
            if not all(part.isidentifier() for part in name.split(".")) and name in text:
                self._aliases[f"_axis{i}"] = name
                text = text.replace(name, f"_axis{i}")
        names = {n for n in names if n not in self._aliases.values()} | set(self._aliases)
        try:
            self._tree = ast.parse(text, mode="eval").body
        except SyntaxError as err:
            raise SpecError(source, field, f"not an expression: {err.msg}") from None
        self._check(self._tree, names)

    def _fail(self, problem: str) -> SpecError:
        return SpecError(self._source, self._field, problem)

    def _check(self, node: ast.expr, names: set[str]) -> None:
        name = dotted_name(node)
        if name is not None:
            if name not in names:
                raise self._fail(f"unknown name {name!r} (known: {', '.join(sorted(names))})")
            return
        if isinstance(node, ast.Constant):
            if not isinstance(node.value, int | float | str | bool):
                raise self._fail(f"constant {node.value!r} is not allowed")
            return
        operands = [node.left, node.right] if isinstance(node, ast.BinOp) else []
        operands += [node.operand] if isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not) else []
        if any(isinstance(o, ast.Constant) and isinstance(o.value, str) for o in operands):
            raise self._fail(f"{ast.unparse(node)!r}: arithmetic on a string is not allowed (compare strings only)")
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            children: list[ast.expr] = [node.left, node.right]
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not | ast.USub | ast.UAdd):
            children = [node.operand]
        elif isinstance(node, ast.BoolOp):
            children = list(node.values)
        elif isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
            children = [node.left, *node.comparators]
        elif isinstance(node, ast.IfExp):
            children = [node.test, node.body, node.orelse]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _FUNCTIONS
            and not node.keywords
        ):
            children = list(node.args)
        else:
            raise self._fail(f"{ast.unparse(node)!r} is not allowed (arithmetic, comparisons, and/or/not, min/max/abs)")
        for child in children:
            self._check(child, names)

    def holds(self, values: Mapping[str, Any]) -> bool:
        """Whether the constraint is true for ``values`` (path -> SI value); errors name the constraint."""
        try:
            return bool(self._eval(self._tree, values))
        except (TypeError, ValueError, ZeroDivisionError, OverflowError) as err:
            shown = ", ".join(f"{k}={v!r}" for k, v in values.items())
            raise self._fail(f"cannot evaluate at {shown}: {err}") from None

    def _eval(self, node: ast.expr, values: Mapping[str, Any]) -> Any:
        name = dotted_name(node)
        if name is not None:
            return values[self._aliases.get(name, name)]
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.BinOp):
            left, right = self._eval(node.left, values), self._eval(node.right, values)
            if isinstance(left, str) or isinstance(right, str):
                raise ValueError("arithmetic on a string (compare strings only)")
            _check_size(node.op, left, right)
            return _BINARY[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp):
            operand = self._eval(node.operand, values)
            if isinstance(node.op, ast.Not):
                return not operand
            if isinstance(operand, str):
                raise ValueError("arithmetic on a string (compare strings only)")
            return -operand if isinstance(node.op, ast.USub) else +operand
        if isinstance(node, ast.BoolOp):
            results = (self._eval(v, values) for v in node.values)
            return all(results) if isinstance(node.op, ast.And) else any(results)
        if isinstance(node, ast.Compare):
            left = self._eval(node.left, values)
            for op, comparator in zip(node.ops, node.comparators, strict=True):
                right = self._eval(comparator, values)
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.IfExp):
            branch = node.body if self._eval(node.test, values) else node.orelse
            return self._eval(branch, values)
        assert isinstance(node, ast.Call)
        assert isinstance(node.func, ast.Name)
        return _FUNCTIONS[node.func.id](*(self._eval(a, values) for a in node.args))
