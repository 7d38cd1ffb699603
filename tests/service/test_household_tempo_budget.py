"""examples/tempo/household_tempo.py counts every token it samples for training (the agent's
tokens in segments and warm-up games, the critic's answers; not the world's observations,
not evaluation games) and stops after the step at which the count reaches
`--max-sampled-tokens`, as `rlvr train`'s `max_generated_tokens` does: the budget of the
household credit study (studies/household_credit)."""

from __future__ import annotations

import dataclasses
import functools

import pytest
from test_service_tempo_example import OPTIONS, load_example

from rlvr.service.episodes import SampledEpisode


@pytest.fixture
def tempo(tmp_path, monkeypatch):
    from rlvr.warmstart import load as warm_load

    # 2 warm-start steps in a private cache: the task's own warm start takes ~22 minutes.
    tiny = functools.partial(warm_load.warm_start, max_steps=2, cache_dir=tmp_path)
    monkeypatch.setattr(
        warm_load, "warm_start", lambda *a, **kw: tiny(*a, **{**kw, "max_steps": 2})
    )
    return load_example()


def config(tempo, **changes):
    small = dict(steps=2, warmup_steps=1, states=1, branches=2, critic_samples=2)
    small |= dict(endpoint_samples=1, segment_turns=2, max_steps=4, warmup_games=1)
    return tempo.Config(**{**small, "eval_games": 0, "task_options": OPTIONS, **changes})


def test_policy_tokens_leave_out_the_observations(tempo):
    # ids a b | obs obs obs | c: the agent sampled 3 of the 6 (hand-counted)
    episode = SampledEpisode([5, 6, 7, 8, 9, 10], [0.0] * 6, [0, 0, 1, 1, 1, 0], False, None)
    segment = tempo.Segment(tempo.SavedState((1, 2)), episode, paused=True)
    assert tempo.policy_tokens(segment) == 3


def test_the_count_is_every_sampled_token_and_the_budget_stops_after_its_step(tempo, monkeypatch):
    seen = {"segments": 0, "critic": 0}
    sample_segments = tempo.sample_segments

    def counting_segments(*args, **kwargs):
        segs = sample_segments(*args, **kwargs)
        # counted here independently of the loop: the 0s of each observation mask
        seen["segments"] += sum(m == 0 for s in segs for m in s.episode.observation_mask)
        return segs

    estimates = tempo.Tempo.estimates

    def counting_estimates(self, *args):
        out = estimates(self, *args)
        seen["critic"] += sum(len(answer) for _, answer, _, _ in out)
        return out

    monkeypatch.setattr(tempo, "sample_segments", counting_segments)
    monkeypatch.setattr(tempo.Tempo, "estimates", counting_estimates)
    history = tempo.train(config(tempo))
    run = history.pop("run")
    assert seen["critic"] > 0 and seen["segments"] > 0
    assert run.sampled == seen["segments"] + seen["critic"]
    cumulative = [m["sampled_tokens"] for m in history["warmup"] + history["td"]]
    assert len(cumulative) == 3 and cumulative[-1] == run.sampled
    assert cumulative == sorted(set(cumulative))  # every step sampled something
    run.config = dataclasses.replace(run.config, eval_games=1)
    tempo.evaluate(run)  # an evaluation game is played but not counted
    assert run.sampled == cumulative[-1]

    # The same run (one seed, one thread: the same samples) with a budget one token past
    # the warm-up's count stops after the first TD step, the one that reached it.
    bounded = tempo.train(config(tempo, max_sampled_tokens=cumulative[0] + 1))
    assert len(bounded["warmup"]) == 1 and len(bounded["td"]) == 1
    assert bounded["run"].sampled == cumulative[1]
    # A budget the warm-up step reaches: no TD step at all.
    spent = tempo.train(config(tempo, max_sampled_tokens=1))
    assert len(spent["warmup"]) == 1 and spent["td"] == []
