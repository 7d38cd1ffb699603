"""The house stays navigable (docs/architecture.md): no package holds more than
`MAX_FLAT` modules side by side, and no module grows past `MAX_LINES` lines unless its
docstring says why ("Over 500 lines: ..."). A room that outgrows these asks for a
subpackage with a name a newcomer can find."""

from __future__ import annotations

import ast
from pathlib import Path

import rlvr

ROOT = Path(rlvr.__file__).parent
MAX_FLAT = 15
MAX_LINES = 500
REASON = "Over 500 lines:"


def flat_modules(package: Path) -> list[str]:
    return sorted(p.name for p in package.glob("*.py") if p.stem not in ("__init__", "__main__"))


def test_no_package_holds_more_than_fifteen_modules_flat():
    crowded = {
        str(d.relative_to(ROOT.parent)): len(flat_modules(d))
        for d in [ROOT, *ROOT.rglob("*")]
        if d.is_dir() and d.name != "__pycache__" and len(flat_modules(d)) > MAX_FLAT
    }
    assert not crowded, f"packages with more than {MAX_FLAT} modules side by side: {crowded}"


def test_no_module_is_over_500_lines_without_a_reason():
    long = []
    for path in ROOT.rglob("*.py"):
        text = path.read_text()
        if text.count("\n") > MAX_LINES and REASON not in (
            ast.get_docstring(ast.parse(text)) or ""
        ):
            long.append(f"{path.relative_to(ROOT.parent)} ({text.count(chr(10))} lines)")
    assert not long, f"modules over {MAX_LINES} lines whose docstring gives no reason: {long}"


def test_the_checks_can_fail(tmp_path):
    crowded = tmp_path / "pkg"
    crowded.mkdir()
    for i in range(MAX_FLAT + 1):
        (crowded / f"m{i}.py").write_text("")
    (crowded / "__init__.py").write_text("")
    assert len(flat_modules(crowded)) == MAX_FLAT + 1
