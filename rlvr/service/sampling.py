"""`SamplingClient`: samples continuations with rlvr's HF engine and scores sequences.

A sampling client made by `TrainingClient.save_weights_and_get_sampling_client` shares the
trainer's module (no copy of the weights), so it samples from the weights as they were
when it was made only until the next `optim_step` or `load_state`. The remote APIs keep a
snapshot; here a stale client refuses to sample (`StaleWeightsError`) instead of silently
sampling from newer weights: call `save_weights_and_get_sampling_client` again after each
step. A client made by `ServiceClient.create_sampling_client(path)` owns its weights and
never goes stale.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import torch

from rlvr.envs.base import Environment
from rlvr.envs.budgets import EpisodeBudgets
from rlvr.models.tokenizer import Tokenizer
from rlvr.rollout.base import RolloutEngine
from rlvr.rollout.base import SamplingParams as EngineParams
from rlvr.rollout.stops import stop_end
from rlvr.service import episodes
from rlvr.service.episodes import EpisodeResponse
from rlvr.service.types import (
    APIFuture,
    CompletedClient,
    ModelInput,
    SampledSequence,
    SampleResponse,
    SamplingParams,
    from_sdk,
)

SEQUENCE_IDS = itertools.count()  # one process is one session: ids distinct within it


class StaleWeightsError(RuntimeError):
    """A sampling client was used after the training client's weights moved on."""


class SamplingClient(CompletedClient):
    """Samples from a policy module; `staleness()` says why it may not (None: it may)."""

    def __init__(
        self,
        engine: RolloutEngine,
        logprobs_of: Callable[[ModelInput], list[float | None]],
        seed: int = 0,
        staleness: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.engine = engine
        self._logprobs_of = logprobs_of
        self._staleness = staleness
        self.generator = torch.Generator().manual_seed(seed)

    def get_tokenizer(self) -> Tokenizer:
        return self.engine.tokenizer

    def sample(
        self, prompt: ModelInput, num_samples: int, sampling_params: SamplingParams
    ) -> APIFuture[SampleResponse]:
        """`num_samples` continuations of `prompt`, each with its tokens (EOS or the stop
        token included) and their sampler log-probs."""
        self._check_fresh()
        sampling_params = from_sdk(SamplingParams, sampling_params, "sample")
        params = _engine_params(num_samples, sampling_params)
        generator = self._generator(sampling_params)
        tokens = _prompt_tokens(prompt, self.engine.tokenizer.vocab_size)
        gen = self.engine.generate_ids([tokens], params, generator)
        sequences = []
        for row in range(len(gen.texts)):
            n = int(gen.response_mask[row].sum())
            seq = SampledSequence(
                tokens=gen.response_ids[row, :n].tolist(),
                logprobs=gen.sampler_logprobs[row, :n].tolist(),
                stop_reason="length" if bool(gen.truncated[row]) else "stop",
                sequence_id=f"seq-{next(SEQUENCE_IDS)}",
            )
            sequences.append(_apply_stop(seq, sampling_params.stop, self.engine.tokenizer))
        return APIFuture(SampleResponse(sequences))

    def sample_episodes(
        self,
        prompt: ModelInput,
        num_samples: int,
        sampling_params: SamplingParams,
        environment: Callable[[], Environment],
        budgets: EpisodeBudgets | None = None,
    ) -> APIFuture[EpisodeResponse]:
        """`num_samples` multi-turn episodes of `prompt`, each against a fresh
        `environment()`: rlvr's episode loop, so each trajectory is the trainer's record
        (service/episodes.py). `sampling_params.max_tokens` bounds the whole trajectory,
        policy and observation tokens together; turns end at the environment's stop strings."""
        self._check_fresh()
        sampling_params = from_sdk(SamplingParams, sampling_params, "sample_episodes")
        if sampling_params.stop:
            raise ValueError(
                f"sample_episodes: SamplingParams.stop={sampling_params.stop!r} cannot take "
                "effect; an episode's turns end at its environment's `stop` strings"
            )
        params = _engine_params(num_samples, sampling_params)
        tokens = _prompt_tokens(prompt, self.engine.tokenizer.vocab_size)
        generator = self._generator(sampling_params)
        budgets = budgets or EpisodeBudgets()
        return APIFuture(
            episodes.run(self.engine, tokens, num_samples, params, environment, budgets, generator)
        )

    def _generator(self, sampling_params: SamplingParams) -> torch.Generator:
        if sampling_params.seed is None:
            return self.generator
        return torch.Generator().manual_seed(int(sampling_params.seed))

    async def sample_async(
        self, prompt: ModelInput, num_samples: int, sampling_params: SamplingParams
    ) -> SampleResponse:
        return self.sample(prompt, num_samples, sampling_params).result()

    def compute_logprobs(self, prompt: ModelInput) -> APIFuture[list[float | None]]:
        """log π(token_i | tokens_<i) of each token of `prompt`; None for the first."""
        self._check_fresh()
        _prompt_tokens(prompt, self.engine.tokenizer.vocab_size)
        return APIFuture(self._logprobs_of(prompt))

    async def compute_logprobs_async(self, prompt: ModelInput) -> list[float | None]:
        return self.compute_logprobs(prompt).result()

    def _check_fresh(self) -> None:
        reason = self._staleness()
        if reason:
            raise StaleWeightsError(reason)


def _engine_params(num_samples: int, params: SamplingParams) -> EngineParams:
    for name, value in (("num_samples", num_samples), ("max_tokens", params.max_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} is not valid; it must be an integer >= 1")
    return EngineParams(
        group_size=num_samples,
        temperature=params.temperature,
        top_p=params.top_p,
        max_new_tokens=params.max_tokens,
    )


def _prompt_tokens(prompt: ModelInput, vocab_size: int) -> list[int]:
    if not hasattr(prompt, "to_ints"):  # duck-typed: the `tinker` package's ModelInput too
        raise ValueError(
            f"prompt must be a ModelInput (ModelInput.from_ints(tokens)), got {prompt!r:.60}"
        )
    tokens = [int(t) for t in prompt.to_ints()]
    if not tokens:
        raise ValueError("prompt is empty; it needs at least one token")
    bad = [t for t in tokens if not 0 <= t < vocab_size]
    if bad:
        raise ValueError(f"prompt token {bad[0]} is outside the vocabulary [0, {vocab_size})")
    return tokens


def _apply_stop(
    seq: SampledSequence, stop: Sequence[int] | Sequence[str] | None, tokenizer: Tokenizer
) -> SampledSequence:
    """The sequence cut after its first stop token or the token that completes a stop
    string. Sampling is causal, so the kept tokens and log-probs are those a sampler that
    stopped there would have drawn."""
    if not stop:
        return seq
    if isinstance(stop, str):  # the remote API takes one string as well as a list
        stop = [stop]
    if not all(isinstance(s, int | str) for s in stop):
        raise ValueError(f"SamplingParams.stop={stop!r} must be a list of token ids or of strings")
    ids = [s for s in stop if isinstance(s, int)]
    strings = [s for s in stop if isinstance(s, str)]
    by_id = next((k + 1 for k, t in enumerate(seq.tokens) if t in ids), None)
    decode = lambda part: tokenizer.decode(part, skip_special=False)  # noqa: E731
    ends = [e for e in (by_id, stop_end(seq.tokens, strings, decode)) if e is not None]
    if not ends:
        return seq
    end = min(ends)
    return SampledSequence(seq.tokens[:end], seq.logprobs[:end], "stop", seq.sequence_id)
