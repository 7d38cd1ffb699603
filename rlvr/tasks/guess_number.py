"""Guess a number from "higher" / "lower" replies: a multi-turn task where fewer turns is
better.

``Q: game 4821, 1-15? A:`` hides a secret in 1..15; the policy guesses
``<guess>8</guess>`` (the closing tag ends its turn) and hears `` higher``, `` lower`` or
`` right``; the episode ends at `` right`` or after ``max_guesses`` guesses. Binary search
finds any of 15 numbers within 4 guesses (3.27 on average); a guesser that picks at random
among the numbers the replies leave needs about 4.1 on average and often more than 4.

The game number names the game: its secret is drawn with it, so prompts differ and nothing
in a prompt tells the secret (a game's number is never in two splits). The warm start
teaches the protocol, not the strategy: its targets are games played by a random guesser
that stays consistent with the replies, kept when it wins within ``max_guesses``; RL then
has the number of guesses to improve (`fewer_guesses` as a reward function rewards it).

Scoring: correct when the trajectory's last guess is the secret (the environment said
`` right``); formatted when it holds a guess.
"""

from __future__ import annotations

import random
import re
from typing import Any

from rlvr.checks import check_int
from rlvr.envs.base import Environment, Reply
from rlvr.envs.budgets import EpisodeBudgets
from rlvr.tasks.base import Draft, Problem, SyntheticTask, alphabet_of
from rlvr.verify import Verdict

HIGHER, LOWER, RIGHT = " higher", " lower", " right"
_GUESS = re.compile(r"<guess>(-?\d{1,6})</guess>")
_ENDS_WITH_GUESS = re.compile(r"<guess>(-?\d{1,6})</guess>$")
_REPLY_IN_TARGET = re.compile(f"</guess>({HIGHER}|{LOWER}|{RIGHT})")


class GuessEnvironment(Environment):
    """One game: `<guess>N</guess>` ends a turn and is answered higher / lower / right."""

    stop = ("</guess>",)

    def __init__(self, secret: int, max_guesses: int) -> None:
        self.secret, self.max_guesses, self.guesses = secret, max_guesses, 0

    def step(self, turn: str) -> Reply:
        found = _ENDS_WITH_GUESS.search(turn)
        if found is None:
            return Reply(done=True)  # no guess: the turn was a final answer
        self.guesses += 1
        guess = int(found.group(1))
        if guess == self.secret:
            return Reply(RIGHT, done=True, tool_call=True)
        hint = HIGHER if guess < self.secret else LOWER
        return Reply(hint, done=self.guesses >= self.max_guesses, tool_call=True)


def fewer_guesses(
    prompts: list[str], completions: list[str], correct: list[bool], **_: Any
) -> list[float]:
    """A reward function: 1 for a win at the first guess, less by 1/4 for each guess
    before the right one (never below 0.25 when won); 0 for a lost game."""
    return [
        max(0.25, 1.0 - 0.25 * (len(_GUESS.findall(text)) - 1)) if ok else 0.0
        for text, ok in zip(completions, correct, strict=True)
    ]


class GuessNumberTask(SyntheticTask):
    """Find a secret in 1..`high` from higher / lower replies within `max_guesses`."""

    name = "guess_number"

    def __init__(
        self,
        high: int = 15,
        max_guesses: int = 4,
        seed: int = 0,
        train_size: int = 3000,
        dev_size: int = 200,
        eval_size: int = 300,
        max_observation_tokens: int = 8,
        max_turn_tokens: int | None = None,
        env_errors: str = "drop",
    ) -> None:
        """
        Args:
            high: the secret is in 1..high, 2 to 99.
            max_guesses: guesses before the game is lost, 1 to 8 (each is a turn).
            seed, train_size, dev_size, eval_size: as for arithmetic; the game number
                (1000–9999) is the problem's identity, never in two splits.
            max_observation_tokens, max_turn_tokens, env_errors: as for calculator.
        """
        super().__init__(seed, train_size, dev_size, eval_size)
        self.high = check_int("high", high, 2, 99)
        self.max_guesses = check_int("max_guesses", max_guesses, 1, 8)
        self.episode_budgets = EpisodeBudgets(
            max_turns=max_guesses + 1,  # the environment hears the last guess (and ends)
            max_tool_calls=max_guesses,
            max_observation_tokens=max_observation_tokens,
            max_turn_tokens=max_turn_tokens,
            env_errors=env_errors,
        )

    def environment(self, problem: Problem) -> Any:
        return GuessEnvironment(int(problem.answer), self.max_guesses)

    def sample(self, rng: random.Random) -> Draft:
        game, secret = rng.randint(1000, 9999), rng.randint(1, self.high)
        prompt = f"Q: game {game}, 1-{self.high}? A:"
        return Draft(game, prompt, str(secret), self._winning_game(secret, rng))

    def _winning_game(self, secret: int, rng: random.Random) -> str:
        """A game played by a random guesser consistent with the replies, drawn again
        until it wins within `max_guesses`, as text (guesses and replies)."""
        while True:
            low, high, text = 1, self.high, ""
            for _ in range(self.max_guesses):
                guess = rng.randint(low, high)
                text += f" <guess>{guess}</guess>"
                if guess == secret:
                    return text + RIGHT
                text += HIGHER if guess < secret else LOWER
                low, high = (guess + 1, high) if guess < secret else (low, guess - 1)

    def observation_spans(self, target: str) -> list[tuple[int, int]]:
        """Character spans of the replies (`` higher``) in a target: the warm start leaves
        them out of its loss, as RL does (they are forced, not sampled)."""
        return [m.span(1) for m in _REPLY_IN_TARGET.finditer(target)]

    def check(self, problem: Problem, completion: str) -> Verdict:
        guesses = _GUESS.findall(completion)
        if not guesses:
            return Verdict(False, False, None, reason="no <guess>N</guess> found")
        correct = int(guesses[-1]) == int(problem.answer)
        reason = "correct" if correct else f"expected {problem.answer}, last guess {guesses[-1]}"
        return Verdict(correct, True, guesses[-1], reason=reason)

    @property
    def longest_target_chars(self) -> int:
        guess = len(f" <guess>{self.high}</guess>")
        replies = (self.max_guesses - 1) * len(HIGHER) + len(RIGHT)
        return self.max_guesses * guess + replies

    @property
    def alphabet(self) -> str:
        return alphabet_of("Q: game ,-? A:", "0123456789", "<guess></guess>", HIGHER, LOWER, RIGHT)
