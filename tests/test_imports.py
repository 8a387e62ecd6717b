"""No import circle anywhere in the product code: the modules' import graph is acyclic.

An edge A -> B is every import of product module B in module A, at module level and inside
functions alike (a lazy import only hides a circle in the design), except the imports
under ``if TYPE_CHECKING:``. ``from pkg import sub`` where ``pkg.sub`` is a module is an
edge to ``pkg.sub`` only; an import of ``pkg.sub.name`` is an edge to ``pkg.sub``."""

from __future__ import annotations

import ast
from pathlib import Path

from runtime import provenance

ROOT = Path(__file__).resolve().parent.parent

PACKAGES = provenance.PACKAGES
"""Every product package: the ones a wheel ships."""


def product_modules(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Every product module's dotted name and file (a package is its ``__init__.py``)."""
    modules: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if "__pycache__" in parts:
                continue
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """The import statements anywhere in ``tree`` except those under ``if TYPE_CHECKING:``
    (its ``else:`` branch counts)."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return found


def _deepest(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of dotted ``name`` that is a product module, if any."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def edges_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The product modules ``module`` imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in _imports(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            names = [f"{source}.{alias.name}" for alias in node.names if alias.name != "*"]
            if any(alias.name == "*" for alias in node.names):
                names.append(source)
        for name in names:
            target = _deepest(name, modules)
            if target is not None and target != module:
                targets.add(target)
    return targets


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    modules = product_modules(root, packages)
    return {module: edges_of(module, path, modules) for module, path in modules.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                child = pending.pop(0)
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, sorted(graph.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def circle_in(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One circle through the component's first module, as a chain that ends where it
    starts (breadth first: the shortest)."""
    members = set(component)
    start = component[0]
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    chain = [node]
                    while chain[-1] != start:
                        chain.append(came_from[chain[-1]])
                    return [start, *reversed(chain[:-1]), start]
                if child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    return component


def test_the_graph_sees_the_product() -> None:
    graph = import_graph()
    assert {"rl.rl_env", "runtime.actor", "rlgpt.cli", "llm.prompts"} <= graph.keys()
    assert "messages.base" in graph["messages.codec"]
    # ``from pkg import sub`` is an edge to the submodule, not to the package
    assert "messages.artifact" in graph["messages"]


def test_no_import_circle() -> None:
    graph = import_graph()
    circles = [component for component in strongly_connected(graph) if len(component) > 1]
    described = [
        " -> ".join(circle_in(component, graph))
        + (f"  (all of: {', '.join(component)})" if len(component) > 2 else "")
        for component in circles
    ]
    assert not circles, "import circles:\n" + "\n".join(described)


def test_tarjan_finds_circles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert [c for c in strongly_connected(graph) if len(c) > 1] == [["a", "b", "c"]]
    assert circle_in(["a", "b", "c"], graph) == ["a", "b", "c", "a"]


def test_the_graph_follows_the_rule(tmp_path: Path) -> None:
    files = {
        "pkg/__init__.py": "from pkg.a import A\n",
        "pkg/a.py": "A = 1\ndef f():\n    from pkg.b import B\n    return B\n",
        "pkg/b.py": (
            "from typing import TYPE_CHECKING\n"
            "from pkg import c\n"
            "from . import d\n"
            "import pkg.e.deep\n"
            "if TYPE_CHECKING:\n    from pkg.a import A\n"
            "else:\n    from pkg import f\n"
            "B = 2\n"
        ),
        "pkg/c.py": "from pkg import A\n",
        "pkg/d.py": "import json\n",
        "pkg/e/__init__.py": "",
        "pkg/e/deep.py": "from ..d import x\n",
        "pkg/f.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg"] == {"pkg.a"}
    assert graph["pkg.a"] == {"pkg.b"}  # inside a function
    assert graph["pkg.b"] == {"pkg.c", "pkg.d", "pkg.e.deep", "pkg.f"}  # not TYPE_CHECKING
    assert graph["pkg.c"] == {"pkg"}  # a name, not a module: the package
    assert graph["pkg.e.deep"] == {"pkg.d"}
    circles = [c for c in strongly_connected(graph) if len(c) > 1]
    assert circles == [["pkg", "pkg.a", "pkg.b", "pkg.c"]]
    assert circle_in(circles[0], graph) == ["pkg", "pkg.a", "pkg.b", "pkg.c", "pkg"]
