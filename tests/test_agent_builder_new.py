"""`rlvr new env|tool|reward NAME` writes a working skeleton, its config and a test that
passes as written: the shortest path to a custom environment is one command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "rollout"))

from scripted_engine import EOS, ScriptedEngine

from rlvr.cli import main
from rlvr.cli.new import class_name
from rlvr.envs.attach import attach_environment
from rlvr.models import CharTokenizer
from rlvr.rollout import SamplingParams
from rlvr.rollout.episodes import generate_for
from rlvr.tasks import make_task

ROOT = Path(__file__).resolve().parents[1]


def test_class_names_are_camel_case():
    assert class_name("number_game") == "NumberGame"
    assert class_name("guess") == "Guess"


def test_each_skeleton_and_its_test_pass_as_written(tmp_path, capsys):
    for kind in ("env", "tool", "reward"):
        assert main(["new", kind, f"my_{kind}", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"next: cd {tmp_path} && python -m pytest test_my_env.py && rlvr train" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{prefix}my_{kind}.{ext}"
        for kind in ("env", "tool", "reward")
        for prefix, ext in (("", "py"), ("", "yaml"), ("test_", "py"))
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "7 passed" in done.stdout


def test_the_env_skeleton_plays_episodes_in_rlvrs_loop(tmp_path, monkeypatch):
    assert main(["new", "env", "number_game", "--dir", str(tmp_path)]) == 0
    monkeypatch.syspath_prepend(str(tmp_path))
    task = make_task("arithmetic", digits=2, ops="+")
    attach_environment(task, "number_game:NumberGame", {"max_tries": 3}, [], {"max_turns": 3})
    problem = task.problems("train")[0]
    answer = int(problem.answer)

    def policy(context, k):  # one too low, then right
        tries = context.count("\\boxed")
        return f" \\boxed{{{answer - 1 + tries}}}" + ("" if tries == 0 else EOS)

    engine = ScriptedEngine(CharTokenizer(), policy)
    gen = generate_for(engine, task, [problem], SamplingParams(1, max_new_tokens=60), None)
    assert gen.texts == [f" \\boxed{{{answer - 1}}} higher \\boxed{{{answer}}}"]
    assert (gen.episodes[0].turns, gen.episodes[0].ended_by) == (2, "env")
    assert task.verify(problem, gen.texts[0]).correct


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["new", "env", "Guess-Game"], "NAME 'Guess-Game' must be a lower-case Python identifier"),
        (["new", "env", "class"], "NAME 'class' must be a lower-case Python identifier"),
    ],
)
def test_a_bad_name_is_refused(argv, message, capsys, tmp_path):
    assert main([*argv, "--dir", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_nothing_is_overwritten(tmp_path, capsys):
    (tmp_path / "guess.py").write_text("# mine\n")
    assert main(["new", "env", "guess", "--dir", str(tmp_path)]) == 2
    assert f"{tmp_path / 'guess.py'} exist already; nothing written" in capsys.readouterr().err
    assert (tmp_path / "guess.py").read_text() == "# mine\n"
    assert not (tmp_path / "guess.yaml").exists()
