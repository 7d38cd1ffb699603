"""A GRPO step written against the service equals the same step through rlvr's own loss.

The service side: sample G responses per prompt → verify → group-normalised advantages Â_i
→ datums whose advantages are Â_i·w_i, with w_i = 1/(N_seq·|y_i|) (rlvr's
`seq_mean_token_mean` weights, folded in because the service's losses are plain sums) →
forward_backward("importance_sampling") → optim_step(Adam).

rlvr's side, on the same batch from a copy of the same weights: `policy_loss` with the recipe
choices that are that math — advantage group_norm, ratio token, surrogate reinforce
(−sg(ρ)·Â·logπ has importance_sampling's gradient ρ·Â·∇logπ), aggregation
seq_mean_token_mean, no KL, no TIS — and π_old = the sampler's log-probs (the remote API's
ratio is π/π_sampler), then torch AdamW with the same hyper-parameters.
Same for ppo ↔ surrogate clip (ε 0.2 ↔ thresholds 0.8/1.2).

The two forwards split prompt and response differently (the service sees one sequence per
datum), so gradients agree up to float32 reduction order (measured: 1.6e-7 against a
largest gradient of 0.2). Adam's first step is lr·g/(|g| + ε), whose slope lr/ε magnifies
such a difference on a near-zero gradient: with lr = 1e-4 and ε = 1e-6 it stays below
1e-6 (measured 3e-6 at lr = 1e-3, 1.1e-5 with ε = 1e-8), so the step uses those and the
gradients are compared first.
"""

from __future__ import annotations

import copy

import pytest
import torch
from rounding_testlib import (
    assert_first_adamw_step_equal,
    assert_within,
    forward_terms,
    reorder_atol,
)

from rlvr.algo.advantages.estimators import group_norm
from rlvr.algo.loss import policy_loss
from rlvr.algo.policy.aggregation import aggregation_weights
from rlvr.algo.recipes import Recipe
from rlvr.models.logprobs import response_logprobs
from rlvr.service import AdamParams, Datum, ModelInput, SamplingParams, tokens_of
from rlvr.tasks import make_task

ADAM = AdamParams(learning_rate=1e-4, beta1=0.9, beta2=0.999, eps=1e-6)
GROUP = 4


def sampled_batch(trainer):
    """2 prompts × 4 responses from the service's sampler, their rewards and Â."""
    task = make_task("arithmetic")
    problems = task.problems("train")[:2]
    sampler = trainer.save_weights_and_get_sampling_client("step-0")
    params = SamplingParams(max_tokens=14, temperature=1.0, seed=3)
    rows = []  # (prompt ids, sampled sequence, reward, group id)
    for g, problem in enumerate(problems):
        prompt = tokens_of(trainer.get_tokenizer(), problem.prompt)
        for seq in sampler.sample(prompt, GROUP, params).result().sequences:
            text = trainer.get_tokenizer().decode(seq.tokens)
            reward = float(task.verify(problem, text).correct)
            rows.append((prompt.to_ints(), seq, reward, g))
    rewards = torch.tensor([r[2] for r in rows], dtype=torch.float64)
    group_ids = torch.tensor([r[3] for r in rows])
    return rows, group_norm(rewards, group_ids).float(), group_ids


def response_tensors(rows, pad):
    width = max(len(r[1].tokens) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros(len(rows), width)
    sampler = torch.zeros(len(rows), width)
    for i, (_, seq, _, _) in enumerate(rows):
        n = len(seq.tokens)
        ids[i, :n], mask[i, :n], sampler[i, :n] = (
            torch.tensor(seq.tokens),
            1.0,
            torch.tensor(seq.logprobs),
        )
    return ids, mask, sampler


def service_step(trainer, rows, advantages, weights, loss_fn):
    datums = []
    for i, (prompt, seq, _, _) in enumerate(rows):
        full, n_prompt, n = prompt + seq.tokens, len(prompt), len(seq.tokens)
        scaled = (advantages[i] * weights[i, :n]).tolist()  # Â_i·w_{i,t} on the response
        datums.append(
            Datum(
                ModelInput.from_ints(full[:-1]),
                {
                    "target_tokens": full[1:],
                    "logprobs": [0.0] * (n_prompt - 1) + seq.logprobs,
                    "advantages": [0.0] * (n_prompt - 1) + scaled,
                },
            )
        )
    trainer.forward_backward(datums, loss_fn).result()
    grads = [p.grad.clone() for p in trainer.model.parameters()]
    trainer.optim_step(ADAM).result()
    return grads


def rlvr_step(model, rows, advantages, group_ids, pad, recipe):
    ids, mask, sampler = response_tensors(rows, pad)
    logprobs = response_logprobs(model, [r[0] for r in rows], ids, mask, pad, 1.0, True)
    weights = aggregation_weights(recipe.aggregation, mask, group_ids)
    loss, _ = policy_loss(
        recipe,
        logprobs=logprobs,
        old_logprobs=sampler,
        advantages=advantages[:, None] * mask,
        loss_weights=weights,
        response_mask=mask,
    )
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=ADAM.learning_rate,
        betas=(ADAM.beta1, ADAM.beta2),
        eps=ADAM.eps,
        weight_decay=0.0,
    )
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    optimizer.step()
    return grads


@pytest.mark.parametrize(
    ("loss_fn", "surrogate"), [("importance_sampling", "reinforce"), ("ppo", "clip")]
)
def test_service_grpo_step_equals_rlvrs_loss(service, loss_fn, surrogate):
    trainer = service.create_training_client("embedded:arithmetic")
    reference = copy.deepcopy(trainer.model)
    before = [p.detach().clone() for p in reference.parameters()]
    pad = trainer.get_tokenizer().pad_token_id
    rows, advantages, group_ids = sampled_batch(trainer)
    assert 0 < sum(r[2] for r in rows) < len(rows)  # some Â ≠ 0: the step moves the weights
    recipe = Recipe(surrogate=surrogate, aggregation="seq_mean_token_mean", kl=None)
    _, mask, _ = response_tensors(rows, pad)
    weights = aggregation_weights(recipe.aggregation, mask, group_ids)
    grads = service_step(trainer, rows, advantages, weights, loss_fn)
    expected = rlvr_step(reference, rows, advantages, group_ids, pad, recipe)
    # Both sides sum a weight's gradient over every response token and through the model's
    # chain of sums, in other orders (batch shapes differ): n·ε·max|g| apart at most.
    grad_terms = mask.numel() + forward_terms(reference.config)
    for i, (a, b) in enumerate(zip(grads, expected, strict=True)):
        assert_within(a, b, reorder_atol(grad_terms, b.abs().max().item()), f"grad {i}:")
    moved = max(
        (a - b).abs().max().item() for a, b in zip(trainer.model.parameters(), before, strict=True)
    )
    assert moved > 5e-5  # Adam's first step moves a weight by up to lr
    # One AdamW step from equal weights on gradients within that bound: near g = 0 AdamW
    # amplifies the difference (rounding_testlib.adamw_first_step_atol).
    weights_after = [p.detach() for p in trainer.model.parameters()]
    assert_first_adamw_step_equal(
        weights_after, reference, ADAM.learning_rate, grad_terms, eps=ADAM.eps
    )
