"""With top_p < 1 the sampler reports the log-probs of the renormalised nucleus: the
distribution it actually sampled from, which TIS corrects toward (issue 9)."""

import math

import torch
from rounding_testlib import logprob_atol

from rlvr.models import CharTokenizer, build_tiny_policy, response_logprobs, tiny_qwen2_config
from rlvr.rollout import HFEngine, SamplingParams, nucleus_log_probs


def test_nucleus_log_probs_by_hand():
    # p = (0.15, 0.5, 0.05, 0.3), top_p = 0.79: the nucleus is {0.5, 0.3} (0.5 < 0.79 ≤ 0.8),
    # mass 0.8 → p̃ = (0, 0.5/0.8, 0, 0.3/0.8) = (0, 0.625, 0, 0.375).
    log_p = torch.tensor([[0.15, 0.5, 0.05, 0.3]]).log()
    out = nucleus_log_probs(log_p, 0.79)
    assert out[0, 0] == -math.inf and out[0, 2] == -math.inf
    torch.testing.assert_close(out[0, [1, 3]].exp(), torch.tensor([0.625, 0.375]))
    assert nucleus_log_probs(log_p, 1.0) is log_p


def test_sampler_reports_renormalised_nucleus_log_probs():
    # Equivalence with the trainer: each reported log-prob is log p(y_t) − log(nucleus mass),
    # the nucleus recomputed from the trainer's full distribution at that position.
    tokenizer = CharTokenizer()
    model = build_tiny_policy(tiny_qwen2_config(tokenizer.vocab_size), seed=0)
    engine = HFEngine(model, tokenizer)
    params = SamplingParams(group_size=8, temperature=0.7, top_p=0.9, max_new_tokens=10)
    gen = engine.generate(["Q: 1+2=? A:"], params, torch.Generator().manual_seed(0))
    full = response_logprobs(
        model, gen.prompt_ids, gen.response_ids, gen.response_mask, 0, temperature=0.7
    )
    mask = gen.response_mask > 0
    # The sampler's decode and the trainer's forward add in other orders: their log-probs
    # of logits / 0.7 agree to τ / 0.7 (rounding_testlib.logprob_atol).
    tau = logprob_atol(model.config) / 0.7
    # The nucleus keeps some mass away: at least one reported log-prob is higher by more
    # than rounding (a nucleus of mass ≤ 0.9 raises it by −log 0.9 = 0.105).
    assert (gen.sampler_logprobs[mask] > full[mask] + tau).any()
    assert (gen.sampler_logprobs[mask] >= full[mask] - tau).all()
    expected = _nucleus_from_trainer(model, gen, tokenizer, 0.7, 0.9)
    torch.testing.assert_close(gen.sampler_logprobs[mask], expected[mask], atol=tau, rtol=0)


def _nucleus_from_trainer(model, gen, tokenizer, temperature, top_p):
    """Reference: a full forward per response, nucleus log-probs at every position."""
    out = torch.zeros_like(gen.sampler_logprobs)
    with torch.no_grad():
        for b in range(len(gen.texts)):
            n = int(gen.response_lengths[b])
            ids = gen.prompt_ids[b] + gen.response_ids[b, :n].tolist()
            logits = model(torch.tensor([ids])).logits[0].float() / temperature
            steps = logits[len(gen.prompt_ids[b]) - 1 : len(ids) - 1]  # (n, V)
            nucleus = nucleus_log_probs(steps.log_softmax(-1), top_p)
            out[b, :n] = nucleus.gather(-1, gen.response_ids[b, :n, None])[:, 0]
    return out
