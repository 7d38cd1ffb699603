"""A multi-turn environment with feedback: answer again after "wrong".

The policy's turn ends at the `}` that closes its `\\boxed{...}` answer. The environment
compares the answer with the task row's reference (exact text, as integer tasks such as
`arithmetic` write it): right, and the episode ends; wrong, and it hears ` wrong:` and
answers again, up to `max_tries`. The task's verifier scores the trajectory's last answer,
so a later right answer counts; `fewer_tries` as a reward function makes the first try
worth most. Config (any task whose reference is the boxed text):

    environment: rlvr.envs.feedback:RetryWithFeedback
    environment_options: {max_tries: 3}
    reward_funcs: [rlvr.envs.feedback:fewer_tries]
"""

from __future__ import annotations

from typing import Any

from rlvr.envs.base import Environment, Reply
from rlvr.verify import extract_boxed

FEEDBACK = " wrong:"


class RetryWithFeedback(Environment):
    """See the module docstring."""

    stop = ("}",)

    def __init__(self, max_tries: int = 3, feedback: str = FEEDBACK) -> None:
        if isinstance(max_tries, bool) or not isinstance(max_tries, int) or max_tries < 1:
            raise ValueError(
                f"environment_options.max_tries must be an integer ≥ 1, got {max_tries!r}"
            )
        self.max_tries, self.feedback = max_tries, feedback

    def reset(self, problem: Any) -> None:
        self.reference, self.tries = str(problem.answer).strip(), 0

    def step(self, turn: str) -> Reply:
        answer = extract_boxed(turn)
        if answer is None:  # not an answer (e.g. a `}` elsewhere): the episode ends
            return Reply(done=True)
        self.tries += 1
        right = answer.strip() == self.reference
        if right or self.tries >= self.max_tries:
            return Reply(done=True, tool_call=True)
        return Reply(self.feedback, tool_call=True)


def fewer_tries(
    prompts: list[str], completions: list[str], correct: list[bool], **_: Any
) -> list[float]:
    """1 for a right answer at the first try, less by 1/4 for each ` wrong:` heard before
    it (never below 0.25 when right); 0 when the last answer is wrong."""
    return [
        max(0.25, 1.0 - 0.25 * text.count(FEEDBACK)) if ok else 0.0
        for text, ok in zip(completions, correct, strict=True)
    ]
