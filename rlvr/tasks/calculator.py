"""Products the embedded model cannot compute, and a calculator it can call.

``Q: 37*85=? A:`` is answered through the tool: the policy writes ``<calc>37*85</calc>``,
the environment inserts ``=3145``, and the policy copies it into `` \\boxed{3145}``. The
tiny model cannot multiply two 2-digit numbers in its head, so its success depends on
calling the tool with the right expression and reading the result back: a tool task in
the sense of ReTool and Search-R1, small enough to learn on a CPU in minutes.

``tools=False`` is the matched control: the same problems, answered in one turn without
the tool (its warm start learns `` \\boxed{3145}`` directly).

Scoring is arithmetic's: the last ``\\boxed{}`` of the whole trajectory (the policy's turns
and the observations) must hold the product.
"""

from __future__ import annotations

import random
from typing import Any

from rlvr.checks import check_int
from rlvr.envs.budgets import EpisodeBudgets
from rlvr.envs.tools import ToolEnvironment
from rlvr.tasks.arithmetic import check_integer_answer, content_key
from rlvr.tasks.base import Draft, Problem, SyntheticTask, alphabet_of
from rlvr.verify import Verdict
from rlvr.verify.safe_math import evaluate

OBSERVATION = "={result}"


def calc(expression: str) -> str:
    """Evaluate integer arithmetic (+, -, *, / and parentheses) exactly.

    Args:
        expression: e.g. ``37*85``.
    """
    value = evaluate(expression.strip()).value
    return str(value.numerator) if value.denominator == 1 else str(value)


class CalculatorTask(SyntheticTask):
    """``a*b`` with ``digits``-digit operands, answered with (or without) a calculator."""

    name = "calculator"

    def __init__(
        self,
        digits: int = 2,
        tools: bool = True,
        seed: int = 0,
        train_size: int = 3000,
        dev_size: int = 200,
        eval_size: int = 300,
        max_turns: int = 3,
        max_tool_calls: int = 2,
        max_observation_tokens: int = 16,
        max_turn_tokens: int | None = None,
        env_errors: str = "drop",
    ) -> None:
        """
        Args:
            digits: digits of each operand, 1 to 6.
            tools: whether the policy may call ``calc`` (False: the one-turn control).
            seed, train_size, dev_size, eval_size: as for arithmetic; problems are
                distinct up to the order of the factors.
            max_turns, max_tool_calls, max_observation_tokens, max_turn_tokens, env_errors:
                the episode's limits (`rlvr.envs.EpisodeBudgets`), used when ``tools`` is
                true.
        """
        super().__init__(seed, train_size, dev_size, eval_size)
        check_int("digits", digits, 1, 6)
        if not isinstance(tools, bool):
            raise ValueError(f"tools must be true or false, got {tools!r}")
        self.digits, self.tools = digits, tools
        budgets = EpisodeBudgets(
            max_turns=max_turns,
            max_tool_calls=max_tool_calls,
            max_observation_tokens=max_observation_tokens,
            max_turn_tokens=max_turn_tokens,
            env_errors=env_errors,
        )
        self.episode_budgets = budgets if tools else None

    def environment(self, problem: Problem) -> Any:
        if not self.tools:
            return super().environment(problem)
        return ToolEnvironment({"calc": calc}, observation_format=OBSERVATION)

    def sample(self, rng: random.Random) -> Draft:
        low, high = 10 ** (self.digits - 1), 10**self.digits - 1
        a, b = rng.randint(low, high), rng.randint(low, high)
        answer = str(a * b)
        target = f" \\boxed{{{answer}}}"
        if self.tools:
            target = f" <calc>{a}*{b}</calc>{OBSERVATION.format(result=answer)}" + target
        return Draft(content_key(a, "*", b), f"Q: {a}*{b}=? A:", answer, target)

    def check(self, problem: Problem, completion: str) -> Verdict:
        return check_integer_answer(problem.answer, completion, "boxed")

    @property
    def longest_target_chars(self) -> int:
        nines = "9" * self.digits
        answer = "9" * (2 * self.digits)
        tool = f" <calc>{nines}*{nines}</calc>{OBSERVATION.format(result=answer)}"
        return len(tool if self.tools else "") + len(f" \\boxed{{{answer}}}")

    @property
    def alphabet(self) -> str:
        return alphabet_of("Q: =? A:*", "0123456789", "\\boxed{}", "<calc></calc>=")
