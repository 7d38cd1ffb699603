"""The alfworld task (rlvr.tasks.alfworld) on handmade games in ALFWorld's on-disk format,
written by `write_game` of tests/envs/test_alfworld.py (its kitchen, walkthrough and the
engine's answers, checked there word for word).

The option and error tests run everywhere; the ones that play need the alfworld extra."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_alfworld import (
    ANSWERS,
    APPLE,
    COUNTER,
    FRIDGE,
    GAME_ID,
    INTRO,
    WALKTHROUGH,
    needs_alfworld,
    write_game,
)

from rlvr.envs.alfworld import AlfworldEnvironment, won_minus_invalid
from rlvr.tasks import make_task
from rlvr.tasks.alfworld import ALFWORLD_SPLIT, AlfworldTask

SEEN = "valid_seen/pick_and_place_simple-Apple-None-Fridge-7/trial_T7"
UNSEEN = "valid_unseen/pick_and_place_simple-Apple-None-Fridge-8/trial_T8"
HEAT = "train/pick_heat_then_place_in_recep-Apple-None-Fridge-1/trial_T1"


def won_at_start(game_file: Path) -> None:
    """Rewrite a handmade game so the apple starts in the fridge: the goal holds before the
    first command, and any command, valid or not, ends the episode won."""
    game = json.loads(game_file.read_text())
    game["pddl_problem"] = game["pddl_problem"].replace(
        f"(inReceptacle {APPLE} {COUNTER})", f"(inReceptacle {APPLE} {FRIDGE})"
    )
    game_file.write_text(json.dumps(game))


@pytest.fixture
def root(tmp_path: Path, monkeypatch) -> Path:
    """Two train games, one valid_seen, one valid_unseen; $ALFWORLD_DATA unset, so only
    the task's option can name the root."""
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    for game_id in (GAME_ID, HEAT, SEEN, UNSEEN):
        write_game(tmp_path, game_id)
    return tmp_path


def text_of(actions: list[str], answers: list[str], won: bool) -> str:
    """An episode's text as the environment writes it: `` command\\n``, the answer, and
    ``\\n>`` after every answer but the one that ends the episode."""
    text = "".join(f" {a}\n{o}\n>" for a, o in zip(actions, answers, strict=True))
    return text[: -len("\n>")] if won else text


WON = text_of(WALKTHROUGH, ANSWERS, won=True)
LOST = text_of([*WALKTHROUGH[:2], "dance"], [*ANSWERS[:2], "Nothing happens."], won=False)


# Options and errors: no engine needed.


def test_the_splits_are_alfworlds():
    assert ALFWORLD_SPLIT == {"train": "train", "dev": "valid_seen", "eval": "valid_unseen"}


def test_no_data_root_names_the_option_and_the_variable(tmp_path, monkeypatch):
    if not all(__import__("importlib").util.find_spec(m) for m in ("alfworld", "textworld")):
        pytest.skip("the extra's error comes first without it")
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    with pytest.raises(ValueError) as error:
        make_task("alfworld")
    assert str(error.value) == (
        "task alfworld: task_options.data_root is not set and $ALFWORLD_DATA is empty; set "
        "one to the folder of ALFWorld's games (the one alfworld-download fills)"
    )
    absent = str(tmp_path / "absent")
    with pytest.raises(ValueError) as error:
        make_task("alfworld", data_root=absent)
    assert str(error.value) == (
        f"task alfworld: task_options.data_root is {absent!r}, which is not a folder"
    )
    monkeypatch.setenv("ALFWORLD_DATA", absent)
    with pytest.raises(ValueError) as error:
        make_task("alfworld")
    assert str(error.value) == f"task alfworld: $ALFWORLD_DATA is {absent!r}, which is not a folder"


def test_a_split_without_games_names_the_split_the_folder_the_option_and_the_variable(
    tmp_path, monkeypatch
):
    if not all(__import__("importlib").util.find_spec(m) for m in ("alfworld", "textworld")):
        pytest.skip("the extra's error comes first without it")
    write_game(tmp_path, GAME_ID)  # train only
    task = make_task("alfworld", data_root=str(tmp_path))
    inner = str((tmp_path / "json_2.1.1").resolve())
    with pytest.raises(ValueError) as error:
        task.problems("eval")
    assert str(error.value) == (
        f"task alfworld: no games for split 'eval' (ALFWorld's 'valid_unseen') under "
        f"{inner!r} (task_options.data_root, else $ALFWORLD_DATA): expected valid_unseen/"
        "<task type>-.../<trial>/game.tw-pddl marked solvable, beside traj_data.json, of "
        "task types pick_and_place_simple, pick_two_obj_and_place, look_at_obj_in_light, "
        "pick_clean_then_place_in_recep, pick_heat_then_place_in_recep, "
        "pick_cool_then_place_in_recep"
    )
    assert AlfworldTask(str(tmp_path), eval_size=0).problems("eval") == []  # none asked


def test_without_the_extra_the_error_names_the_install_command(tmp_path, monkeypatch):
    # None in sys.modules makes find_spec answer None: the package looks absent.
    monkeypatch.setitem(__import__("sys").modules, "textworld", None)
    with pytest.raises(ValueError) as error:
        make_task("alfworld", data_root=str(tmp_path))
    assert str(error.value) == (
        "task alfworld needs the alfworld extra: pip install -e '.[alfworld]' "
        "(alfworld and textworld[pddl]); missing: textworld"
    )


# The real engine on the handmade games.


