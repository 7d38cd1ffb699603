"""The trainer on the shapes task (issue 46): `model: embedded` becomes the tiny VLM,
warm-started on the pictures; a GRPO step samples image prompts, keeps their pixels in
the record and trains on them, the sampler and the trainer agreeing on every policy token;
the checkpoint reloads the same weights."""

from __future__ import annotations

import torch
from vision_testlib import vlm_logprob_atol

from rlvr.train import Trainer
from rlvr.train.config import resolve_config
from rlvr.vision import ImagePrompt, TinyVLM


def test_a_grpo_step_on_the_tiny_vlm(tmp_path):
    trainer = Trainer(
        resolve_config(
            {
                "recipe": "dr_grpo",  # no reference; π_old through forward_rows off policy
                "task": "shapes",
                "warm_target": 0.3,  # the demo's warm start (cached for the next run)
                "prompts_per_step": 8,
                "group_size": 4,
                "num_minibatches": 2,  # off policy: π_old is computed before the update
                "eval_size": 8,
                "progress": False,
                "out": str(tmp_path / "run"),
            }
        )
    )
    assert isinstance(trainer.model, TinyVLM) and trainer.model_info["dev_accuracy"] >= 0.3
    before = [p.detach().clone() for p in trainer.model.model.vision.parameters()]
    metrics = trainer.train_step()
    rollout = trainer.last_batch[0].rollout
    assert len(rollout) == 32 and all(isinstance(p, ImagePrompt) for p in rollout.prompt_ids)
    # The sampler and π_old (Trainer._annotate) saw the same pixels: the log-probs of every
    # sampled token agree within the reordering bound (vision_testlib.py).
    mask = rollout.loss_mask > 0
    gap = (rollout.old_logprobs - rollout.sampler_logprobs)[mask].abs().max()
    assert gap <= vlm_logprob_atol(trainer.model)
    # Some group is informative (a partial pass rate), so the pictures' encoder is trained.
    assert metrics["reward/zero_adv_frac"] < 1 and metrics["train/backward_skipped"] == 0
    after = list(trainer.model.model.vision.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))
    trainer.model.save_pretrained(tmp_path / "saved")
    loaded = TinyVLM.from_pretrained(tmp_path / "saved")
    saved = loaded.state_dict()
    assert all(torch.equal(w, saved[k]) for k, w in trainer.model.state_dict().items())
