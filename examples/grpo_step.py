"""One GRPO step, end to end, with the library's own functions called in order.

The map a reader follows into the code: each line below is what `rlvr.train.loop.Trainer.
train_step` does for the `grpo` recipe (docs/algorithms.md §1–5), without the loop's
generality (dynamic sampling, micro-batches, minibatches, critics, metrics). The Trainer
only supplies the components (model, engine, task, prompt pool, RNG, optimizer), so the
step sees exactly the batch the loop would. Run: `python examples/grpo_step.py`; tests/
test_example_grpo_step.py checks that its loss equals the loop's first-step `loss/policy`.
"""

from __future__ import annotations

import torch

from rlvr.algo.advantages.estimators import group_norm
from rlvr.algo.policy.aggregation import aggregate, aggregation_weights
from rlvr.algo.policy.ratios import token_ratio
from rlvr.algo.policy.surrogates import clip
from rlvr.algo.regularizers import kl_k3
from rlvr.models import response_logprobs
from rlvr.rewards import task_rewards
from rlvr.train.config import resolve_config
from rlvr.train.loop import Trainer

# A tiny run on the embedded model: 4 prompts × 4 responses.
CONFIG = {
    "recipe": "grpo",
    "task_options": {"digits": 2, "ops": "+"},
    "prompts_per_step": 4,
    "group_size": 4,
    "max_new_tokens": 14,
    "progress": False,
}


def grpo_step(trainer: Trainer) -> dict[str, float]:
    """Sample → verify → advantages → ratio → surrogate → aggregation → loss → step."""
    recipe, cfg, model = trainer.recipe, trainer.cfg, trainer.model
    # 1. Sample G responses per prompt with the rollout engine.
    problems = trainer.pool.next(cfg.prompts_per_step)
    gen = trainer.engine.generate([p.prompt for p in problems], trainer.params, trainer.generator)
    # 2. Verify each response; the reward is its correctness (no reward model here).
    answered = [problems[i] for i in gen.prompt_index.tolist()]
    verdicts = [trainer.task.verify(p, text) for p, text in zip(answered, gen.texts, strict=True)]
    rewards = torch.tensor(task_rewards(trainer.task, answered, gen.texts, verdicts))  # (N,)
    group_ids, mask = gen.prompt_index, gen.response_mask  # (N,), (N, T)
    # 3. Group-normalized advantage Â_i, the same on every token of response i.
    advantages = (group_norm(rewards.double(), group_ids)[:, None] * mask.double()).float()
    # 4. log π of the sampled tokens (with gradient), π_old = π (on-policy), π_ref.
    pad, temperature = trainer.tokenizer.pad_token_id, cfg.temperature

    def logprobs_of(policy: torch.nn.Module) -> torch.Tensor:
        return response_logprobs(
            policy, gen.prompt_ids, gen.response_ids, mask, pad, temperature, recipe.fp32_head
        )

    logprobs = logprobs_of(model)  # (N, T)
    with torch.no_grad():
        ref_logprobs = logprobs_of(trainer.reference)
    # 5. Ratio ρ = π/π_old and the clipped surrogate ℓ (N, T).
    ratio = token_ratio(logprobs, logprobs.detach(), mask)
    surrogate = clip(ratio, advantages, logprobs, recipe.params)
    # 6. Aggregation weights from the batch's counts: (1/N_seq)·(1/|y_i|).
    weights = aggregation_weights(recipe.aggregation, mask, group_ids, cfg.max_new_tokens)
    # 7. Loss = Σ w·ℓ + β·Σ w·k3, then one clipped optimizer step.
    policy_loss = aggregate(surrogate.loss, weights)
    kl = aggregate(kl_k3(logprobs, ref_logprobs), weights)
    loss = policy_loss + recipe.kl_coef * kl
    trainer.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    limit = cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")  # 0: no clipping
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), limit)
    trainer.optimizer.step()
    return {"loss/policy": policy_loss.item(), "loss/kl": kl.item(), "grad_norm": float(grad_norm)}


def main() -> tuple[Trainer, dict[str, float]]:
    # The Trainer puts the policy in its RL mode (`dropout_off`: dropout off, gradients
    # on), as the loop runs every forward; two forwards of the same weights then agree.
    trainer = Trainer(resolve_config(CONFIG))
    result = grpo_step(trainer)
    print(" ".join(f"{k}={v:.9g}" for k, v in result.items()))
    return trainer, result


if __name__ == "__main__":
    main()
