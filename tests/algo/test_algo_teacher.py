"""On-policy distillation's teacher term (rlvr/algo/teacher.py) through prepare_batch and
policy_loss: hand-worked advantages, β = 0 as the base recipe, observation tokens inert."""

import dataclasses
import math
import re

import pytest
import torch
from algo_testlib import loss_and_grad, padded, prepare, random_batch

from rlvr.algo import get_recipe, policy_loss, prepare_batch
from rlvr.algo.teacher import reverse_kl_metrics, teacher_advantages

F64 = torch.float64
# One group of two responses (3 and 2 tokens), rewards 1 and 0, on-policy (old = logπ).
OLD = padded([[-0.5, -1.0, -0.2], [-0.7, -0.4]])
TEACHER = padded([[-0.3, -2.0, -0.2], [-0.2, -1.4]], pad=-50.0)
MASK = padded([[1, 1, 1], [1, 1]])


def prepared(recipe, teacher=TEACHER, mask=MASK):
    return prepare_batch(
        recipe,
        rewards=torch.tensor([1.0, 0.0], dtype=F64),
        correct=torch.tensor([1.0, 0.0], dtype=F64),
        truncated=torch.tensor([False, False]),
        response_mask=mask,
        group_ids=torch.tensor([0, 0]),
        max_new_tokens=3,
        old_logprobs=OLD,
        teacher_logprobs=teacher,
    )


def test_opd_advantage_hand_worked():
    # gap = log π_S − log π_T: row 0: −0.5+0.3 = −0.2, −1.0+2.0 = 1.0, 0; row 1: −0.5, 1.0.
    # A = −β·gap with β = 1: (0.2, −1.0, 0), (0.5, −1.0); the padding (teacher −50) gives 0.
    out = prepared(get_recipe("opd"))
    torch.testing.assert_close(out.advantages, padded([[0.2, -1.0, 0.0], [0.5, -1.0]]))
    # β = 2: every advantage doubles.
    doubled = prepared(get_recipe("opd", teacher_kl_coef=2.0)).advantages
    torch.testing.assert_close(doubled, 2 * out.advantages)


def test_opd_loss_and_gradient_hand_worked():
    # reinforce on-policy, token_mean over 5 tokens: L = −(1/5)·Σ Â·logπ
    # = −(1/5)·(0.2·−0.5 + −1·−1.0 + 0 + 0.5·−0.7 + −1·−0.4) = −(1/5)·0.95 = −0.19;
    # ∂L/∂logπ_t = −Â_t/5: (−0.04, 0.2, 0), (−0.1, 0.2).
    recipe = get_recipe("opd")
    out = prepared(recipe)
    logprobs = OLD.clone().requires_grad_(True)
    loss, _ = policy_loss(
        recipe,
        logprobs=logprobs,
        old_logprobs=OLD,
        advantages=out.advantages,
        loss_weights=out.loss_weights,
        response_mask=out.response_mask,
    )
    loss.backward()
    assert math.isclose(float(loss.detach()), -0.19, abs_tol=1e-12)
    torch.testing.assert_close(logprobs.grad, padded([[-0.04, 0.2, 0.0], [-0.1, 0.2]]))


def test_mixed_with_the_outcome_advantage_hand_worked():
    # group_norm: rewards (1, 0), mean 0.5, unbiased std √0.5 → Â = ±0.5/(√0.5 + 1e-6).
    # Â + λ·A_T with λ = 0.5: row 0: A + (0.1, −0.5, 0); row 1: −A + (0.25, −0.5).
    recipe = get_recipe("grpo", teacher_kl_coef=1.0, teacher_weight=0.5)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    expected = padded([[a + 0.1, a - 0.5, a], [-a + 0.25, -a - 0.5]])
    torch.testing.assert_close(prepared(recipe).advantages, expected)


