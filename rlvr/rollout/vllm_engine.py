"""Rollouts with vLLM behind the `RolloutEngine` interface (optional extra `rlvr[gpu]`).

The engine is colocated with the trainer: vLLM holds its own copy of the weights on the
same GPU. Between phases it sleeps (weights offloaded, KV cache freed) so the optimizer
has the memory, and wakes before sampling. After every optimizer step the trainer calls
`sync_weights`, which pushes the policy's weights into vLLM — for a LoRA policy the
merged W + (α/r)·B·A under the base model's names (`merged_state_dict`), so vLLM never
needs to know about adapters. Sampled tokens come back with their sampler log-probs
(vLLM's `processed_logprobs`: after temperature, and after top-p when top_p < 1) for the
trainer's mismatch correction. Every prompt gets its own seed (`prompt_seeds`) and a
token limit that keeps prompt + response within the model's context.

Everything vLLM-specific sits in `VLLMBackend`; the engine speaks to a small `Backend`
protocol, so it is tested on CPU with a fake backend. vLLM is imported only when this
engine is selected (`rollout_engine: vllm`), with a clear error when it is missing.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from rlvr.models.context import context_length, response_limits
from rlvr.models.hf_policy import merged_state_dict
from rlvr.models.tokenizer import Tokenizer
from rlvr.rollout.base import Generation, SamplingParams, TextPrompts


@dataclass
class Sample:
    """One sampled completion as a backend returns it."""

    token_ids: list[int]
    """Generated tokens, the EOS token included when the completion stopped on it."""
    logprobs: list[float]
    """Sampler log-prob of each generated token."""
    finished: bool
    """Stopped on EOS (False: hit max_tokens)."""


class Backend(Protocol):
    """What the engine needs from an inference server."""

    def generate(
        self,
        prompt_ids: list[list[int]],
        n: int,
        temperature: float,
        top_p: float,
        max_tokens: list[int],
        seeds: list[int],
    ) -> list[list[Sample]]:
        """`n` samples of each prompt; prompt i gets at most `max_tokens[i]` new tokens and
        its own seed `seeds[i]` (vLLM seeds its j-th sample with seeds[i] + j)."""
        ...

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None: ...

    def score(
        self, prompt_ids: list[list[int]], response_ids: list[list[int]]
    ) -> list[list[float]]:
        """log π(y_t | x, y_<t) at temperature 1 of each response token, as the served
        weights give it (the weight-sync probe)."""
        ...

    def sleep(self) -> None: ...

    def wake_up(self, tags: list[str] | None = None) -> None: ...


class VLLMEngine(TextPrompts):
    """`RolloutEngine` over a `Backend` (vLLM on GPU, a fake in tests)."""

    def __init__(
        self, model: torch.nn.Module, tokenizer: Tokenizer, backend: Backend, sleep: bool = True
    ) -> None:
        self.model, self.tokenizer, self.backend = model, tokenizer, backend
        self.sleep_between_phases = sleep
        self.state = "awake"
        """awake, asleep (weights offloaded, KV cache freed) or weights (only weights back)."""
        self.synced_steps = 0
        self.context = context_length(model)

    @classmethod
    def create(
        cls,
        model: torch.nn.Module,
        tokenizer: Tokenizer,
        backend_factory: str | None = None,
        sleep: bool = True,
        **options: Any,
    ) -> VLLMEngine:
        """An engine whose backend is vLLM (`options` go to `vllm.LLM`), or the object
        `backend_factory` ('module:function', called with the model and options) returns."""
        if backend_factory is not None:
            module, name = backend_factory.split(":")
            backend = getattr(importlib.import_module(module), name)(model, **options)
        else:
            backend = VLLMBackend(_model_path(model), enable_sleep_mode=sleep, **options)
        return cls(model, tokenizer, backend, sleep=sleep)

    # -- phases --------------------------------------------------------------------------

    def _wake(self, part: str = "all") -> None:
        """Wake the backend: only its weights (to load new ones), or all of it (to sample)."""
        if self.state == "awake" or (part == "weights" and self.state == "weights"):
            return
        if part == "weights":
            self.backend.wake_up(["weights"])
            self.state = "weights"
        else:
            self.backend.wake_up(["kv_cache"] if self.state == "weights" else None)
            self.state = "awake"

    def _sleep(self) -> None:
        if self.sleep_between_phases and self.state != "asleep":
            self.backend.sleep()
            self.state = "asleep"

    def sync_weights(self) -> None:
        """Push the trainer's current weights (LoRA merged) into the backend."""
        self._wake("weights")
        with torch.no_grad():
            self.backend.load_weights(merged_state_dict(self.model).items())
        self.synced_steps += 1

    def score_ids(self, prompts: list[list[int]], responses: list[list[int]]) -> list[torch.Tensor]:
        """The backend's log-probs of given responses (vLLM: prompt log-probs of prompt +
        response), at temperature 1: what the weight-sync probe compares."""
        self._wake()
        try:
            scored = self.backend.score(prompts, responses)
        finally:
            self._sleep()
        if [len(s) for s in scored] != [len(r) for r in responses]:
            raise ValueError(
                f"backend scored {[len(s) for s in scored]} tokens for responses of "
                f"{[len(r) for r in responses]}"
            )
        return [torch.tensor(s, dtype=torch.float32) for s in scored]

    # -- sampling ------------------------------------------------------------------------

    def generate_ids(
        self, prompts: list[list[int]], params: SamplingParams, generator: torch.Generator
    ) -> Generation:
        if params.top_k != -1:
            raise ValueError(
                f"top_k={params.top_k}: rlvr's vLLM engine samples without top-k; use -1"
            )
        limits = response_limits(map(len, prompts), params.max_new_tokens, self.context)
        seeds = prompt_seeds(len(prompts), params.group_size, generator)
        self._wake()
        try:
            groups = self.backend.generate(
                prompts, params.group_size, params.temperature, params.top_p, limits, seeds
            )
        finally:
            self._sleep()
        return self._package(prompts, groups, params, limits)

    def _package(
        self,
        prompts: list[list[int]],
        groups: list[list[Sample]],
        params: SamplingParams,
        limits: list[int],
    ) -> Generation:
        if len(groups) != len(prompts) or any(len(g) != params.group_size for g in groups):
            raise ValueError(
                f"backend returned {[len(g) for g in groups]} samples for {len(prompts)} "
                f"prompts × group_size {params.group_size}"
            )
        samples = [s for group in groups for s in group]
        steps = max(1, max(len(s.token_ids) for s in samples))
        batch = len(samples)
        ids = torch.full((batch, steps), self.tokenizer.pad_token_id, dtype=torch.long)
        logprobs = torch.zeros(batch, steps)
        mask = torch.zeros(batch, steps)
        for row, s in enumerate(samples):
            limit = limits[row // params.group_size]
            if len(s.logprobs) != len(s.token_ids) or len(s.token_ids) > limit:
                raise ValueError(
                    f"sample {row}: {len(s.token_ids)} token ids, {len(s.logprobs)} log-probs "
                    f"(at most {limit} tokens asked for)"
                )
            n = len(s.token_ids)
            ids[row, :n] = torch.tensor(s.token_ids, dtype=torch.long)
            logprobs[row, :n] = torch.tensor(s.logprobs, dtype=torch.float32)
            mask[row, :n] = 1.0
        eos = self.tokenizer.eos_token_id
        texts = [
            self.tokenizer.decode([t for t in s.token_ids if t != eos], skip_special=True)
            for s in samples
        ]
        return Generation(
            prompt_ids=[p for p in prompts for _ in range(params.group_size)],
            response_ids=ids,
            response_mask=mask,
            sampler_logprobs=logprobs,
            truncated=torch.tensor([not s.finished for s in samples]),
            prompt_index=torch.arange(len(prompts)).repeat_interleave(params.group_size),
            texts=texts,
        )


def prompt_seeds(prompts: int, group_size: int, generator: torch.Generator) -> list[int]:
    """One sampler seed per prompt, drawn from the trainer's generator (runs stay
    reproducible). vLLM seeds sample j of a prompt with seed + j, so the seeds are spaced
    `group_size` apart: no two samples of a call share a noise stream, not even those of a
    repeated prompt."""
    span = prompts * group_size
    base = int(torch.randint(0, 2**31 - 1 - span, (1,), generator=generator))
    return [base + i * group_size for i in range(prompts)]


def _model_path(model: torch.nn.Module) -> str:
    path = getattr(getattr(model, "config", None), "_name_or_path", "") or getattr(
        model, "name_or_path", ""
    )
    if not path:
        raise ValueError(
            "rollout_engine='vllm' needs a model loaded from a path or hub id (vLLM loads "
            "its own copy of the weights); the embedded model is not supported"
        )
    return str(path)


def import_vllm() -> Any:
    try:
        import vllm
    except ImportError as err:
        raise ImportError(
            "rollout_engine='vllm' needs vLLM, which is not installed: pip install 'rlvr[gpu]' "
            "on a machine with a CUDA GPU, or use rollout_engine: hf"
        ) from err
    return vllm


class VLLMBackend:
    """`Backend` over `vllm.LLM` in this process (colocated with the trainer)."""

    def __init__(self, model_path: str, enable_sleep_mode: bool = True, **options: Any) -> None:
        vllm = import_vllm()
        self._vllm = vllm
        options.setdefault("gpu_memory_utilization", 0.3)
        options.setdefault("logprobs_mode", "processed_logprobs")
        self.llm = vllm.LLM(model=model_path, enable_sleep_mode=enable_sleep_mode, **options)

    def generate(self, prompt_ids, n, temperature, top_p, max_tokens, seeds):
        params = [
            self._vllm.SamplingParams(
                n=n, temperature=temperature, top_p=top_p, max_tokens=m, logprobs=0, seed=seed
            )
            for m, seed in zip(max_tokens, seeds, strict=True)
        ]
        prompts = [{"prompt_token_ids": ids} for ids in prompt_ids]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        return [[_sample(c) for c in out.outputs] for out in outputs]

    def score(self, prompt_ids, response_ids):
        # max_tokens=1: vLLM must generate something; only the prompt's log-probs are read.
        params = self._vllm.SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0)
        prompts = [
            {"prompt_token_ids": p + r} for p, r in zip(prompt_ids, response_ids, strict=True)
        ]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        return [
            [
                entry[token].logprob
                for token, entry in zip(r, out.prompt_logprobs[len(p) :], strict=True)
            ]
            for out, p, r in zip(outputs, prompt_ids, response_ids, strict=True)
        ]

    def load_weights(self, weights):
        weights = list(weights)
        engine = self.llm.llm_engine
        executor = getattr(engine, "model_executor", None)
        if executor is not None and hasattr(executor, "driver_worker"):
            executor.driver_worker.worker.model_runner.model.load_weights(weights)
            return
        # vLLM V1 in-process: run load_weights on every worker.
        self.llm.collective_rpc(lambda worker: worker.model_runner.model.load_weights(weights))

    def sleep(self):
        self.llm.sleep(level=1)

    def wake_up(self, tags=None):
        self.llm.wake_up(tags=tags) if tags else self.llm.wake_up()


def _sample(completion: Any) -> Sample:
    token_ids = list(completion.token_ids)
    logprobs = [
        entry[token].logprob for token, entry in zip(token_ids, completion.logprobs, strict=True)
    ]
    return Sample(token_ids, logprobs, completion.finish_reason == "stop")
