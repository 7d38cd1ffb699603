"""The household world's state and rules: ALFWorld's command language on a seeded room.

A `Game` is what generation draws (receptacles, where each object starts, the goal); a
`State` is one moment of play, immutable, so a snapshot is the state itself and replaying
a prefix of actions from the game's start reproduces it (`replay`). `World.step` runs one
command: a command that is not admissible now changes nothing and answers "Nothing
happens.", as ALFWorld does; `won` checks the goal after every step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rlvr.envs.household.catalog import APPLIANCE, INSIDE, OPENABLE, kind_of

NOTHING_HAPPENS = "Nothing happens."


@dataclass(frozen=True)
class Goal:
    task_type: str
    obj: str
    """The object kind asked for (`apple`)."""
    place: str | None
    """The receptacle kind it must end in (`fridge`); None for look-at-in-light."""
    lamp: str | None = None
    """The lamp kind of look-at-in-light (`desklamp`)."""

    def sentence(self) -> str:
        """ALFWorld's goal sentence, e.g. ``put a hot apple in fridge.``"""
        if self.lamp is not None:
            return f"look at {self.obj} under the {self.lamp}."
        where = f"{'in' if self.place in INSIDE else 'on'} {self.place}"
        state = {"clean": "clean ", "heat": "hot ", "cool": "cool "}
        verb = next((v for v in state if f"_{v}_" in self.task_type), None)
        if self.task_type == "pick_two_obj_and_place":
            return f"put two {self.obj} {where}."
        return f"put a {state[verb] if verb else ''}{self.obj} {where}."


@dataclass(frozen=True)
class Game:
    seed: int
    task_type: str
    room: str
    receptacles: tuple[str, ...]
    contents: tuple[tuple[str, ...], ...]
    """What each receptacle holds at the start, aligned with `receptacles`."""
    lamps: frozenset[str]
    """Objects that stay where they are and are switched with `use`."""
    goal: Goal

    @property
    def game_id(self) -> str:
        """``<task type>/<seed>``: what `rlvr.envs.household.games.make_game` rebuilds."""
        return f"{self.task_type}/{self.seed}"


@dataclass(frozen=True)
class State:
    location: str | None
    holding: str | None
    contents: tuple[tuple[str, ...], ...]
    opened: frozenset[str] = frozenset()
    hot: frozenset[str] = frozenset()
    cool: frozenset[str] = frozenset()
    clean: frozenset[str] = frozenset()
    lit: frozenset[str] = frozenset()
    steps: int = 0
    invalid: int = 0


def listing(names: tuple[str, ...] | list[str]) -> str:
    """ALFWorld's list: ``a apple 1, a bread 1, and a knife 1`` (``nothing`` when empty)."""
    items = [f"a {n}" for n in names]
    if not items:
        return "nothing"
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + ", and " + items[-1]


