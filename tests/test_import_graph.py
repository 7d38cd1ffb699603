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


ROOMS: dict[str, set[str]] = {
    # package: the packages it may import (docs/architecture.md draws them). Everything not
    # listed is a forbidden arrow: e.g. nothing below `train` imports `train`, `algo` and
    # `runlog` import nothing but `checks`, `verify` imports no model, and only the
    # command line (and `__main__`) imports `cli`.
    "__main__": {"cli"},
    "checks": set(),
    "verify_helper": set(),
    "verify": {"verify_helper", "checks"},
    "tools": {"checks", "verify"},
    "envs": {"checks", "tools", "verify"},
    "tasks": {"checks", "envs", "tools", "verify"},
    "rewards": {"checks", "verify"},
    "vision": {"checks"},
    "models": {"checks", "vision"},
    "rollout": {"checks", "models", "envs", "tools", "verify", "vision"},
    "warmstart": {"checks", "models", "rollout", "runlog", "tasks", "verify", "vision"},
    "algo": {"checks"},
    "runlog": {"checks"},
    "parts": {"checks", "envs", "models", "rewards", "rollout", "tasks", "tools", "verify"}
    | {"warmstart"},
    "eval": {"checks", "envs", "models", "parts", "rollout", "tasks", "verify", "warmstart"},
    "train": {"algo", "checks", "envs", "eval", "models", "parts", "rewards", "rollout"}
    | {"runlog", "tasks", "tools", "verify", "vision", "warmstart"},
    "service": {"algo", "checks", "envs", "eval", "models", "parts", "rewards", "rollout"}
    | {"runlog", "tasks", "tools", "train", "verify", "vision", "warmstart"},
    "audit": {"algo", "checks"},
    "compare": {"algo", "checks", "eval", "models", "runlog", "tasks", "train"},
    "show": {"checks", "eval", "runlog"},
    "cli": {"algo", "audit", "checks", "compare", "eval", "parts", "runlog", "service"}
    | {"show", "tasks", "train"},
}
ARGUMENT_PARSERS = {"rlvr.service.as_tinker", "rlvr.service.as_pytrio", "rlvr.show.browser"}
"""`python -m` runners of a front or a tool, which parse their own few flags; every
subcommand of `rlvr` parses its arguments in `rlvr.cli`."""


def package_graph() -> dict[str, set[str]]:
    """The import graph collapsed to rlvr's top-level packages (short names)."""
    top = lambda module: module.split(".")[1] if "." in module else ""  # noqa: E731
    packages: dict[str, set[str]] = {}
    for module, imported in import_graph().items():
        packages.setdefault(top(module), set()).update({top(m) for m in imported})
    return {p: found - {p} for p, found in packages.items()}


def test_rlvr_holds_only_packages():
    loose = sorted(
        p.name for p in ROOT.glob("*.py") if p.name not in ("__init__.py", "__main__.py")
    )
    assert not loose, f"modules loose at the top of rlvr/: {loose}; each belongs in a package"


def test_every_package_imports_only_the_rooms_below_it():
    graph = package_graph()
    graph.pop("", None)  # rlvr/__init__ and __main__
    unknown = sorted(set(graph) - set(ROOMS))
    assert not unknown, f"packages without a room in ROOMS (and docs/architecture.md): {unknown}"
    upward = {p: sorted(graph[p] - ROOMS[p]) for p in graph if graph[p] - ROOMS[p]}
    assert not upward, f"forbidden arrows (package: what it imports): {upward}"


def test_rooms_forbid_what_design_forbids():
    """The table itself keeps DESIGN's rules, so loosening it is a visible decision."""
    below_train = {p for p, allowed in ROOMS.items() if "train" not in allowed} - {"train"}
    assert {"algo", "models", "rollout", "tasks", "eval", "parts", "runlog"} <= below_train
    assert ROOMS["algo"] == {"checks"} and ROOMS["checks"] == set()
    assert not ROOMS["verify"] & {"models", "rollout", "train", "algo"}
    assert all("cli" not in allowed for room, allowed in ROOMS.items() if room != "__main__")
    assert ROOMS["verify_helper"] == set()


def test_only_the_cli_parses_arguments():
    parsers = set()
    for path in ROOT.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if "argparse" in names:
                parsers.add(_module_name(path))
    outside = sorted(
        m for m in parsers if not m.startswith("rlvr.cli") and m not in ARGUMENT_PARSERS
    )
    assert not outside, f"modules outside rlvr.cli that parse arguments: {outside}"


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
