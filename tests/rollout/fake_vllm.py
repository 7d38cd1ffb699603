"""A fake vLLM backend for CPU tests: its own copy of the weights (loaded only through
`load_weights`, as vLLM's are), sampling with the HF engine, and a log of every call."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from transformers import AutoModelForCausalLM

from rlvr.models.hf_policy import merged_state_dict
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.vllm_engine import Sample


class FakeBackend:
    def __init__(self, model, **options):
        self.options = options
        self.calls: list = []
        self.inference = AutoModelForCausalLM.from_config(model.config)
        self.inference.load_state_dict(merged_state_dict(model))
        ids = SimpleNamespace(
            pad_token_id=model.config.pad_token_id,
            eos_token_id=model.config.eos_token_id,
            decode=lambda ids, skip_special=True: "",  # the engine decodes, not the backend
        )
        self.sampler = HFEngine(self.inference, ids)

    def generate(self, prompt_ids, n, temperature, top_p, max_tokens, seeds):
        self.calls.append("generate")
        groups = []
        for ids, limit, seed in zip(prompt_ids, max_tokens, seeds, strict=True):
            params = SamplingParams(n, temperature, top_p, limit)
            gen = self.sampler.generate_ids([ids], params, torch.Generator().manual_seed(seed))
            groups.append(
                [
                    Sample(
                        gen.response_ids[row, :length].tolist(),
                        gen.sampler_logprobs[row, :length].tolist(),
                        not bool(gen.truncated[row]),
                    )
                    for row, length in enumerate(gen.response_lengths.tolist())
                ]
            )
        return groups

    def score(self, prompt_ids, response_ids):
        self.calls.append("score")
        scored = self.sampler.score_ids(prompt_ids, response_ids)
        return [s.tolist() for s in scored]

    def load_weights(self, weights):
        self.calls.append("load_weights")
        self.inference.load_state_dict(dict(weights))

    def sleep(self):
        self.calls.append("sleep")

    def wake_up(self, tags=None):
        self.calls.append(("wake_up", tags))


def make_fake(model, **options):
    return FakeBackend(model, **options)
