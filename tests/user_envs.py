"""A user's environment, referenced from configs as `user_envs:GuessNumber`: the policy
guesses the answer in `<guess>N</guess>` and hears "higher", "lower" or "right"
(docs/extending.md shows this file)."""

import re

from rlvr.envs import Environment, Reply


class GuessNumber(Environment):
    stop = ("</guess>",)  # a guess ends the policy's turn

    def __init__(self, max_guesses: int = 3) -> None:
        self.max_guesses = max_guesses

    def reset(self, problem) -> None:
        self.secret, self.guesses = int(problem.answer), 0

    def step(self, turn: str) -> Reply:
        found = re.search(r"<guess>(-?\d+)</guess>$", turn)
        if found is None:  # no guess: the turn was the final answer
            return Reply(done=True)
        self.guesses += 1
        guess = int(found.group(1))
        if guess == self.secret:
            return Reply(" right", done=True, tool_call=True)
        hint = " higher" if guess < self.secret else " lower"
        return Reply(hint, done=self.guesses >= self.max_guesses, tool_call=True)


class Echo(Environment):
    """Answers every turn with its first two characters in brackets (for tests that need
    many observations from a random model: its turns end at their token budget)."""

    def step(self, turn: str) -> Reply:
        return Reply(f"[{turn[:2]}]")


class NotAnEnvironment:
    def __init__(self, **options) -> None:
        pass


def not_an_environment(**options):
    """A factory that makes something else (refused when it is called)."""
    return NotAnEnvironment(**options)
