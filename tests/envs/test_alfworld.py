"""rlvr.envs.alfworld on a handmade game in ALFWorld's on-disk format, written here: the
folder layout, ``traj_data.json``, and ``game.tw-pddl`` with ALFWorld's own PDDL domain and
text grammar (shipped in the alfworld package) and a small PDDL problem of ours. The game
is played by the real engine (TextWorld's PDDL environment with ALFWorld's demangler); its
transcript below is what that engine answered, checked by hand against ALFWorld's grammar
(``alfred.twl2``: "You arrive at {r.name}. #examineReceptacle.feedback#", ...).

The engine's tests need the alfworld extra and are skipped without it; the discovery and
option tests run everywhere."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from rlvr.envs import alfworld
from rlvr.envs.alfworld import (
    AlfworldEnvironment,
    AlfworldWorld,
    data_root,
    find_games,
    game_path,
    game_rows,
    replay,
    replay_text,
    won_minus_invalid,
)
from rlvr.tasks.base import Problem

HAS_EXTRA = all(importlib.util.find_spec(m) is not None for m in ("textworld", "alfworld"))
needs_alfworld = pytest.mark.skipif(
    not HAS_EXTRA, reason="needs the alfworld extra: pip install '.[alfworld]'"
)

GAME_ID = "train/pick_and_place_simple-Apple-None-Fridge-1/trial_T0"
GOAL = "put some apple in fridge"


def mangled(kind: str, x: int) -> str:
    """An ALFRED id, ``Kind|+0x.00|+00.90|-01.00`` in PDDL's spelling; the demangler
    names it ``kind n`` (numbered per kind)."""
    return f"{kind}_bar__plus_0{x}_dot_00_bar__plus_00_dot_90_bar__minus_01_dot_00"


APPLE, MUG = mangled("Apple", 1), mangled("Mug", 2)
COUNTER, FRIDGE, CABINET = mangled("CounterTop", 3), mangled("Fridge", 4), mangled("Cabinet", 5)
PLACES = {
    COUNTER: "loc_bar_1_bar_1_bar_0_bar_45",
    FRIDGE: "loc_bar_2_bar_2_bar_0_bar_45",
    CABINET: "loc_bar_3_bar_3_bar_0_bar_45",
}
START = "loc_bar_0_bar_0_bar_0_bar_30"  # the agent starts next to no receptacle


def problem_pddl() -> str:
    """A kitchen in ALFRED's PDDL: an apple on the counter, a mug in the closed cabinet,
    a closed fridge; the goal, as ALFWorld writes pick_and_place_simple's: some apple in
    some fridge."""
    locations = " ".join(f"{loc} - location" for loc in [*PLACES.values(), START])
    at = " ".join(f"(receptacleAtLocation {r} {loc})" for r, loc in PLACES.items())
    return f"""(define (problem plan_trial_T0)
(:domain alfred)
(:objects agent1 - agent
 AppleType MugType - otype
 CounterTopType FridgeType CabinetType - rtype
 {APPLE} {MUG} - object
 {COUNTER} {FRIDGE} {CABINET} - receptacle
 {locations})
(:init (atLocation agent1 {START})
 (receptacleType {COUNTER} CounterTopType) (receptacleType {FRIDGE} FridgeType)
 (receptacleType {CABINET} CabinetType)
 (objectType {APPLE} AppleType) (objectType {MUG} MugType)
 (canContain FridgeType AppleType) (canContain CounterTopType AppleType)
 (canContain CounterTopType MugType) (canContain CabinetType MugType)
 (pickupable {APPLE}) (pickupable {MUG}) (openable {FRIDGE}) (openable {CABINET})
 (inReceptacle {APPLE} {COUNTER}) (inReceptacle {MUG} {CABINET})
 (objectAtLocation {APPLE} {PLACES[COUNTER]}) (objectAtLocation {MUG} {PLACES[CABINET]})
 {at})
(:goal (and (exists (?r - receptacle) (exists (?o - object)
 (and (inReceptacle ?o ?r) (objectType ?o AppleType) (receptacleType ?r FridgeType))))))
)"""


def write_game(
    root: Path, game_id: str = GAME_ID, solvable: bool = True, task_type: str | None = None
) -> Path:
    """One game folder as alfworld-generate writes it: the grammar with "UNKNOWN GOAL"
    replaced by the goal sentence, the domain and problem, ``solvable``."""
    if HAS_EXTRA:
        from importlib import resources

        logic = resources.files("alfworld") / "data"
        domain = (logic / "alfred.pddl").read_text()
        grammar = (logic / "alfred.twl2").read_text().replace("UNKNOWN GOAL", GOAL)
    else:  # discovery reads only the JSON keys
        domain, grammar = "(define (domain alfred))", f"Your task is to: {GOAL}."
    folder = root / "json_2.1.1" / game_id
    folder.mkdir(parents=True)
    game = {
        "pddl_domain": domain,
        "grammar": grammar,
        "pddl_problem": problem_pddl(),
        "solvable": solvable,
        "walkthrough": None,
    }
    (folder / "game.tw-pddl").write_text(json.dumps(game))
    kind = task_type or game_id.split("/")[1].split("-")[0]
    params = {"object_target": "Apple", "parent_target": "Fridge", "object_sliced": False}
    (folder / "traj_data.json").write_text(json.dumps({"task_type": kind, "pddl_params": params}))
    return folder / "game.tw-pddl"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    write_game(tmp_path)
    return tmp_path


WALKTHROUGH = [
    "go to countertop 1",
    "take apple 1 from countertop 1",
    "go to fridge 1",
    "open fridge 1",
    "move apple 1 to fridge 1",
]
ANSWERS = [
    "You arrive at countertop 1. On the countertop 1, you see a apple 1.",
    "You pick up the apple 1 from the countertop 1.",
    "You arrive at fridge 1. The fridge 1 is closed.",
    "You open the fridge 1. The fridge 1 is open. In it, you see nothing.",
    "You move the apple 1 to the fridge 1.",
]
INTRO = (
    "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly "
    "around you, you see a cabinet 1, a countertop 1, and a fridge 1.\n\n"
    f"Your task is to: {GOAL}."
)


# Discovery and options: no engine needed.


def test_data_root_takes_the_option_then_the_variable_and_enters_json_2_1_1(root, monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    assert data_root(root) == root / "json_2.1.1"
    monkeypatch.setenv("ALFWORLD_DATA", str(root))
    assert data_root() == root / "json_2.1.1"
    assert data_root(root / "json_2.1.1") == root / "json_2.1.1"  # given the inner folder


def test_data_root_errors_name_the_option_the_variable_and_the_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    with pytest.raises(ValueError, match=r"data_root is not set and \$ALFWORLD_DATA is empty"):
        data_root()
    with pytest.raises(ValueError, match="is not a folder"):
        data_root(tmp_path / "absent")


def test_find_games_keeps_what_alfworld_keeps(root):
    # Left out, as AlfredTWEnv.collect_game_files leaves them out: an unsolvable game, a
    # movable-receptacle game, another task type when one is asked for, another split.
    write_game(root, "train/pick_heat_then_place_in_recep-Apple-None-Fridge-1/trial_T1")
    write_game(root, "train/pick_and_place_simple-Apple-None-Fridge-2/trial_T2", solvable=False)
    write_game(root, "train/pick_and_place_simple-Apple-movable-Fridge-3/trial_T3")
    write_game(root, "valid_seen/pick_and_place_simple-Apple-None-Fridge-4/trial_T4")
    games = find_games(root, "train")
    assert [(g.game_id, g.task_type) for g in games] == [
        (GAME_ID, "pick_and_place_simple"),
        (
            "train/pick_heat_then_place_in_recep-Apple-None-Fridge-1/trial_T1",
            "pick_heat_then_place_in_recep",
        ),
    ]
    assert [g.game_id for g in find_games(root, "train", ["pick_and_place_simple"])] == [GAME_ID]
    assert games[0].game_file == root / "json_2.1.1" / GAME_ID / "game.tw-pddl"
    assert len(find_games(root, "valid_seen")) == 1
    assert find_games(root, "valid_unseen") == []


def test_find_games_and_game_path_errors_name_the_value_and_the_valid_ones(root):
    with pytest.raises(ValueError, match="split is 'dev'; valid splits are train, valid_seen"):
        find_games(root, "dev")
    with pytest.raises(ValueError, match=r"task_types\[0\] is 'pick'; valid: pick_and_place"):
        find_games(root, "train", ["pick"])
    with pytest.raises(ValueError, match=r"ALFWorld game 'train/none': no game\.tw-pddl at"):
        game_path(root, "train/none")


def test_game_path_reads_relative_ids_under_the_root_and_absolute_ones_as_they_are(root):
    file = root / "json_2.1.1" / GAME_ID / "game.tw-pddl"
    assert game_path(root, GAME_ID) == file
    assert game_path(None, str(file.parent)) == file
    assert game_path(None, str(file)) == file


def test_environment_options_are_checked():
    with pytest.raises(ValueError, match="max_steps must be an integer >= 1, got 0"):
        AlfworldEnvironment(max_steps=0)
    with pytest.raises(ValueError, match="show_admissible must be true or false, got 'yes'"):
        AlfworldEnvironment(show_admissible="yes")  # type: ignore[arg-type]


def test_without_the_extra_the_error_names_it(root, monkeypatch):
    # Hide textworld whether it is installed or not: None in sys.modules fails its import.
    monkeypatch.setitem(__import__("sys").modules, "textworld", None)
    with pytest.raises(ImportError, match=r"needs the alfworld extra: pip install 'rlvr\[alf"):
        AlfworldWorld(game_path(root, GAME_ID))


# The real engine on the handmade game.


@needs_alfworld
def test_the_opening_the_goal_and_the_first_admissible_commands(root):
    world = AlfworldWorld(game_path(root, GAME_ID))
    assert world.intro == INTRO
    assert world.goal == f"{GOAL}."
    # ALFWorld also admits "help"; 08-alfworld does not list it, nor do we.
    assert world.admissible() == [
        "go to cabinet 1",
        "go to countertop 1",
        "go to fridge 1",
        "inventory",
        "look",
    ]
    assert not world.won()


@needs_alfworld
def test_the_walkthrough_wins_and_each_answer_is_alfworlds_text(root):
    world = AlfworldWorld(game_path(root, GAME_ID))
    for action, answer in zip(WALKTHROUGH, ANSWERS, strict=True):
        assert action in world.admissible()
        assert not world.won()
        assert world.step(action) == (answer, True)
    assert world.won()
    assert (world.state.steps, world.state.invalid) == (5, 0)


@needs_alfworld
def test_an_inadmissible_command_changes_nothing_and_counts_as_invalid(root):
    world = AlfworldWorld(game_path(root, GAME_ID))
    world.step("go to countertop 1")
    world.step("take apple 1 from countertop 1")
    before = world.admissible()
    # Well-formed but not admissible here: the fridge is elsewhere (and closed).
    assert world.step("move apple 1 to fridge 1") == ("Nothing happens.", False)
    assert world.admissible() == before
    assert world.step("dance") == ("Nothing happens.", False)
    assert (world.state.steps, world.state.invalid) == (4, 2)


@needs_alfworld
def test_replay_of_a_prefix_reaches_the_same_state(root):
    file = game_path(root, GAME_ID)
    played = AlfworldWorld(file)
    for action in WALKTHROUGH[:3]:
        played.step(action)
    again = replay(file, WALKTHROUGH[:3])
    assert again.admissible() == played.admissible()
    assert again.step(WALKTHROUGH[3]) == played.step(WALKTHROUGH[3])


@needs_alfworld
def test_worlds_played_one_after_another_reuse_their_engine_libraries(root, monkeypatch):
    # TextWorld loads a 34 MB copy of Fast Downward's library per engine and never unloads
    # it; a collected world gives its copy back. TatSu's parse memo keeps the last world's
    # frames (so the world) alive until the next parse: two copies serve any number of games
    # played one after another.
    import gc

    import fast_downward

    loads = []
    load_lib = fast_downward.load_lib
    monkeypatch.setattr(fast_downward, "load_lib", lambda: loads.append(1) or load_lib())
    monkeypatch.setattr(alfworld, "_LIBRARIES", [])
    file = game_path(root, GAME_ID)
    for _ in range(6):
        world = AlfworldWorld(file)
        assert world.step(WALKTHROUGH[0]) == (ANSWERS[0], True)  # a reused copy plays anew
        del world
        gc.collect()
    assert len(loads) == 2


def episode(environment: AlfworldEnvironment, turns: list[str]) -> tuple[str, list]:
    """The episode's text after the prompt, and the replies, as rlvr's episodes make it."""
    text, replies = "", []
    for turn in turns:
        reply = environment.step(turn)
        text += turn + reply.observation
        replies.append(reply)
        if reply.done:
            break
    return text, replies


@needs_alfworld
def test_an_episode_pays_won_minus_a_tenth_per_invalid_command(root, monkeypatch):
    environment = AlfworldEnvironment(data_root=str(root), max_steps=50)
    environment.reset(Problem("alfworld/0", "", GAME_ID, ""))
    turns = [" go to countertop 1\n", " dance\n", *(f" {a}\n" for a in WALKTHROUGH[1:])]
    text, replies = episode(environment, turns)
    assert [r.reward for r in replies] == [0.0, -0.1, 0.0, 0.0, 0.0, 1.0]
    assert [r.invalid_call for r in replies] == [False, True, False, False, False, False]
    assert [r.done for r in replies] == [False] * 5 + [True]
    assert replies[1].observation == "Nothing happens.\n>"
    assert replies[-1].observation == ANSWERS[-1]  # the last answer has no ">"
    # won − 0.1·invalid = 1 − 0.1·1 = 0.9, replayed from the text alone.
    outcome = replay_text(game_path(root, GAME_ID), text)
    assert (outcome.won, outcome.invalid, outcome.steps) == (True, 1, 6)
    monkeypatch.setenv("ALFWORLD_DATA", str(root))
    assert won_minus_invalid([""], [text], [GAME_ID]) == [pytest.approx(0.9, abs=1e-12)]
    # abs 1e-12: 1.0 − 0.1·1 in float64 is 0.9 to within one rounding (~1e-16).


@needs_alfworld
def test_the_episode_ends_after_max_steps_and_a_cut_turn_hears_its_newline(root):
    environment = AlfworldEnvironment(data_root=str(root), max_steps=2, show_admissible=True)
    environment.reset(Problem("alfworld/0", "", GAME_ID, ""))
    first = environment.step(" look")  # cut by its token budget: no newline
    # ALFWorld's "look" lists the receptacles at the agent's location (the opening, derived
    # with no location bound, lists them all): in the middle of the room, none.
    assert first.observation == (
        "\nYou are in the middle of a room. Looking quickly around you, you see nothing."
        "\nAdmissible commands: go to cabinet 1, "
        "go to countertop 1, go to fridge 1, inventory, look\n>"
    )
    last = environment.step(" go to fridge 1\n")
    assert (last.done, last.observation) == (True, ANSWERS[2])


@needs_alfworld
def test_game_rows_are_dataset_rows_the_environment_plays(root):
    rows = game_rows(root, "train", show_admissible=False)
    assert rows == [
        {"prompt": INTRO + "\n>", "answer": GAME_ID, "task_type": "pick_and_place_simple"}
    ]


def test_the_module_names_its_extra():
    assert "pip install 'rlvr[alfworld]'" in alfworld.MISSING


@needs_alfworld
def test_rlvr_train_plays_alfworld_games_from_dataset_rows(tmp_path, monkeypatch):
    """One `rlvr train` step on three handmade games as a dataset task's rows, with the
    environment and the reward named in the config (docs/22-alfworld.md), and a random
    local Qwen2 with a context that holds an ALFWorld opening."""
    import json as json_module
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "train"))
    from local_model import local_policy_dir

    from rlvr.train import run_training
    from rlvr.train.config import resolve_config

    for i in range(3):
        write_game(tmp_path / "data", f"train/pick_and_place_simple-Apple-None-Fridge-{i}/t{i}")
    rows = game_rows(tmp_path / "data", "train")
    with (tmp_path / "train.jsonl").open("w") as f:
        for i, row in enumerate(rows):  # the dataset holds out by prompt: make them distinct
            f.write(json_module.dumps({**row, "prompt": f"game {i}. {row['prompt']}"}) + "\n")
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "data"))
    cfg = resolve_config(
        {
            "task": "dataset",
            "task_options": {"data": str(tmp_path / "train.jsonl"), "dev_size": 1, "eval_size": 1},
            "environment": "rlvr.envs.alfworld:AlfworldEnvironment",
            "environment_options": {"max_steps": 4},
            "episode": {"max_turns": 5, "max_tool_calls": 4, "max_turn_tokens": 24},
            "reward_funcs": ["rlvr.envs.alfworld:won_minus_invalid"],
            "recipe": "dr_grpo",
            "aggregation": "seq_mean_token_sum",
            "model": local_policy_dir(tmp_path, max_position_embeddings=1024),
            "max_new_tokens": 300,
            "steps": 1,
            "prompts_per_step": 1,
            "group_size": 2,
            "eval_every": 1,
            "eval_size": 1,
            "progress": False,
            "out": str(tmp_path / "run"),
        }
    )
    assert run_training(cfg)["steps"] == 1
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    step = next(m for m in map(json_module.loads, lines) if "env/turn_reward" in m)
    # The reward replayed from each trajectory's text is what the live games paid turn by
    # turn (both are means over the same 2 episodes of sums of 1.0 and −0.1 terms: equal up
    # to float64 rounding of a few additions, ~1e-15).
    assert step["reward/fn/won_minus_invalid"] == pytest.approx(step["env/turn_reward"], abs=1e-9)
    assert step["env/turn_reward"] < 0  # a random policy's commands are invalid: −0.1 each
