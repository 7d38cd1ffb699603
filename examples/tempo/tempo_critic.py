"""TEMPO's generative critic on the household world: the same policy, prompted with what
the agent never sees (the expert walkthrough), writes ``<value>0.4</value>``.

The embedded policy reads characters and has 768 positions: the critic's prompt is the
walkthrough, then the agent's play so far (its prompt and the last characters of its
turns and observations that fit), then ``\\nvalue: ``. It has never written a value, so
`format_datums` first teaches the tag with uniformly random digits (cross-entropy on the
answer only): the critic learns the form of an answer and nothing about what a state is
worth (docs/21-tempo.md: how this departs from the lab, whose 4B model follows a prompt).
"""

from __future__ import annotations

from rlvr.envs.household import Game, walkthrough
from rlvr.service import Datum, ModelInput, SamplingParams

ASK = "\nvalue: "
"""Where the critic writes its value in tenths, one digit: a slot where the warm-started
policy already writes digits (after a name and a space, as in ``drawer 2``)."""
CLOSE = "</value>"
ANSWER_TOKENS = 1


def critic_text(game: Game, play: str, positions: int) -> str:
    """The critic's prompt: the walkthrough (privileged), the goal line of the agent's
    prompt, and as much of the end of its play as fits in `positions` with the answer."""
    head = "expert: " + ", ".join(walkthrough(game)) + ".\n"
    goal, _, rest = play.partition("\n")
    room = positions - ANSWER_TOKENS - len(head) - len(goal) - len(ASK) - 2
    rest = rest[-room:] if room > 0 else ""
    return f"{head}{goal}\n{rest}{ASK}"


def critic_params() -> SamplingParams:
    """Temperature 1, as the trainer's π (ratio 1); one character, the tenth."""
    return SamplingParams(max_tokens=ANSWER_TOKENS, temperature=1.0)


def answer_text(written: str) -> str:
    """What the critic answered: the tag the prompt opened, its character, the closing tag
    (`parse_value` reads ``<value>0.7</value>``; a letter or EOS there is malformed)."""
    return "<value>0." + written + CLOSE


def critic_datum(prompt: list[int], tokens: list[int], logprobs: list[float], adv: float) -> Datum:
    """An estimate as a policy row: Â on its answer's tokens, 0 on the prompt."""
    full, pad = prompt + tokens, [0.0] * (len(prompt) - 1)
    inputs = {
        "target_tokens": full[1:],
        "logprobs": pad + logprobs,
        "advantages": pad + [adv] * len(tokens),
    }
    return Datum(model_input=ModelInput.from_ints(full[:-1]), loss_fn_inputs=inputs)
