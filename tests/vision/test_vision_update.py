"""Image tokens in the update (issue 46), on a hand-built batch through the trainer's own
`policy_update`: they are context, never trained on and never counted by a normaliser;
the vision encoder learns only through the log-probs of policy tokens; and π_old computed
as the trainer computes it (`Rollout.forward_rows`) gives a ratio of exactly 1."""

from __future__ import annotations

import torch
from rounding_testlib import reorder_atol
from vision_testlib import TOK, images, small_vlm

from rlvr.algo.objective import PreparedBatch, step_weights
from rlvr.algo.recipes import Recipe
from rlvr.models import response_logprobs
from rlvr.train.records.rollout_record import Rollout
from rlvr.train.update import UpdateSettings, policy_update

RECIPE = Recipe(aggregation="token_mean")  # the normaliser: the step's policy tokens
SETTINGS = UpdateSettings(
    num_minibatches=1,
    ppo_epochs=1,
    micro_batch_size=4,
    max_grad_norm=0.0,  # no clipping: the gradient as the loss gives it
    max_new_tokens=3,
    temperature=1.0,
    pad_id=0,
    log_entropy=False,
)


def _batch(pixels: torch.Tensor) -> Rollout:
    """Two image prompts, two responses each: 2, 3, 1 and 3 tokens (9 policy tokens; the
    prompts hold 4·9 = 36 image placeholders)."""
    prompts = [TOK.encode_images("<image>N:", p) for p in pixels]
    responses = torch.tensor([[20, 21, 0], [22, 23, 1], [24, 0, 0], [25, 26, 1]])
    mask = (torch.arange(3)[None] < torch.tensor([2, 3, 1, 3])[:, None]).float()
    zeros = torch.zeros(4)
    return Rollout(
        prompt_ids=[prompts[0], prompts[0], prompts[1], prompts[1]],
        response_ids=responses,
        response_mask=mask,
        sampler_logprobs=torch.zeros(4, 3),
        truncated=torch.zeros(4, dtype=torch.bool),
        group_ids=torch.tensor([0, 0, 1, 1]),
        problem_uids=["a", "a", "b", "b"],
        texts=[""] * 4,
        correct=zeros,
        formatted=zeros,
        rewards=zeros,
    )


def _update(model, rollout: Rollout, row_advantages: list[float]) -> dict[str, float]:
    """One `policy_update` with SGD at lr 0: the weights stay, the gradient is kept."""
    mask = rollout.response_mask
    advantages = torch.tensor(row_advantages)[:, None] * mask
    keep = torch.ones(4, dtype=torch.bool)
    weights, _ = step_weights(RECIPE, mask, rollout.group_ids, rollout.correct, keep, 3)
    prepared = PreparedBatch(keep, torch.zeros(4), mask, advantages, weights, None, None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    return policy_update(model, optimizer, RECIPE, rollout, prepared, SETTINGS)


def _vision_grad(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.model.vision.parameters()])


def test_the_normaliser_counts_policy_tokens_only_and_the_ratio_is_one():
    pixels = images(2, seed=1)
    perturbed = pixels.clone()
    perturbed[0, 0, :, :4, :4] += 0.5  # one patch of image 0
    for shown in (pixels, perturbed):
        model, rollout = small_vlm(), _batch(shown)
        rollout.old_logprobs = rollout.forward_rows(  # π_old as Trainer._logprobs computes it
            lambda p, y, m, model=model: response_logprobs(model, p, y, m, 0),
            SETTINGS.micro_batch_size,
        )
        metrics = _update(model, rollout, [1.0, -1.0, 2.0, 0.0])
        # ρ = 1 on every token (the trainer's forward of the same micro-batch, same pixels),
        # so the clipped surrogate is −Â per token and token_mean divides by the 9 policy
        # tokens: L = −(2·1 + 3·(−1) + 1·2 + 3·0) / 9 = −1/9. Counting the 36 image
        # placeholders too would give −1/45; the prompts' text as well, −1/65.
        assert metrics["clip/ratio_abs_dev"] == 0.0 and metrics["clip/ratio_mean"] == 1.0
        # A float32 sum of 9 terms with Σ|x| = 8/9: at most 9·ε·(8/9) = 9.5e-7 off.
        assert abs(metrics["loss/policy"] - (-1 / 9)) <= reorder_atol(9, 8 / 9)


def test_the_vision_encoder_learns_through_policy_tokens_only():
    pixels = images(2, seed=1)
    model = small_vlm()
    _update(model, _batch(pixels), [0.0, 0.0, 1.0, -1.0])
    only_image_1 = _vision_grad(model)
    assert only_image_1.abs().max() > 0  # the image conditions the responses it prompted
    # Â = 0 on image 0's rows: its pixels then reach no gradient at all.
    moved = pixels.clone()
    moved[0] += 0.5
    model = small_vlm()
    _update(model, _batch(moved), [0.0, 0.0, 1.0, -1.0])
    assert torch.equal(_vision_grad(model), only_image_1)
