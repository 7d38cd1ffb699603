"""vLLM sampling through the service, on CPU with the fake backend the engine's own tests
use (tests/rollout/fake_vllm.py: its own copy of the weights, loaded only through
`load_weights`): a sampler's tokens score as sampled under the trainer (ratio 1), and a
sampler made after optim_step first pushes the new weights (LoRA merged) into vLLM."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlvr.models.hf_policy import merged_state_dict
from rlvr.rollout.vllm_engine import VLLMEngine
from rlvr.service import AdamParams, Datum, ModelInput, SamplingParams, ServiceClient, tokens_of

PROMPT = "Q: 37+85=? A:"


@pytest.fixture
def service(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "rollout"))
    options = {"backend_factory": "fake_vllm:make_fake"}
    return ServiceClient(root=tmp_path, engine="vllm", engine_options=options)


def scores_as_sampled(trainer, sampler, prompt):
    sequences = sampler.sample(prompt, 3, SamplingParams(max_tokens=10, seed=2)).result().sequences
    for seq in sequences:
        full = ModelInput.from_ints(prompt.to_ints() + seq.tokens)
        scored = trainer.compute_logprobs(full)[prompt.length :]
        torch.testing.assert_close(
            torch.tensor(scored), torch.tensor(seq.logprobs), rtol=0, atol=1e-5
        )
    return sequences


def test_vllm_sampler_follows_the_trainer(service):
    trainer = service.create_lora_training_client("embedded:arithmetic", rank=4, alpha=8.0)
    assert isinstance(trainer.engine, VLLMEngine)
    backend = trainer.engine.backend
    prompt = tokens_of(trainer.get_tokenizer(), PROMPT)
    first = trainer.save_weights_and_get_sampling_client()
    before = scores_as_sampled(trainer, first, prompt)
    assert backend.calls[:2] == ["generate", "sleep"]  # sampled, then asleep for training
    ids = [*trainer.get_tokenizer().encode(PROMPT + " \\boxed{122}"), 1]
    datum = Datum(
        ModelInput.from_ints(ids[:-1]),
        {"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)},
    )
    trainer.forward_backward([datum], "cross_entropy")
    trainer.optim_step(AdamParams(learning_rate=1e-2))
    assert "load_weights" not in backend.calls  # nothing pushed until a sampler is asked for
    second = trainer.save_weights_and_get_sampling_client()
    assert backend.calls.count("load_weights") == 1
    merged, served = merged_state_dict(trainer.model), backend.inference.state_dict()
    assert all(torch.equal(served[k], merged[k]) for k in served)
    after = scores_as_sampled(trainer, second, prompt)  # sampled from the new weights
    assert [s.logprobs for s in after] != [s.logprobs for s in before]
    trainer.save_weights_and_get_sampling_client()  # same weights: no second push
    assert backend.calls.count("load_weights") == 1


def test_engine_options_need_vllm(tmp_path):
    with pytest.raises(ValueError, match=r"engine_options \['backend_factory'\] apply to"):
        ServiceClient(root=tmp_path, engine_options={"backend_factory": "x:y"})
    with pytest.raises(ValueError, match="engine='sglang' is not valid; choose one of: hf, vllm"):
        ServiceClient(root=tmp_path, engine="sglang")
