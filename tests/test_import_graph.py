"""No module of rlvr imports one that imports it back.

The graph holds every `import` / `from … import` statement of each module — at top level
and inside functions alike: a function-level import is a dependency too, only deferred, and
deferring it is how a cycle hides. `from pkg import name` counts as importing `pkg.name`
when that is a module, else `pkg`; a package's `__init__` counts as its own node.
"""

from __future__ import annotations

import ast
from pathlib import Path

import rlvr

ROOT = Path(rlvr.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str, modules: set[str]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found |= {
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            }
    return {m for m in found if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in ROOT.rglob("*.py")}
    modules = set(paths)
    return {name: _imports(path, name, modules) for name, path in paths.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle as a list of modules (first == last), or None (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_rlvr_has_no_import_cycle():
    graph = import_graph()
    assert graph.get("rlvr.train.loop")  # the walk sees imports
    cycle = find_cycle(graph)
    assert cycle is None, " → ".join(cycle)


def test_rlvr_packages_are_layered():
    """Collapsed to rlvr's subpackages (algo, models, rollout, warmstart, train, ...), the
    graph is acyclic too: e.g. models never imports rollout, whose engines import models."""
    graph = import_graph()
    top = lambda module: ".".join(module.split(".")[:2])  # noqa: E731
    packages: dict[str, set[str]] = {top(m): set() for m in graph}
    for module, imported in graph.items():
        packages[top(module)] |= {top(m) for m in imported} - {top(module)}
    assert "rlvr.rollout" in packages["rlvr.warmstart"]
    assert "rlvr.rollout" not in packages["rlvr.models"]
    cycle = find_cycle(packages)
    assert cycle is None, " → ".join(cycle)
