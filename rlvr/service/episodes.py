"""Multi-turn episodes through the service: `SamplingClient.sample_episodes` runs rlvr's own
episode loop (`rlvr.rollout.episodes.run_episodes`: token in, token out; an environment's
observations appended as forced tokens; its failures cost the episode, never the run) and
returns each trajectory as the trainer sees it; `episode_datum` turns one into a `Datum`
whose observation tokens are never trained on.

A trajectory's `observation_mask` is the trainer's `forced_mask`: 1 on the environment's
tokens. The datum gives them advantage 0 (and, for `gspo`, `response_mask` 0), so the
service's loss covers exactly the trainer's `policy_mask` (docs/algorithms.md §9).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rlvr.envs.base import Environment
from rlvr.envs.budgets import EpisodeBudgets
from rlvr.rollout.base import Generation
from rlvr.rollout.base import SamplingParams as EngineParams
from rlvr.rollout.episodes import EpisodeRecord, run_episodes
from rlvr.service.losses import loss_spec
from rlvr.service.types import Datum, EncodedTextChunk, ModelInput


@dataclass
class SampledEpisode:
    """One trajectory: policy turns and environment observations, as exact token ids."""

    tokens: list[int]
    logprobs: list[float]
    """Sampler log-prob of each policy token; 0 on observation tokens (never sampled)."""
    observation_mask: list[int]
    """1 on the environment's tokens (the trainer's `forced_mask`), 0 on the policy's."""
    truncated: bool
    """The trajectory ran out of tokens (`SamplingParams.max_tokens`)."""
    record: EpisodeRecord
    """Turns, tool calls, environment time and how the episode ended (`ended_by`)."""

    @property
    def policy_mask(self) -> list[int]:
        return [1 - o for o in self.observation_mask]


@dataclass
class EpisodeResponse:
    episodes: list[SampledEpisode]


def run(
    engine,
    prompt: list[int],
    num_samples: int,
    params: EngineParams,
    environment: Callable[[], Environment],
    budgets: EpisodeBudgets,
    generator: torch.Generator,
) -> EpisodeResponse:
    """`num_samples` episodes of `prompt`, each with a fresh `environment()`."""
    if not callable(environment):
        raise ValueError(
            f"environment={environment!r} must be a callable that returns a fresh Environment"
        )
    gen = run_episodes(
        engine, engine.tokenizer, [prompt], lambda i: environment(), params, budgets, generator
    )
    return EpisodeResponse([_episode(gen, row) for row in range(len(gen.texts))])


def _episode(gen: Generation, row: int) -> SampledEpisode:
    n = int(gen.response_mask[row].sum())
    return SampledEpisode(
        tokens=gen.response_ids[row, :n].tolist(),
        logprobs=gen.sampler_logprobs[row, :n].tolist(),
        observation_mask=[int(f) for f in gen.forced_mask[row, :n].tolist()],
        truncated=bool(gen.truncated[row]),
        record=gen.episodes[row],
    )


def episode_datum(
    prompt: ModelInput, episode: SampledEpisode, advantage: float, loss_fn: str
) -> Datum:
    """The datum of `episode` after `prompt` for `loss_fn`: position i predicts token i + 1
    (the shift rl_loop makes); Â on the policy's tokens, 0 on the prompt and observations.
    A prompt's image chunks stay in the datum (their `expected_tokens` count as its length)."""
    spec = loss_spec(loss_fn)
    if "advantages" not in spec.inputs:
        raise ValueError(
            f"episode_datum: loss_fn={loss_fn!r} takes no advantages; use a policy loss "
            "(importance_sampling, ppo, cispo, gspo or an rlvr surrogate)"
        )
    if not episode.tokens:
        raise ValueError("episode_datum: the episode has no tokens (its environment failed)")
    pad = prompt.length - 1
    policy = episode.policy_mask
    inputs = {
        "target_tokens": [0] * pad + episode.tokens,
        "logprobs": [0.0] * pad + episode.logprobs,
        "advantages": [0.0] * pad + [advantage * m for m in policy],
        "response_mask": [0] * pad + policy,
    }
    # The prompt's chunks as they are: its pictures (image chunks) stay in the datum.
    model_input = ModelInput(chunks=[*prompt.chunks, EncodedTextChunk(episode.tokens[:-1])])
    return Datum(model_input, {k: v for k, v in inputs.items() if k in spec.inputs})