@pytest.mark.parametrize("name", ["grpo", "dapo", "ppo", "cispo", "gspo", "rloo"])
def test_beta_zero_is_the_base_recipe(name):
    # With teacher log-probs present, β = 0 gives the base recipe's advantages, loss and
    # gradient exactly (the teacher is never read); β > 0 adds exactly λ·A_T.
    batch = random_batch(3, [3, 2], [4, 2, 5, 1, 3], correct=[1, 0, 1, 1, 0])
    no_teacher = dataclasses.replace(batch, teacher_logprobs=None)
    base = get_recipe(name)
    plain = prepare(base, no_teacher)
    zero = prepare(get_recipe(name, teacher_kl_coef=0.0), batch)
    assert torch.equal(plain.advantages, zero.advantages)
    loss_plain, grad_plain = loss_and_grad(base, no_teacher, plain)
    loss_zero, grad_zero = loss_and_grad(base, batch, zero)
    assert loss_plain == loss_zero and torch.equal(grad_plain, grad_zero)
    mixed = prepare(get_recipe(name, teacher_kl_coef=0.7, teacher_weight=0.5), batch)
    term = teacher_advantages(
        batch.old_logprobs, batch.teacher_logprobs, plain.response_mask, beta=0.7
    )
    assert term.abs().sum() > 0
    torch.testing.assert_close(mixed.advantages, plain.advantages + 0.5 * term)


def test_observation_tokens_get_no_teacher_term():
    # Row 1's middle token is an observation (mask 0); its teacher "log-prob" is −inf and
    # NaN would follow from any arithmetic on it: the advantage there is exactly 0.
    old = padded([[-0.5, -1.0, -0.2], [-0.7, -3.0, -0.4]])
    teacher = padded([[-0.3, -2.0, -0.2], [-0.2, -math.inf, -1.4]])
    mask = padded([[1, 1, 1], [1, 0, 1]])
    adv = teacher_advantages(old, teacher, mask, beta=1.0)
    torch.testing.assert_close(adv, padded([[0.2, -1.0, 0.0], [0.5, 0.0, -1.0]]))
    assert adv[1, 1] == 0.0


def test_missing_teacher_logprobs_is_an_error():
    with pytest.raises(ValueError, match="teacher_logprobs"):
        prepared(get_recipe("opd"), teacher=None)


def test_reverse_kl_metrics_hand_worked():
    # k = S − T on valid tokens: row 0 (correct): −0.2, 1.0, 0; row 1 (wrong): −0.5, 1.0.
    # mean 1.3/5 = 0.26; population variance Σ(k − 0.26)²/5 = (0.2116 + 0.5476 + 0.0676
    # + 0.5776 + 0.5476)/5 = 0.3904; per sequence (0.8 + 0.5)/2 = 0.65; correct 0.8/3,
    # wrong 0.5/2 = 0.25.
    m = reverse_kl_metrics(OLD, TEACHER, MASK, torch.tensor([1.0, 0.0]))
    assert m == pytest.approx(
        {
            "distill/reverse_kl": 0.26,
            "distill/reverse_kl_std": math.sqrt(0.3904),
            "distill/reverse_kl_seq": 0.65,
            "distill/reverse_kl_correct": 0.8 / 3,
            "distill/reverse_kl_wrong": 0.25,
        }
    )
    only_correct = reverse_kl_metrics(OLD, TEACHER, MASK, torch.tensor([1.0, 1.0]))
    assert "distill/reverse_kl_wrong" not in only_correct
    assert reverse_kl_metrics(OLD, TEACHER, torch.zeros_like(MASK), torch.ones(2)) == {}


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"teacher_kl_coef": 0.0}, "advantage='none' with teacher_kl_coef=0"),
        ({"teacher_kl_coef": -1.0}, "teacher_kl_coef must be ≥ 0"),
        ({"teacher_weight": 0.0}, "teacher_weight must be > 0"),
    ],
)
def test_bad_teacher_fields_are_named(overrides, needle):
    with pytest.raises(ValueError, match=re.escape(needle)):
        get_recipe("opd", **overrides)


def test_a_teacher_weight_without_a_teacher_is_refused():
    with pytest.raises(ValueError, match=r"teacher_weight=0\.5 weighs the teacher's term"):
        get_recipe("grpo", teacher_weight=0.5)
