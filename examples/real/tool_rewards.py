"""The tool example's reward: the answer the model states in its own last turn.

Once the calculator answers, the product is in the episode's text (`<calc>51*29</calc>
<result>1479</result>`), and the task's verifier (`last_number`) reads the last number of the
whole episode, the tool's result included: a model that calls the tool and stops there is
scored right. Trained on that, SmolLM2 learned exactly this (on dev, after 8 steps, none of
94 right episodes said the answer after the result; before, 30 of 42 had). This reward asks
for the answer in the model's own words, read with the same `last_number` rule from the text
after the last tool result (the whole completion when there is none), so the model must
read the result and copy it.

    reward_funcs: [examples.real.tool_rewards:stated_answer]   # run from the repository root
"""

from __future__ import annotations

from rlvr.verify.math_answers import check_last_number

RESULT_END = "</result>"
"""Where a tool result ends (`ToolEnvironment`'s observation format, `<result>{result}</result>`)."""


def own_words(completion: str) -> str:
    """The text after the episode's last tool result: the model's final turn."""
    return completion.rpartition(RESULT_END)[2]


def stated_answer(
    prompts: list[str], completions: list[str], reference: list[str], **_
) -> list[float]:
    """1 when the last number of the model's final turn is the reference, else 0."""
    return [
        float(check_last_number(own_words(c), r).correct)
        for c, r in zip(completions, reference, strict=True)
    ]
