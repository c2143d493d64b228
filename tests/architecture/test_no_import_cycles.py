"""No import cycles among the project's modules (mcptasks/, audit/, dashboard/).

The graph is built statically with ``ast``: every ``import`` and ``from ... import`` counts,
at module level or inside a function (a function-local import only hides a cycle until the
function runs), and ``from pkg import name`` is an edge to ``pkg.name`` when that is a module,
else to ``pkg``. Only imports under ``if TYPE_CHECKING:`` are left out: they never run.
Importing a submodule also runs its packages' ``__init__``; those implicit edges are not
counted (a package that re-exports its submodules would otherwise always be a cycle).
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("mcptasks", "audit", "dashboard")


def module_files() -> dict[str, Path]:
    """Module name → its file, for every module of the packages (migrations included)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, except those under ``if TYPE_CHECKING:``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _owning_module(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of a dotted name that is one of our modules."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    package = name if is_package else name.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        package = package.rpartition(".")[0]
                    base = f"{package}.{base}".rstrip(".") if base else package
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            for target in targets:
                owner = _owning_module(target, modules)
                if owner is not None and owner != name:
                    graph[name].add(owner)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's components of more than one module (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[set[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(component)
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return components


def shortest_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """One shortest cycle through the component's first module, as a path back to it."""
    start = min(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph[node] & component):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if child not in came_from:
                came_from[child] = node
                queue.append(child)
    return [start]


def cycles() -> list[str]:
    graph = import_graph()
    return sorted(
        " → ".join(shortest_cycle(graph, component))
        + (f"  (component of {len(component)}: {', '.join(sorted(component))})")
        for component in strongly_connected(graph)
    )


def test_the_graph_sees_function_local_and_from_package_imports() -> None:
    graph = import_graph()
    assert "mcptasks.lifecycle" in graph["dashboard.views"]  # from mcptasks import lifecycle
    assert "mcptasks.lifecycle._core" in graph["mcptasks.lifecycle.cancel"]
    assert "mcptasks.runner" in graph["mcptasks.jobs"]  # imported inside run_task


def test_no_import_cycles() -> None:
    found = cycles()
    assert not found, "import cycles:\n" + "\n".join(found)
