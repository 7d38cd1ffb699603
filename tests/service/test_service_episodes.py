"""Episodes through the sampling client are rlvr's own episode records, and the datums built
from them train on exactly the trainer's `policy_mask`: the same gradient as rlvr's
`policy_loss` over the same trajectories with observation tokens forced.

The environment hears each turn that ends at "{" (the embedded model writes " \\boxed{" in
nearly every answer) and answers "7" — an observation the policy never sampled.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch
from rounding_testlib import assert_within, forward_terms, reorder_atol

from rlvr.algo.loss import policy_loss
from rlvr.algo.policy.masks import policy_mask
from rlvr.algo.recipes import Recipe
from rlvr.envs.base import Environment, Reply
from rlvr.envs.budgets import EpisodeBudgets
from rlvr.models.logprobs import response_logprobs
from rlvr.rollout.base import SamplingParams as EngineParams
from rlvr.rollout.episodes import run_episodes
from rlvr.service import SamplingParams, episode_datum, tokens_of

PROMPT = "Q: 37+85=? A:"
BUDGETS = EpisodeBudgets(max_turns=2)
PARAMS = SamplingParams(max_tokens=20, seed=4)


class Brace(Environment):
    stop = ("{",)

    def step(self, turn: str) -> Reply:
        return Reply(observation="7")


@pytest.fixture(scope="module")
def trainer(service):
    return service.create_training_client("embedded:arithmetic")


@pytest.fixture(scope="module")
def sampled(trainer):
    sampler = trainer.save_weights_and_get_sampling_client("episodes")
    prompt = tokens_of(trainer.get_tokenizer(), PROMPT)
    episodes = sampler.sample_episodes(prompt, 4, PARAMS, Brace, BUDGETS).result().episodes
    return prompt, episodes


def test_episodes_are_the_trainers_records(trainer, sampled):
    prompt, episodes = sampled
    gen = run_episodes(
        trainer.engine,
        trainer.get_tokenizer(),
        [prompt.to_ints()],
        lambda i: Brace(),
        EngineParams(group_size=4, max_new_tokens=20),
        BUDGETS,
        torch.Generator().manual_seed(4),
    )
    observed = 0
    for row, episode in enumerate(episodes):
        n = int(gen.response_mask[row].sum())
        assert episode.tokens == gen.response_ids[row, :n].tolist()
        assert episode.logprobs == gen.sampler_logprobs[row, :n].tolist()
        assert episode.observation_mask == gen.forced_mask[row, :n].int().tolist()
        # the same record, bar the wall time its environment took
        assert replace(episode.record, env_seconds=0) == replace(gen.episodes[row], env_seconds=0)
        observed += sum(episode.observation_mask)
        if sum(episode.observation_mask):  # "{" heard, then the observation "7", forced
            brace = episode.tokens.index(trainer.get_tokenizer().encode("{")[0])
            assert episode.observation_mask[brace + 1] == 1 and episode.record.turns == 2
            assert episode.tokens[brace + 1] == trainer.get_tokenizer().encode("7")[0]
            assert episode.logprobs[brace + 1] == 0.0
    assert observed > 0


def test_datum_masks_are_the_trainers_policy_mask(sampled):
    prompt, episodes = sampled
    for episode in episodes:
        datum = episode_datum(prompt, episode, 1.0, "gspo")
        inputs = datum.loss_fn_inputs
        pad = prompt.length - 1
        mask = policy_mask(torch.ones(len(episode.tokens)), torch.tensor(episode.observation_mask))
        assert inputs["response_mask"][pad:] == mask.int().tolist()
        assert inputs["advantages"][pad:] == mask.tolist()
        assert inputs["response_mask"][:pad] == [0] * pad
        assert datum.model_input.length == len(inputs["target_tokens"]) == len(inputs["logprobs"])
    plain = episode_datum(prompt, episodes[0], 1.0, "importance_sampling")
    assert set(plain.loss_fn_inputs) == {"target_tokens", "logprobs", "advantages"}
    with pytest.raises(ValueError, match="loss_fn='cross_entropy' takes no advantages"):
        episode_datum(prompt, episodes[0], 1.0, "cross_entropy")


def test_episode_step_equals_rlvrs_loss_on_the_policy_mask(trainer, sampled):
    prompt, episodes = sampled
    advantages = [1.0, -0.5, 0.25, -0.75]
    reference = copy.deepcopy(trainer.model)
    datums = [
        episode_datum(prompt, e, a, "importance_sampling")
        for e, a in zip(episodes, advantages, strict=True)
    ]
    trainer.forward_backward(datums, "importance_sampling").result()
    got = [p.grad.clone() for p in trainer.model.parameters()]
    trainer.optimizer.zero_grad(set_to_none=True)

    width = max(len(e.tokens) for e in episodes)
    pad = trainer.get_tokenizer().pad_token_id
    ids = torch.full((4, width), pad, dtype=torch.long)
    response, forced, old = torch.zeros(4, width), torch.zeros(4, width), torch.zeros(4, width)
    for i, e in enumerate(episodes):
        n = len(e.tokens)
        ids[i, :n], response[i, :n] = torch.tensor(e.tokens), 1.0
        forced[i, :n], old[i, :n] = (
            torch.tensor(e.observation_mask).float(),
            torch.tensor(e.logprobs),
        )
    mask = policy_mask(response, forced)  # what the trainer trains on
    logprobs = response_logprobs(reference, [prompt.to_ints()] * 4, ids, response, pad, 1.0, True)
    loss, _ = policy_loss(
        Recipe(surrogate="reinforce", kl=None),
        logprobs=logprobs,
        old_logprobs=old,
        advantages=torch.tensor(advantages)[:, None] * mask,
        loss_weights=mask,
        response_mask=mask,
    )
    loss.backward()
    expected = [p.grad.clone() for p in reference.parameters()]
    # float32 reduction order differs between the two forwards (measured 1.3e-6): a weight's
    # gradient sums over every token and through the model's chain of sums, so the two are
    # n·ε·max|g| apart at most. The observation tokens' share would be small here (their
    # sampler log-prob is 0, so the importance weight is π itself): the datum test checks
    # their zero advantages exactly.
    grad_terms = response.numel() + forward_terms(reference.config)
    for i, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert_within(a, b, reorder_atol(grad_terms, b.abs().max().item()), f"grad {i}:")


def test_stop_strings_cannot_be_set_for_episodes(trainer):
    sampler = trainer.save_weights_and_get_sampling_client("episodes")
    prompt = tokens_of(trainer.get_tokenizer(), PROMPT)
    with pytest.raises(ValueError, match=r"SamplingParams.stop=\['\}'\] cannot take effect"):
        sampler.sample_episodes(prompt, 2, SamplingParams(stop=["}"]), Brace)
