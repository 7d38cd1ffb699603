"""The docs stay true: transcripts match the CLI, runnable blocks run, links resolve.

Three markers in the Markdown (docs/README.md explains them to writers):
- a ```console block whose lines start with `$ rlvr audit`, `recipes`, `evalsize` or
  `compare --items` is a transcript: each command is run in-process and its output must
  equal the lines that follow it, verbatim (trailing spaces and surrounding blank lines
  aside);
- a ```bash runnable block is run by bash from the repository root, in fast mode:
  `RLVR_DOCS_FAST=1` and the rewrites of `fast_mode` (fewer steps and seeds, a small
  eval, outputs in a temporary directory);
- every relative link `[text](path#anchor)` in README.md and docs/**/*.md must name an
  existing file, and its anchor a heading of that file (GitHub's slug rules).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.cli import main as rlvr_main

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
LINKED = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
CHAPTERS = sorted(DOCS.glob("[0-9][0-9]-*.md"))
TRANSCRIBED_DOCS = [*CHAPTERS, DOCS / "methods.md"]  # pages whose console blocks are checked
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
TRANSCRIBED = ("rlvr audit", "rlvr recipes", "rlvr evalsize", "rlvr compare --items")


def blocks(path: Path, info: str) -> list[str]:
    return [body for lang, body in FENCE.findall(path.read_text()) if lang.strip() == info]


def transcripts() -> list[tuple[str, str, str]]:
    """(chapter, command, expected output) for every `$ rlvr ...` line of console blocks."""
    found = []
    for path in TRANSCRIBED_DOCS:
        for body in blocks(path, "console"):
            parts = re.split(r"^\$ (.*)\n", body, flags=re.M)
            for command, output in zip(parts[1::2], parts[2::2], strict=True):
                if command.startswith(TRANSCRIBED):
                    found.append((path.name, command, output))
    return found


def normalized(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def run_cli(command: str) -> str:
    args = shlex.split(command)[1:]
    out = io.StringIO()
    with contextlib.chdir(ROOT), contextlib.redirect_stdout(out):
        assert rlvr_main(args) == 0
    return out.getvalue()


@pytest.mark.parametrize(("chapter", "command", "expected"), transcripts())
def test_transcript_matches_cli(chapter: str, command: str, expected: str) -> None:
    assert normalized(run_cli(command)) == normalized(expected), f"{chapter}: $ {command}"


def test_chapters_have_transcripts() -> None:
    # The marker must keep matching something: a renamed info string would silently
    # turn every transcript check off.
    assert len(CHAPTERS) >= 8
    assert len(transcripts()) >= 20


FAST_STEPS, FAST_SEEDS, FAST_EVAL = 1, 1, 8


def fast_mode(command: str, tmp: Path) -> str:
    """The rewrites of RLVR_DOCS_FAST=1: the command as written, made small.

    `--steps N` → 1, `--seeds N` → 1, `runs/` → a temporary directory, and every
    `rlvr train` / `rlvr compare` gets `--set eval_size=8 --set prompts_per_step=4`.
    """
    command = re.sub(r"--steps \d+", f"--steps {FAST_STEPS}", command)
    command = re.sub(r"--seeds \d+", f"--seeds {FAST_SEEDS}", command)
    command = command.replace("runs/", f"{tmp}/runs/")
    small = f" --set eval_size={FAST_EVAL} --set prompts_per_step=4"
    return re.sub(r"^(rlvr (?:train|compare) .*)$", rf"\1{small}", command, flags=re.M)


def runnable_blocks() -> list[tuple[str, str]]:
    return [(p.name, body) for p in CHAPTERS for body in blocks(p, "bash runnable")]


def test_runnable_training_blocks_are_bounded() -> None:
    # Fast mode can only shrink what it can see: a training command without `--steps`
    # would run its config's full length inside the test.
    for name, body in runnable_blocks():
        for line in body.splitlines():
            if re.match(r"rlvr (train|compare) ", line):
                assert "--steps" in line, f"{name}: {line}"


@pytest.mark.parametrize(("chapter", "body"), runnable_blocks())
def test_runnable_block_runs(chapter: str, body: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "RLVR_DOCS_FAST": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
    }
    script = "set -euo pipefail\n" + fast_mode(body, tmp_path)
    done = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{chapter}:\n{script}\n{done.stdout}\n{done.stderr}"


def test_fast_mode_rewrites() -> None:
    got = fast_mode("rlvr train --steps 100 --out runs/x\nrlvr audit a.json", Path("/t"))
    assert got == (
        "rlvr train --steps 1 --out /t/runs/x --set eval_size=8 --set prompts_per_step=4\n"
        "rlvr audit a.json"
    )


def slug(heading: str) -> str:
    """GitHub's anchor: lower case, punctuation dropped (not - or _), spaces → '-'."""
    text = re.sub(r"`|\*\*|\*", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_slug_follows_github() -> None:
    assert slug("1. Advantage (where Â comes from)") == "1-advantage-where-â-comes-from"
    assert slug("`rlvr audit`: see the objective") == "rlvr-audit-see-the-objective"
    assert slug("Resume and parallel runs") == "resume-and-parallel-runs"


def relative_links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)
    targets = LINK.findall(text) + IMAGE.findall(text)
    return [t for t in targets if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("path", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    broken = []
    for target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        is_md = dest.exists() and dest.suffix == ".md"
        if not dest.exists() or (anchor and is_md and anchor not in anchors(dest)):
            broken.append(target)
    assert not broken, f"{path.relative_to(ROOT)}: {broken}"


def test_docs_index_lists_every_chapter() -> None:
    index = (DOCS / "README.md").read_text()
    for chapter in CHAPTERS:
        assert f"({chapter.name})" in index, chapter.name


def test_offpolicy_variants_differ_only_in_overrides() -> None:
    # Each docs/audit/offpolicy_*.json compares one choice "with everything else fixed":
    # the same groups as offpolicy.json, and one overrides entry.
    base = json.loads((DOCS / "audit" / "offpolicy.json").read_text())
    variants = sorted((DOCS / "audit").glob("offpolicy_*.json"))
    assert len(variants) >= 5
    for path in variants:
        batch = json.loads(path.read_text())
        assert batch["groups"] == base["groups"], path.name
        assert set(batch) == {"recipe", "overrides", "groups"} and batch["overrides"], path.name
