"""Games drawn from a seed, and the expert walkthrough that solves each.

`make_game(seed, task_type)` builds one room (ALFWorld's kitchens, living rooms, bedrooms
and bathrooms, with instance counts drawn per receptacle kind), places the goal's objects
and distractors (never where the goal wants them, so no game starts won), and names the
goal. `walkthrough(game)` is an expert planner with full knowledge of the room, as
ALFWorld's handcoded expert: fetch the object (opening what is closed), transform it at
its appliance, carry it to the first receptacle of the goal's kind; for look-at-in-light,
carry it to the lamp and switch it on. It asserts each command is admissible and that the
game ends won.
"""

from __future__ import annotations

import random

from rlvr.envs.household.catalog import (
    APPLIANCE,
    NOT_PLACES,
    OPENABLE,
    ROOMS,
    ROOMS_FOR,
    TASK_TYPES,
    USABLE,
    kind_of,
)
from rlvr.envs.household.world import Game, Goal, World

CAPACITY = 4
"""Objects a receptacle holds at the start, at most (keeps every observation short)."""


def make_game(seed: int, task_type: str) -> Game:
    """The game of (`seed`, `task_type`): the same on every call and machine."""
    if task_type not in TASK_TYPES:
        raise ValueError(f"unknown task_type {task_type!r}; valid: {', '.join(TASK_TYPES)}")
    rng = random.Random(f"household/{task_type}/{seed}")
    room = rng.choice(ROOMS_FOR[task_type])
    spec = ROOMS[room]
    receptacles = tuple(
        f"{kind} {i}"
        for kind, (low, high) in spec["receptacles"].items()
        for i in range(1, rng.randint(low, high) + 1)
    )
    usable = USABLE[task_type]
    kinds = [k for k in spec["objects"] if usable is None or k in usable]
    obj = rng.choice(kinds)
    places = [r for r in receptacles if kind_of(r) not in NOT_PLACES]
    verb = next((v for v in APPLIANCE if f"_{v}_" in task_type), None)
    lamp = spec["lamp"]
    if task_type == "look_at_obj_in_light":
        goal = Goal(task_type, obj, None, lamp)
    else:
        targets = sorted({kind_of(r) for r in places} - {APPLIANCE.get(verb, "")})
        goal = Goal(task_type, obj, rng.choice(targets), None)
    return _furnish(rng, seed, room, receptacles, places, goal, lamp)


def _furnish(rng, seed, room, receptacles, places, goal, lamp) -> Game:
    """Place the goal's objects, distractors and the room's lamp."""
    contents: dict[str, list[str]] = {r: [] for r in receptacles}
    count: dict[str, int] = {}

    def place(kind: str, allowed: list[str]) -> None:
        count[kind] = count.get(kind, 0) + 1
        free = [r for r in allowed if len(contents[r]) < CAPACITY]
        contents[rng.choice(free)].append(f"{kind} {count[kind]}")

    away = [r for r in places if kind_of(r) != goal.place]
    for _ in range(
        rng.randint(2, 3) if goal.task_type == "pick_two_obj_and_place" else rng.randint(1, 2)
    ):
        place(goal.obj, away)
    for _ in range(rng.randint(4, 9)):
        kind = rng.choice(ROOMS[room]["objects"])
        place(kind, away if kind == goal.obj else places)
    lamps: frozenset[str] = frozenset()
    if lamp is not None:
        surfaces = [r for r in places if kind_of(r) not in OPENABLE and kind_of(r) != "garbagecan"]
        contents[rng.choice(surfaces)].append(f"{lamp} 1")
        lamps = frozenset({f"{lamp} 1"})
    held = tuple(tuple(contents[r]) for r in receptacles)
    return Game(seed, goal.task_type, room, receptacles, held, lamps, goal)


def intro(game: Game) -> str:
    """ALFWorld's opening text: the room at a glance, then the task."""
    seen = World(game).step("look")[0]
    return (
        f"-= Welcome to TextWorld, ALFRED! =-\n\n{seen}\n\nYour task is to: {game.goal.sentence()}"
    )


def walkthrough(game: Game) -> list[str]:
    """The expert's commands, each admissible when it is given; the last wins the game."""
    world, plan = World(game), []

    def do(command: str) -> None:
        assert command in world.admissible(), f"{game.game_id}: {command!r} not admissible"
        world.step(command)
        plan.append(command)

    def go(place: str) -> None:
        if world.state.location != place:
            do(f"go to {place}")
        if kind_of(place) in OPENABLE and place not in world.state.opened:
            do(f"open {place}")

    goal = game.goal
    wanted = [o for held in game.contents for o in held if kind_of(o) == goal.obj]
    need = 2 if goal.task_type == "pick_two_obj_and_place" else 1
    for thing in wanted[:need]:
        source = world.where(thing)
        go(source)
        do(f"take {thing} from {source}")
        verb = next((v for v in APPLIANCE if f"_{v}_" in goal.task_type), None)
        if verb is not None:
            appliance = next(r for r in game.receptacles if kind_of(r) == APPLIANCE[verb])
            if world.state.location != appliance:
                do(f"go to {appliance}")
            do(f"{verb} {thing} with {appliance}")
        if goal.lamp is not None:
            lamp = next(iter(game.lamps))
            stand = world.where(lamp)
            if world.state.location != stand:
                do(f"go to {stand}")
            do(f"use {lamp}")
        else:
            go(next(r for r in game.receptacles if kind_of(r) == goal.place))
            do(f"put {thing} in/on {world.state.location}")
    assert world.won(), f"{game.game_id}: the walkthrough does not win"
    return plan


def game_from_id(game_id: str) -> Game:
    """The game named by `Game.game_id` (``pick_and_place_simple/4821``)."""
    task_type, _, seed = game_id.partition("/")
    if not seed.isdigit():
        raise ValueError(f"a game id looks like 'pick_and_place_simple/4821', got {game_id!r}")
    return make_game(int(seed), task_type)
