"""Every rlvr name that docs, examples, configs and README tell users to write still
resolves: `module:function` strings (reward functions, tools, environments), dotted paths
such as `rlvr.tools.python_sandbox.run_python`, and `from rlvr... import ...` lines. A move
of a module that breaks what a user copied from the docs fails here."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
    *sorted((ROOT / "examples").rglob("*.py")),
    *sorted((ROOT / "examples").rglob("*.yaml")),
    *sorted((ROOT / "configs").rglob("*.yaml")),
    *sorted((ROOT / "studies").rglob("*.yaml")),
]
COLON = re.compile(r"(?<![\w./])(rlvr(?:\.\w+)+):(\w+)")
DOTTED = re.compile(r"(?<![\w./-])(rlvr(?:\.\w+)+)(?![\w:/-])")
FROM_IMPORT = re.compile(r"^\s*from (rlvr(?:\.\w+)*) import \(?([\w, ]+)\)?\s*$", re.MULTILINE)


def resolve(dotted: str) -> object:
    """The module or attribute `dotted` names: the longest importable module prefix, then
    attributes down from it. Raises (ImportError, AttributeError) when it does not exist."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            found = getattr(found, name)
        return found
    raise ImportError(dotted)


def names_in(text: str) -> set[str]:
    """The rlvr names `text` tells a user to write, as dotted paths."""
    found = {f"{module}.{name}" for module, name in COLON.findall(text)}
    found |= {d.rstrip(".") for d in DOTTED.findall(text)}
    for module, names in FROM_IMPORT.findall(text):
        found |= {f"{module}.{n.strip()}" for n in names.split(",") if n.strip()}
    return found


def test_names_in_finds_each_form():
    text = (
        "reward_funcs: [rlvr.rewards:correctness]\n"
        "see `rlvr.train.run.run_training` and rlvr/train/run.py\n"
        "from rlvr.tools import python, run_python\n"
    )
    assert names_in(text) == {
        "rlvr.rewards.correctness",
        "rlvr.train.run.run_training",
        "rlvr.tools",
        "rlvr.tools.python",
        "rlvr.tools.run_python",
    }


def test_resolve_fails_on_a_moved_name():
    assert callable(resolve("rlvr.rewards.correctness"))
    with pytest.raises((ImportError, AttributeError)):
        resolve("rlvr.train.hf_setup.make_engine")  # moved to rlvr.parts
    with pytest.raises((ImportError, AttributeError)):
        resolve("rlvr.rewards.no_such_reward")


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_public_name_resolves(path: Path):
    missing = []
    for name in sorted(names_in(path.read_text())):
        try:
            resolve(name)
        except (ImportError, AttributeError) as err:
            missing.append(f"{name} ({type(err).__name__})")
    assert not missing, f"{path.relative_to(ROOT)} names what does not import: {missing}"