@needs_alfworld
def test_the_problems_are_the_games_of_each_alfworld_split(root):
    task = make_task("alfworld", data_root=str(root))
    inner = (root / "json_2.1.1").resolve()
    train = task.problems("train")
    # find_games sorts by id: pick_and_place_simple-... before pick_heat_then_place-...
    assert [(p.uid, p.prompt, p.answer, p.target) for p in train] == [
        ("alfworld/train/0", INTRO + "\n>", GAME_ID, ""),
        ("alfworld/train/1", INTRO + "\n>", HEAT, ""),
    ]
    assert train[1].columns == {
        "task_type": "pick_heat_then_place_in_recep",
        "game_file": str(inner / HEAT / "game.tw-pddl"),
    }
    assert [p.answer for p in task.problems("dev")] == [SEEN]
    assert [p.answer for p in task.problems("eval")] == [UNSEEN]
    only_heat = AlfworldTask(str(root), task_types=["pick_heat_then_place_in_recep"])
    assert [p.answer for p in only_heat.problems("train")] == [HEAT]
    assert len(AlfworldTask(str(root), train_size=1).problems("train")) == 1
    with pytest.raises(ValueError, match="train_size is 3, but ALFWorld's 'train' has 2 games"):
        AlfworldTask(str(root), train_size=3).problems("train")


@needs_alfworld
def test_the_verifier_replays_a_won_and_a_lost_trajectory(root):
    task = make_task("alfworld", data_root=str(root))
    problem = task.problems("train")[0]
    won = task.verify(problem, WON)
    assert (won.correct, won.formatted, won.reason) == (True, True, "won in 5 steps, 0 invalid")
    # Two right commands, then one that is not admissible; the game goes on, unwon.
    lost = task.verify(problem, LOST)
    assert (lost.correct, lost.reason) == (False, "not won after 3 steps, 1 invalid")
    # The task's max_steps binds the replay: the five-command win does not fit in four.
    short = AlfworldTask(str(root), max_steps=4).verify(problem, WON)
    assert (short.correct, short.reason) == (False, "not won after 4 steps, 0 invalid")


@needs_alfworld
def test_won_minus_invalid_reads_the_game_file_column_without_the_variable(root):
    task = make_task("alfworld", data_root=str(root))
    problem = task.problems("train")[0]
    # WON: 1 − 0.1·0 = 1.0; LOST: 0 − 0.1·1 = −0.1 ($ALFWORLD_DATA is unset: the column
    # alone finds the game).
    files = [problem.columns["game_file"]] * 2
    rewards = won_minus_invalid(["", ""], [WON, LOST], [GAME_ID] * 2, game_file=files)
    assert rewards == [1.0, pytest.approx(-0.1, abs=1e-12)]
    # abs 1e-12: 0 − 0.1 is −0.1 to within one float64 rounding (~1e-17).


@needs_alfworld
def test_the_task_attaches_the_environment_that_plays_the_problem(root):
    task = make_task("alfworld", data_root=str(root), max_steps=7, show_admissible=True)
    problem = task.problems("dev")[0]
    environment = task.environment(problem)
    assert isinstance(environment, AlfworldEnvironment)
    assert (environment.max_steps, environment.show_admissible) == (7, True)
    assert (task.episode_budgets.max_turns, task.episode_budgets.max_tool_calls) == (8, 7)
    environment.reset(problem)
    replies = [environment.step(f" {a}\n") for a in WALKTHROUGH]
    assert [r.reward for r in replies] == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert replies[-1].done


@needs_alfworld
def test_rlvr_train_eval_accuracy_is_the_won_fraction(tmp_path, monkeypatch):
    """One `rlvr train` step with `task: alfworld` and a random local Qwen2; the eval split
    (valid_unseen) holds two games, one won before the first command (`won_at_start`), so
    any policy wins it and a random one, whose commands are inadmissible, loses the other."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "train"))
    from local_model import local_policy_dir

    from rlvr.train import run_training
    from rlvr.train.config import resolve_config

    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    data = tmp_path / "data"
    for i in range(2):
        write_game(data, f"train/pick_and_place_simple-Apple-None-Fridge-{i}/t{i}")
    write_game(data, SEEN)  # the trainer reads every split (its longest prompt)
    write_game(data, UNSEEN)
    won_at_start(write_game(data, "valid_unseen/pick_and_place_simple-Apple-None-Fridge-9/t9"))
    cfg = resolve_config(
        {
            "task": "alfworld",
            "task_options": {"data_root": str(data), "max_steps": 3, "max_turn_tokens": 16},
            "reward_funcs": ["rlvr.envs.alfworld:won_minus_invalid"],
            "recipe": "dr_grpo",
            "aggregation": "seq_mean_token_sum",
            "model": local_policy_dir(tmp_path, max_position_embeddings=1024),
            "max_new_tokens": 300,
            "steps": 1,
            "prompts_per_step": 1,
            "group_size": 2,
            "eval_every": 1,
            "eval_size": 0,
            "progress": False,
            "out": str(tmp_path / "run"),
        }
    )
    played: list[AlfworldEnvironment] = []  # every episode's environment, as reset
    reset = AlfworldEnvironment.reset
    monkeypatch.setattr(
        AlfworldEnvironment, "reset", lambda env, problem: played.append(env) or reset(env, problem)
    )
    assert run_training(cfg)["steps"] == 1
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    evals = [m["eval/accuracy"] for m in map(json.loads, lines) if "eval/accuracy" in m]
    # The eval games' environments, at their episodes' ends: won as the engine says.
    won = [env.world.won() for env in played if env.problem.answer.startswith("valid_unseen/")]
    assert len(evals) == 2 and len(won) >= 4  # step 0 and step 1, two games each
    # Exact: 1 of 2 games a check, and the same half of the eval episodes the engine won.
    assert evals == [0.5, 0.5] and sum(won) / len(won) == 0.5