class World:
    """One game in play: `step(action)` → (observation, valid)."""

    def __init__(self, game: Game, state: State | None = None) -> None:
        self.game = game
        self.state = state or State(None, None, game.contents)

    def snapshot(self) -> State:
        return self.state

    def won(self) -> bool:
        goal, s = self.game.goal, self.state
        if goal.lamp is not None:
            here = self.held_in(s.location) if s.location else ()
            lit = any(kind_of(o) == goal.lamp and o in s.lit for o in here)
            return lit and s.holding is not None and kind_of(s.holding) == goal.obj
        need = 2 if goal.task_type == "pick_two_obj_and_place" else 1
        done = {"clean": s.clean, "heat": s.hot, "cool": s.cool}
        verb = next((v for v in done if f"_{v}_" in goal.task_type), None)
        for place, held in zip(self.game.receptacles, s.contents, strict=True):
            if kind_of(place) != goal.place:
                continue
            fits = [o for o in held if kind_of(o) == goal.obj and (not verb or o in done[verb])]
            if len(fits) >= need:
                return True
        return False

    def held_in(self, place: str) -> tuple[str, ...]:
        return self.state.contents[self.game.receptacles.index(place)]

    def where(self, thing: str) -> str:
        """The receptacle that holds `thing` now."""
        return next(
            r
            for r, held in zip(self.game.receptacles, self.state.contents, strict=True)
            if thing in held
        )

    def is_open(self, place: str) -> bool:
        return kind_of(place) not in OPENABLE or place in self.state.opened

    def describe(self, place: str) -> str:
        """What is seen at a receptacle: closed, open and its contents, or what is on it."""
        if kind_of(place) not in OPENABLE:
            return f"On the {place}, you see {listing(self.held_in(place))}."
        if place not in self.state.opened:
            return f"The {place} is closed."
        return f"The {place} is open. In it, you see {listing(self.held_in(place))}."

    def admissible(self) -> list[str]:
        """Every command that does something now, sorted (ALFWorld's admissible commands)."""
        s, commands = self.state, ["look", "inventory"]
        commands += [f"go to {r}" for r in self.game.receptacles if r != s.location]
        if s.holding is not None:
            commands.append(f"examine {s.holding}")
        here = s.location
        if here is not None:
            commands.append(f"examine {here}")
            if kind_of(here) in OPENABLE:
                commands.append(f"{'close' if here in s.opened else 'open'} {here}")
            if self.is_open(here):
                things = self.held_in(here)
                if s.holding is None:
                    commands += [
                        f"take {o} from {here}" for o in things if o not in self.game.lamps
                    ]
                else:
                    commands.append(f"put {s.holding} in/on {here}")
                commands += [f"use {o}" for o in things if o in self.game.lamps]
            for verb, appliance in APPLIANCE.items():
                usable = kind_of(here) == appliance or (verb, kind_of(here)) == (
                    "clean",
                    "bathtubbasin",
                )
                if s.holding is not None and usable:
                    commands.append(f"{verb} {s.holding} with {here}")
        return sorted(commands)

    def step(self, action: str) -> tuple[str, bool]:
        """Run one command (already canonical: lower case, single spaces)."""
        if action not in self.admissible():
            self.state = replace(
                self.state, steps=self.state.steps + 1, invalid=self.state.invalid + 1
            )
            return NOTHING_HAPPENS, False
        text = self._apply(action)
        self.state = replace(self.state, steps=self.state.steps + 1)
        return text, True

    def _apply(self, action: str) -> str:
        s = self.state
        verb, _, rest = action.partition(" ")
        if action == "look":
            if s.location is None:
                seen = listing(self.game.receptacles)
                return (
                    f"You are in the middle of a room. Looking quickly around you, you see {seen}."
                )
            return f"You are facing the {s.location}. Next to it, you see nothing."
        if action == "inventory":
            return (
                f"You are carrying: a {s.holding}."
                if s.holding
                else "You are not carrying anything."
            )
        if action.startswith("go to "):
            self.state = replace(s, location=action[6:])
            return f"You arrive at {action[6:]}. {self.describe(action[6:])}"
        if verb == "examine":
            return self._examine(rest)
        if verb in ("open", "close"):
            opened = s.opened | {rest} if verb == "open" else s.opened - {rest}
            self.state = replace(s, opened=opened)
            return (
                f"You open the {rest}. {self.describe(rest)}"
                if verb == "open"
                else f"You close the {rest}."
            )
        if verb == "take":
            thing, place = rest.split(" from ")
            self._move(thing, place, take=True)
            return f"You pick up the {thing} from the {place}."
        if verb == "put":
            thing, place = rest.split(" in/on ")
            self._move(thing, place, take=False)
            return f"You put the {thing} in/on the {place}."
        if verb == "use":
            on = rest not in s.lit
            self.state = replace(s, lit=s.lit | {rest} if on else s.lit - {rest})
            return f"You turn {'on' if on else 'off'} the {rest}."
        thing, place = rest.split(" with ")
        self._transform(verb, thing)
        return f"You {verb} the {thing} using the {place}."

    def _examine(self, name: str) -> str:
        if name in self.game.receptacles:
            return self.describe(name)
        states = [
            w
            for w, have in (
                ("hot", self.state.hot),
                ("cool", self.state.cool),
                ("clean", self.state.clean),
            )
            if name in have
        ]
        return (
            f"This is a {' and '.join(states)} {name}."
            if states
            else f"There's nothing special about {name}."
        )

    def _move(self, thing: str, place: str, take: bool) -> None:
        s, i = self.state, self.game.receptacles.index(place)
        held = tuple(o for o in s.contents[i] if o != thing) if take else (*s.contents[i], thing)
        contents = (*s.contents[:i], held, *s.contents[i + 1 :])
        self.state = replace(s, contents=contents, holding=thing if take else None)

    def _transform(self, verb: str, thing: str) -> None:
        s = self.state
        if verb == "heat":
            self.state = replace(s, hot=s.hot | {thing}, cool=s.cool - {thing})
        elif verb == "cool":
            self.state = replace(s, cool=s.cool | {thing}, hot=s.hot - {thing})
        else:
            self.state = replace(s, clean=s.clean | {thing})


def replay(game: Game, actions: list[str]) -> World:
    """The world after `actions` from the game's start: the snapshot of any prefix."""
    world = World(game)
    for action in actions:
        world.step(action)
    return world
