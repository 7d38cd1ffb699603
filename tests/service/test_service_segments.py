"""Segments from saved states through the sampling client (rlvr/service/segments): a
segment resumes the saved ids and an environment rebuilt after the saved actions, pauses
after its turns with the game going on, or ends with it; its end is the next start."""

from __future__ import annotations

import pytest

from rlvr.envs.base import Environment, Reply
from rlvr.envs.budgets import EpisodeBudgets
from rlvr.service import SamplingParams, tokens_of
from rlvr.service.segments import SavedState, sample_segments

PROMPT = "Q: 37+85=? A:"
# Turns cut at 2 tokens, so that the turns are heard: the embedded model's answers run
# longer (at 3, one that closes its brace at its second token ends with EOS on some CPUs;
# `_without_answers` picks draws in which no turn ends so).
BUDGETS = EpisodeBudgets(max_turn_tokens=2)
PARAMS = SamplingParams(max_tokens=40, seed=5)


def _without_answers(run):
    """`run(params)`'s segments for the first seed whose draws end no episode at the model's
    own EOS: which tokens the embedded model draws depends on how the CPU's products
    round (an EOS within a turn ends its episode, `ended_by="answer"`), and these tests
    are about the turns the environment hears, not about the model."""
    for seed in range(64):
        segments = run(SamplingParams(max_tokens=40, seed=seed))
        if all(s.episode.record.ended_by != "answer" for s in segments):
            return segments
    pytest.fail("in 64 seeds the embedded model always answered within a 2-token turn")


class Counter(Environment):
    """A game of `length` turns; it starts after `actions` (one turn each) and answers '7'."""

    def __init__(self, actions: tuple[str, ...], length: int) -> None:
        self.played = len(actions)
        self.length = length

    def step(self, turn: str) -> Reply:
        self.played += 1
        done = self.played >= self.length
        return Reply(observation="7", done=done, reward=float(done), call=f"t{self.played}")


@pytest.fixture(scope="module")
def sampler(service):
    return service.create_training_client(
        "embedded:arithmetic"
    ).save_weights_and_get_sampling_client()


@pytest.fixture(scope="module")
def start(sampler):
    return SavedState(tuple(tokens_of(sampler.get_tokenizer(), PROMPT).to_ints()))


def test_a_segment_pauses_after_its_turns_and_its_end_resumes(sampler, start):
    heard = []

    def environment(actions):
        heard.append(actions)
        return Counter(actions, length=5)

    def first(params):
        heard.clear()
        return sample_segments(sampler, start, 3, params, environment, 2, BUDGETS)

    segments = _without_answers(first)
    assert heard == [(), (), ()]
    for seg in segments:
        assert seg.paused and seg.episode.record.turns == 2
        assert seg.actions == ("t1", "t2")
        end = seg.end()
        assert end.tokens == start.tokens + tuple(seg.episode.tokens)
        assert end.actions == ("t1", "t2")
    # The next segment starts from the end: the environment is rebuilt after its actions;
    # a game of 3 turns ends at the segment's first answer, so it does not pause.
    end = segments[0].end()

    def resumed(params):
        heard.clear()
        game = lambda a: environment(a[:2]) and Counter(a, 3)  # noqa: E731
        return sample_segments(sampler, end, 2, params, game, 4, BUDGETS)

    more = _without_answers(resumed)
    assert heard == [("t1", "t2")] * 2
    for seg in more:
        assert not seg.paused and seg.episode.record.ended_by == "env"
        assert seg.actions == ("t3",)
        assert seg.end().actions == ("t1", "t2", "t3")


def test_the_datum_trains_only_the_segments_policy_tokens(sampler, start):
    seg = sample_segments(sampler, start, 1, PARAMS, lambda a: Counter(a, 9), 2, BUDGETS)[0]
    before = seg.start.tokens
    datum = seg.datum(0.5, "importance_sampling")
    advantages = list(datum.loss_fn_inputs["advantages"])
    n_context = len(before) - 1  # position i predicts token i + 1
    assert advantages[:n_context] == [0.0] * n_context
    policy = seg.episode.policy_mask
    assert advantages[n_context:] == [0.5 * m for m in policy]
    assert 0 in policy and 1 in policy  # observations are left out, turns are in


def test_an_environment_that_fails_to_start_costs_its_segment_only(sampler, start):
    made = []

    def flaky(actions):
        made.append(None)
        if len(made) == 2:
            raise RuntimeError("no room")
        return Counter(actions, 9)

    def run(params):
        made.clear()
        return sample_segments(sampler, start, 3, params, flaky, 2, BUDGETS)

    segments = _without_answers(run)
    assert [s.paused for s in segments] == [True, False, True]
    assert segments[1].episode.record.ended_by == "env_failed"


def test_turns_must_be_a_positive_integer(sampler, start):
    with pytest.raises(ValueError, match="turns=0 must be an integer >= 1"):
        sample_segments(sampler, start, 1, PARAMS, lambda a: Counter(a, 9), 0)
