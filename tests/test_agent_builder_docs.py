"""docs/extending.md's examples run as written (issue 42, the trial's §1a/§1b): its blocks
are read from the page, written to files in a directory, and run from that directory
with the `rlvr` command, which imports them from there (no PYTHONPATH): the loss module
and its training command, the audit overrides and their stated numbers, the compare
matrix, the decorator block, the environment and its config (a budget that fits: no
warning)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

sys.path.insert(0, str(Path(__file__).parent / "rollout"))

from scripted_engine import EOS, ScriptedEngine

from rlvr.cli import main
from rlvr.cli.main import importable_here

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "extending.md").read_text()
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```", re.S | re.M)
BLOCKS = FENCE.findall(PAGE)


def block(lang: str, containing: str) -> str:
    """The page's one `lang` block that contains `containing`."""
    found = [body for kind, body in BLOCKS if kind.strip() == lang and containing in body]
    assert len(found) == 1, (lang, containing, len(found))
    return found[0]


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A user's directory holding the page's modules, as the current directory, with the
    `rlvr` command's import rule and nothing else on the path for them."""
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "losses.py").write_text(block("python", "def sign_advantage"))
    (tmp_path / "user_envs.py").write_text(block("python", "class GuessNumber"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(ROOT / "tests"))])
    names = ("mypkg", "mypkg.losses", "user_envs")
    saved = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    importable_here()
    yield tmp_path
    for name in names:  # the page's user_envs must not stand in for tests/user_envs.py
        sys.modules.pop(name, None)
    sys.modules.update(saved)


def test_the_training_command_runs_as_written_from_the_users_directory(here, capsys):
    command = block("bash", "mypkg.losses:sign_advantage").replace("\\\n", " ")
    argv = command.split()[1:]
    assert argv[:3] == ["train", "--recipe", "grpo"] and "--steps" in argv
    small = ["--set", "eval_size=4", "--set", "prompts_per_step=2", "--set", "group_size=4"]
    assert main([*argv, *small]) == 0, capsys.readouterr().err
    assert (here / "runs" / "mine" / "summary.json").is_file()
    recorded = yaml.safe_load((here / "runs" / "mine" / "config.yaml").read_text())
    assert recorded["advantage"] == "mypkg.losses:sign_advantage"


def test_the_audit_overrides_give_the_numbers_the_page_states(here, capsys):
    overrides = json.loads("{" + block("json", '"overrides"') + "}")["overrides"]
    batch = json.loads((ROOT / "examples" / "audit_batch.json").read_text())
    batch["overrides"] = overrides
    (here / "batch.json").write_text(json.dumps(batch))
    assert main(["audit", "batch.json", "--table"]) == 0
    rows = capsys.readouterr().out.splitlines()
    # "Â = ±1 on group 0 and ∂L/∂logπ = −2·w·Â: −0.25 on the 2-token correct response
    # (w = 1/8), +0.0625 on the 8-token wrong one (w = 1/32)": −2·(1/8)·(+1) = −0.25 and
    # −2·(1/32)·(−1) = +0.0625, exact in binary floating point
    assert "    0    0   2   1.000  +1.0000 ×2                    -0.2500 ×2" in rows
    assert "    0    1   8   0.000  -1.0000 ×8                    +0.0625 ×8" in rows


def test_the_compare_matrix_is_a_valid_spec(here):
    from rlvr.compare import spec_from_options

    spec = spec_from_options(matrix=yaml.safe_load(block("yaml", "mypkg.losses:doubled_pg")))
    assert spec.labels() == ["builtin", "mine"]


def test_the_decorator_block_runs(here):
    code = block("python", "register_advantage") + "\nprint(recipe.surrogate)\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "doubled_pg"


def test_the_environment_config_loads_without_a_budget_warning_and_plays(here):
    from rlvr.cli.train import budget_warning
    from rlvr.models import CharTokenizer
    from rlvr.parts import Episodes, build_task
    from rlvr.rollout import SamplingParams
    from rlvr.rollout.episodes import generate_for
    from rlvr.train.config import resolve_config

    cfg = resolve_config(yaml.safe_load(block("yaml", "user_envs:GuessNumber")))
    assert budget_warning(cfg, budget_set=True) is None  # the page sets max_new_tokens
    assert cfg.max_new_tokens == 64
    task = build_task(cfg.task, cfg.task_options, Episodes.of(cfg))
    problem = task.problems("train")[0]
    answer = int(problem.answer)

    def policy(context, k):  # guesses one too low, then right
        return (
            f"<guess>{answer - 1}</guess>"
            if "higher" not in context
            else f"<guess>{answer}</guess>{EOS}"
        )

    engine = ScriptedEngine(CharTokenizer(), policy)
    params = SamplingParams(1, max_new_tokens=cfg.max_new_tokens)
    gen = generate_for(engine, task, [problem], params, torch.Generator())
    assert gen.texts == [f"<guess>{answer - 1}</guess> higher<guess>{answer}</guess> right"]
