"""The package's shape: no import cycle inside ``archsim/``, and no module over 450 lines.

Imports are read with :mod:`ast` from every module, at module level and inside functions alike (an
import deferred into a function still ties the two modules together); only those under
``if TYPE_CHECKING:`` are left out, as they never run. ``from a.b import c`` depends on the module
``a.b.c`` when there is one, else on ``a.b``; the parents a dotted import initializes implicitly are
not counted (every module would otherwise depend on ``archsim/__init__.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import archsim

PACKAGE = Path(archsim.__file__).parent
MAX_LINES = 450
"""Largest module (STYLE.md asks for 100 to 400 lines and a split well before 600)."""


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _type_checking_only(tree: ast.Module) -> set[int]:
    """Ids of the import nodes under ``if TYPE_CHECKING:``."""
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            hidden.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    return hidden


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The archsim modules ``name`` (at ``path``) imports anywhere in its code."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    hidden = _type_checking_only(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {module for module in found if module in modules and module != name}


def import_graph() -> dict[str, set[str]]:
    """Every archsim module with the archsim modules it imports."""
    modules = _modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_reader_sees_function_level_and_relative_imports(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from archsim.api import simulate\n"
        "def f():\n    from archsim.run import runner\n    from . import units\n",
        encoding="utf-8",
    )
    modules = _modules()
    assert imports_of("archsim.mod", source, modules) == {"archsim.run.runner", "archsim.units"}


def test_no_import_cycle_inside_archsim() -> None:
    graph = import_graph()
    assert "archsim.run.runner" in graph["archsim.api"]  # the reader sees the package's imports
    assert cycles(graph) == []


def test_no_module_over_450_lines() -> None:
    sizes = {
        str(path.relative_to(PACKAGE)): len(path.read_text(encoding="utf-8").splitlines())
        for path in PACKAGE.rglob("*.py")
    }
    over = {name: lines for name, lines in sizes.items() if lines > MAX_LINES}
    assert over == {}
