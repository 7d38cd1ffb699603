"""Sampling returns the engine's own tokens and log-probs, and the trainer scores them the
same (on-policy ratio 1); a LoRA client trains adapters only; state saves and loads; a
mistake in a loop is one line that names the field, the value and what is valid."""

from __future__ import annotations

import pytest
import torch

from rlvr.rollout.base import SamplingParams as EngineParams
from rlvr.rollout.hf_engine import HFEngine
from rlvr.service import (
    AdamParams,
    Datum,
    ModelInput,
    SamplingParams,
    tokens_of,
)

PROMPT = "Q: 37+85=? A:"


@pytest.fixture(scope="module")
def trainer(service):
    return service.create_training_client("embedded:arithmetic")


def sft_datum(tokenizer, text=PROMPT + " \\boxed{122}"):
    ids = [*tokenizer.encode(text), tokenizer.eos_token_id]
    return Datum(
        ModelInput.from_ints(ids[:-1]),
        {"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)},
    )


def test_sample_is_the_engines_and_scores_as_sampled(trainer):
    tokenizer = trainer.get_tokenizer()
    prompt = tokens_of(tokenizer, PROMPT)
    sampler = trainer.save_weights_and_get_sampling_client("s")
    got = sampler.sample(prompt, 4, SamplingParams(max_tokens=14, seed=5)).result().sequences
    engine = HFEngine(trainer.model, tokenizer)
    gen = engine.generate_ids(
        [prompt.to_ints()],
        EngineParams(group_size=4, max_new_tokens=14),
        torch.Generator().manual_seed(5),
    )
    for row, seq in enumerate(got):
        n = int(gen.response_mask[row].sum())
        assert seq.tokens == gen.response_ids[row, :n].tolist()
        assert seq.logprobs == gen.sampler_logprobs[row, :n].tolist()
        assert seq.stop_reason == ("length" if gen.truncated[row] else "stop")
        full = ModelInput.from_ints(prompt.to_ints() + seq.tokens)
        scored = sampler.compute_logprobs(full).result()
        assert scored[0] is None and len(scored) == full.length
        torch.testing.assert_close(
            torch.tensor(scored[prompt.length :]), torch.tensor(seq.logprobs), rtol=0, atol=1e-5
        )


def test_stop_tokens_cut_the_sequence_after_the_first_stop(trainer):
    tokenizer = trainer.get_tokenizer()
    prompt = tokens_of(tokenizer, PROMPT)
    sampler = trainer.save_weights_and_get_sampling_client("s")
    plain = sampler.sample(prompt, 2, SamplingParams(max_tokens=14, seed=1)).result().sequences
    brace = tokenizer.encode("{")[0]
    cut = (
        sampler.sample(prompt, 2, SamplingParams(max_tokens=14, seed=1, stop=[brace]))
        .result()
        .sequences
    )
    for full, short in zip(plain, cut, strict=True):
        end = full.tokens.index(brace) + 1  # " \boxed{" is 8 tokens: the stop token is kept
        assert short.tokens == full.tokens[:end] and short.logprobs == full.logprobs[:end]
        assert short.stop_reason == "stop"
    by_text = (
        sampler.sample(prompt, 2, SamplingParams(max_tokens=14, seed=1, stop=["{"]))
        .result()
        .sequences
    )
    assert [s.tokens for s in by_text] == [s.tokens for s in cut]


def test_a_sampler_keeps_the_weights_of_its_step(service):
    trainer = service.create_training_client("embedded:arithmetic")
    prompt = tokens_of(trainer.get_tokenizer(), PROMPT)
    params = SamplingParams(max_tokens=4, seed=5)
    sampler = trainer.save_weights_and_get_sampling_client("step-0")
    before = sampler.sample(prompt, 2, params).result().sequences
    trainer.forward_backward([sft_datum(trainer.get_tokenizer())], "cross_entropy")
    trainer.optim_step(AdamParams(learning_rate=1e-2))
    trained = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    # Same weights, same seed, same computation: the same draw, to the bit.
    after = sampler.sample(prompt, 2, params).result().sequences
    assert [(s.tokens, s.logprobs) for s in after] == [(s.tokens, s.logprobs) for s in before]
    for n, p in trainer.model.named_parameters():  # the trainer's own weights are back
        assert torch.equal(p, trained[n]), n
    fresh = trainer.save_weights_and_get_sampling_client("step-1")
    moved = fresh.sample(prompt, 2, params).result().sequences
    assert [s.logprobs for s in moved] != [s.logprobs for s in before]


def test_lora_client_trains_adapters_only(service):
    trainer = service.create_lora_training_client("embedded:arithmetic", rank=4)
    names = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert names and all("lora_" in n for n in names)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    out = trainer.forward_backward([sft_datum(trainer.get_tokenizer())], "cross_entropy").result()
    assert out.metrics["loss:sum"] > 0
    trainer.optim_step(AdamParams(learning_rate=1e-2)).result()
    changed = {n for n, p in trainer.model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and changed <= names


def test_save_and_load_state_restore_weights_and_optimizer(service, tmp_path):
    trainer = service.create_training_client("embedded:arithmetic")
    datum = sft_datum(trainer.get_tokenizer())
    trainer.forward_backward([datum], "cross_entropy")
    trainer.optim_step(AdamParams(learning_rate=1e-3))
    path = trainer.save_state(str(tmp_path / "ckpt")).result().path
    trainer.forward_backward([datum], "cross_entropy")
    trainer.optim_step(AdamParams(learning_rate=1e-3))
    after_two = [p.detach().clone() for p in trainer.model.parameters()]
    other = service.create_training_client("embedded:arithmetic")
    other.load_state_with_optimizer(path)
    assert other.step == 1
    other.forward_backward([datum], "cross_entropy")
    other.optim_step(AdamParams(learning_rate=1e-3))
    for a, b in zip(other.model.parameters(), after_two, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    # The remote API's pair: from_state_with_optimizer rebuilds the client from what
    # save_state recorded (base model, no LoRA) and resumes exactly ...
    rebuilt = service.create_training_client_from_state_with_optimizer(path)
    assert rebuilt.base_model == "embedded:arithmetic" and rebuilt.lora is None
    rebuilt.forward_backward([datum], "cross_entropy")
    rebuilt.optim_step(AdamParams(learning_rate=1e-3))
    for a, b in zip(rebuilt.model.parameters(), after_two, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    # ... while load_state takes the weights and step but starts Adam afresh.
    weights_only = service.create_training_client_from_state(path)
    assert weights_only.step == 1 and not weights_only.optimizer.state
    for a, b in zip(weights_only.model.parameters(), other_at(path, service), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"ckpt/state' exists; pass overwrite=True to replace"):
        trainer.save_state(str(tmp_path / "ckpt"))


def other_at(path, service):
    """The weights saved in `path`, read back through load_state_with_optimizer."""
    reader = service.create_training_client("embedded:arithmetic")
    reader.load_state_with_optimizer(path)
    return list(reader.model.parameters())


def policy_datum(**overrides):
    inputs = {"target_tokens": [5, 6, 7], "logprobs": [0.0, -1.0, -1.0], "advantages": [0, 1, 1]}
    return Datum(ModelInput.from_ints([4, 5, 6]), {**inputs, **overrides})


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda t: t.forward([policy_datum(advantages=[0, 1])], "ppo"),
            r"datum 0: loss_fn_inputs\['advantages'\] has 2 values but model_input has 3 tokens",
        ),
        (
            lambda t: t.forward([policy_datum(target_tokens=[5, 6, 500])], "ppo"),
            r"loss_fn_inputs\['target_tokens'\] holds token 500, outside the vocabulary \[0, 98\)",
        ),
        (
            lambda t: t.forward([policy_datum()], "grpo"),
            r"loss_fn='grpo' is not valid; choose one of: cross_entropy, importance_sampling, "
            r"ppo, cispo, gspo, or an rlvr surrogate: clip",
        ),
        (
            lambda t: t.forward([policy_datum()], "ppo", {"clip_ratio": 0.2}),
            r"loss_fn_config key 'clip_ratio' is not valid for loss_fn='ppo'; "
            r"valid: clip_low_threshold, clip_high_threshold",
        ),
        (
            lambda t: t.forward([policy_datum()], "cross_entropy"),
            r"datum 0: loss_fn='cross_entropy' takes loss_fn_inputs \['target_tokens', 'weights'\]; "
            r"missing \['weights'\]",
        ),
        (
            lambda t: t.forward([policy_datum(advantages=[0, float("nan"), 1])], "ppo"),
            r"loss_fn_inputs\['advantages'\] holds nan; every value must be a finite number",
        ),
        (
            lambda t: t.optim_step(AdamParams(learning_rate=-1.0)),
            r"AdamParams.learning_rate=-1.0 is not valid; it must be in \[0, 1\]",
        ),
    ],
)
def test_errors_are_one_line(trainer, call, message):
    with pytest.raises(ValueError, match=message) as info:
        call(trainer)
    assert "\n" not in str(info.value)


def test_unknown_embedded_task_is_named(service):
    with pytest.raises(ValueError, match=r"base_model='embedded:algebra': unknown task 'algebra'"):
        service.create_training_client("embedded:algebra")


def test_a_resumed_script_samples_what_the_uninterrupted_one_would(service, tmp_path):
    prompt = ModelInput.from_ints([5, 6, 7])
    params = SamplingParams(max_tokens=6)
    trainer = service.create_training_client("embedded:arithmetic")
    trainer.save_weights_and_get_sampling_client("s1")  # an earlier sampler was drawn
    path = trainer.save_state(str(tmp_path / "ckpt")).result().path
    expected = trainer.save_weights_and_get_sampling_client("s2").sample(prompt, 4, params)
    resumed = service.create_training_client("embedded:arithmetic")
    resumed.load_state(path)
    got = resumed.save_weights_and_get_sampling_client("s2").sample(prompt, 4, params)
    tokens = [s.tokens for s in expected.result().sequences]
    assert [s.tokens for s in got.result().sequences] == tokens
