"""`SamplingClient`: samples continuations with rlvr's HF engine and scores sequences.

A sampling client made by `TrainingClient.save_weights_and_get_sampling_client` keeps the
weights of the step it was made at (snapshots.py): it samples from them after later
`optim_step`s too, as the remote APIs' samplers do (with vLLM, which holds its own copy of
the weights, an older step's sampler refuses instead: `StaleWeightsError`). A client made
by `ServiceClient.create_sampling_client(path)` owns its weights. Every draw holds the
model's lock, so training calls from other threads wait for it (security audit F14).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
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
from rlvr.service.images import image_spec, model_prompt
from rlvr.service.progress import long_call
from rlvr.service.snapshots import StaleWeightsError, locked
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
MAX_SAMPLES = 1024
MAX_SAMPLED_TOKENS = 1 << 21  # num_samples × max_tokens in one call (F19: no 66 GB try)

__all__ = ["SamplingClient", "StaleWeightsError"]


class SamplingClient(CompletedClient):
    """Samples from a policy module; every draw runs inside `weights()`, which holds the
    model's lock and puts this sampler's weights in place (snapshots.py)."""

    def __init__(
        self,
        engine: RolloutEngine,
        logprobs_of: Callable[[ModelInput], list[float | None]],
        seed: int = 0,
        weights: Callable[[], contextlib.AbstractContextManager[None]] | None = None,
        vocab_size: int | None = None,
    ) -> None:
        self.engine = engine
        self._logprobs_of = logprobs_of
        self._weights = weights or locked(threading.RLock())
        self.vocab_size = vocab_size or engine.tokenizer.vocab_size
        self.seed = seed
        self.generator = torch.Generator().manual_seed(seed)

    def get_tokenizer(self) -> Tokenizer:
        return self.engine.tokenizer

    def sample(
        self, prompt: ModelInput, num_samples: int, sampling_params: SamplingParams
    ) -> APIFuture[SampleResponse]:
        """`num_samples` continuations of `prompt`, each with its tokens (EOS or the stop
        token included), their sampler log-probs and their text (special tokens left out)."""
        sampling_params = from_sdk(SamplingParams, sampling_params, "sample")
        params = _engine_params(num_samples, sampling_params)
        generator = self._generator(sampling_params)
        tokens = _prompt_tokens(prompt, self.vocab_size, self.engine)
        with self._weights(), _timed("sample", num_samples, sampling_params):
            gen = self.engine.generate_ids([tokens], params, generator)
        tokenizer = self.engine.tokenizer
        sequences = []
        for row in range(len(gen.texts)):
            n = int(gen.response_mask[row].sum())
            seq = SampledSequence(
                tokens=gen.response_ids[row, :n].tolist(),
                logprobs=gen.sampler_logprobs[row, :n].tolist(),
                stop_reason="length" if bool(gen.truncated[row]) else "stop",
                sequence_id=f"seq-{next(SEQUENCE_IDS)}",
            )
            seq = _apply_stop(seq, sampling_params.stop, tokenizer)
            seq.text = tokenizer.decode(seq.tokens, skip_special=True)
            sequences.append(seq)
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
        sampling_params = from_sdk(SamplingParams, sampling_params, "sample_episodes")
        if sampling_params.stop:
            raise ValueError(
                f"sample_episodes: SamplingParams.stop={sampling_params.stop!r} cannot take "
                "effect; an episode's turns end at its environment's `stop` strings"
            )
        params = _engine_params(num_samples, sampling_params)
        tokens = _prompt_tokens(prompt, self.vocab_size, self.engine)
        generator = self._generator(sampling_params)
        budgets = budgets or EpisodeBudgets()
        with self._weights(), _timed("sample_episodes", num_samples, sampling_params):
            response = episodes.run(
                self.engine, tokens, num_samples, params, environment, budgets, generator
            )
        return APIFuture(response)

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
        _prompt_tokens(prompt, self.vocab_size, self.engine)
        with self._weights():
            return APIFuture(self._logprobs_of(prompt))

    async def compute_logprobs_async(self, prompt: ModelInput) -> list[float | None]:
        return self.compute_logprobs(prompt).result()


def _timed(kind: str, num_samples: int, params: SamplingParams):
    """The long-call progress of drawing `num_samples`, at most `max_tokens` each (the
    rate is of that bound, so calls of one shape predict each other)."""
    bound = num_samples * int(params.max_tokens or 0)
    return long_call(kind, bound, f"{num_samples} × up to {params.max_tokens} tokens")


def _engine_params(num_samples: int, params: SamplingParams) -> EngineParams:
    for name, value in (("num_samples", num_samples), ("max_tokens", params.max_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} is not valid; it must be an integer >= 1")
    if num_samples > MAX_SAMPLES or num_samples * params.max_tokens > MAX_SAMPLED_TOKENS:
        raise ValueError(
            f"num_samples={num_samples} × max_tokens={params.max_tokens} is too much for one "
            f"call: at most {MAX_SAMPLES} samples and {MAX_SAMPLED_TOKENS} tokens in all; "
            "split it into several calls"
        )
    greedy = params.temperature == 0  # the remote APIs' greedy: here top-k 1, log-prob 0
    return EngineParams(
        group_size=num_samples,
        temperature=1.0 if greedy else params.temperature,
        top_p=params.top_p,
        max_new_tokens=params.max_tokens,
        top_k=1 if greedy else params.top_k,
    )


def _prompt_tokens(prompt: ModelInput, vocab_size: int, engine: RolloutEngine) -> list[int]:
    """The prompt's ids; an `ImagePrompt` when it holds image chunks (service/images.py)."""
    if not hasattr(prompt, "to_ints"):  # duck-typed: the `tinker` package's ModelInput too
        raise ValueError(
            f"prompt must be a ModelInput (ModelInput.from_ints(tokens)), got {prompt!r:.60}"
        )
    model = getattr(engine, "model", None)
    spec = image_spec(model, engine.tokenizer) if model is not None else None
    return model_prompt(prompt, vocab_size, spec, type(model).__name__, "prompt")


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
