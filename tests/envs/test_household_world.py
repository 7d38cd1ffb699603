"""The household world (rlvr.envs.household): hand-worked transitions on a handmade room,
every generated game won by its walkthrough, replay of any prefix, determinism by seed."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from rlvr.envs.household import TASK_TYPES, Game, Goal, World, make_game, replay, walkthrough
from rlvr.envs.household.environment import observation_text
from rlvr.envs.household.games import game_from_id, intro

HEAT = "pick_heat_then_place_in_recep"
SEEDS = range(25)  # 25 seeds × 6 task types = 150 games, about 0.2 s


def kitchen() -> Game:
    """A handmade room: an apple and a knife on the counter, an egg in the closed fridge."""
    return Game(
        seed=0,
        task_type=HEAT,
        room="kitchen",
        receptacles=("countertop 1", "fridge 1", "microwave 1", "diningtable 1"),
        contents=(("apple 1", "knife 1"), ("egg 1",), (), ()),
        lamps=frozenset(),
        goal=Goal(HEAT, "apple", "diningtable"),
    )


def unchanged(before, after) -> bool:
    """The state is the same but for the step and invalid counters."""
    return replace(after, steps=before.steps, invalid=before.invalid) == before


def test_the_first_admissible_commands_and_the_room_at_a_glance():
    world = World(kitchen())
    assert world.admissible() == [
        "go to countertop 1",
        "go to diningtable 1",
        "go to fridge 1",
        "go to microwave 1",
        "inventory",
        "look",
    ]
    assert world.step("look") == (
        "You are in the middle of a room. Looking quickly around you, you see a countertop 1, "
        "a fridge 1, a microwave 1, and a diningtable 1.",
        True,
    )
    assert intro(kitchen()).endswith("\n\nYour task is to: put a hot apple on diningtable.")


def test_taking_an_object_moves_it_to_the_inventory():
    world = World(kitchen())
    assert world.step("go to countertop 1") == (
        "You arrive at countertop 1. On the countertop 1, you see a apple 1, and a knife 1.",
        True,
    )
    assert world.step("take apple 1 from countertop 1") == (
        "You pick up the apple 1 from the countertop 1.",
        True,
    )
    assert world.state.holding == "apple 1"
    assert world.held_in("countertop 1") == ("knife 1",)
    assert world.step("inventory")[0] == "You are carrying: a apple 1."
    # One hand: the knife cannot be taken while the apple is held.
    assert "take knife 1 from countertop 1" not in world.admissible()


def test_putting_into_a_closed_receptacle_fails_until_it_is_opened():
    world = World(kitchen())
    world.step("go to countertop 1")
    world.step("take apple 1 from countertop 1")
    assert world.step("go to fridge 1")[0] == "You arrive at fridge 1. The fridge 1 is closed."
    before = world.state
    assert world.step("put apple 1 in/on fridge 1") == ("Nothing happens.", False)
    assert unchanged(before, world.state) and world.state.invalid == 1
    assert world.step("open fridge 1")[0] == (
        "You open the fridge 1. The fridge 1 is open. In it, you see a egg 1."
    )
    assert world.step("put apple 1 in/on fridge 1") == (
        "You put the apple 1 in/on the fridge 1.",
        True,
    )
    assert world.held_in("fridge 1") == ("egg 1", "apple 1") and world.state.holding is None


def test_heating_needs_the_microwave_and_the_goal_needs_the_heat():
    world = World(kitchen())
    world.step("go to countertop 1")
    world.step("take apple 1 from countertop 1")
    before = world.state
    assert world.step("heat apple 1 with microwave 1") == ("Nothing happens.", False)  # not there
    assert unchanged(before, world.state)
    world.step("go to diningtable 1")
    world.step("put apple 1 in/on diningtable 1")
    assert not world.won()  # on the table, but cold
    world.step("take apple 1 from diningtable 1")
    world.step("go to microwave 1")
    assert world.step("heat apple 1 with microwave 1")[0] == (
        "You heat the apple 1 using the microwave 1."
    )
    assert world.step("examine apple 1")[0] == "This is a hot apple 1."
    world.step("go to diningtable 1")
    world.step("put apple 1 in/on diningtable 1")
    # 11 commands: go, take, heat (invalid), go, put, take, go, heat, examine, go, put.
    assert world.won() and world.state.invalid == 1 and world.state.steps == 11


def test_an_invalid_command_counts_and_changes_nothing():
    world = World(kitchen())
    world.step("go to fridge 1")
    before = world.state
    for command in ("fly to the moon", "take egg 1 from fridge 1", "go to fridge 1", ""):
        assert world.step(command) == ("Nothing happens.", False)
    assert unchanged(before, world.state)
    assert (world.state.invalid, world.state.steps) == (4, 5)


def test_the_walkthrough_of_the_handmade_room():
    assert walkthrough(kitchen()) == [
        "go to countertop 1",
        "take apple 1 from countertop 1",
        "go to microwave 1",
        "heat apple 1 with microwave 1",
        "go to diningtable 1",
        "put apple 1 in/on diningtable 1",
    ]


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_every_generated_game_is_won_by_its_walkthrough(task_type):
    for seed in SEEDS:
        game = make_game(seed, task_type)
        world = World(game)
        assert not world.won(), game.game_id  # no game starts won
        plan = walkthrough(game)  # asserts each command admissible and the end won
        assert len(plan) <= 50, game.game_id  # within 08-alfworld's max_steps
        for action in plan:
            # Every observation reachable in one command fits the task's observation
            # budget (512 tokens, 1024 with the admissible commands shown; one character
            # is one token of the embedded tokenizer, fewer for a subword one).
            for command in world.admissible():
                after = World(game, world.state)
                observation = after.step(command)[0]
                assert len(observation) < 512, command
                assert len(observation_text(observation, False, after.admissible())) < 1024
            world.step(action)
        assert world.won() and world.state.invalid == 0


def test_replaying_a_prefix_reproduces_the_snapshot():
    game = make_game(7, "pick_two_obj_and_place")
    rng, world = random.Random(0), World(game)
    actions, snapshots = [], [world.snapshot()]
    for _ in range(40):  # admissible commands, with an invalid one now and then
        action = rng.choice([*world.admissible(), "dance"])
        world.step(action)
        actions.append(action)
        snapshots.append(world.snapshot())
    for k in range(len(actions) + 1):
        assert replay(game, actions[:k]).snapshot() == snapshots[k]


def test_games_are_determined_by_seed_and_task_type():
    assert make_game(3, HEAT) == make_game(3, HEAT) == game_from_id(f"{HEAT}/3")
    assert len({make_game(s, HEAT) for s in SEEDS}) == len(SEEDS)
    # Pinned: the same game on every machine and Python run (a string-seeded Random).
    game = make_game(3, HEAT)
    assert game.goal.sentence() == "put a hot mug in garbagecan."
    assert walkthrough(game) == [
        "go to microwave 1",
        "open microwave 1",
        "take mug 1 from microwave 1",
        "heat mug 1 with microwave 1",
        "go to garbagecan 1",
        "put mug 1 in/on garbagecan 1",
    ]


def test_unknown_task_types_and_game_ids_are_refused():
    with pytest.raises(ValueError, match="unknown task_type 'pick'; valid: pick_and_place_simple"):
        make_game(1, "pick")
    with pytest.raises(ValueError, match="looks like 'pick_and_place_simple/4821'"):
        game_from_id("pick_and_place_simple")
