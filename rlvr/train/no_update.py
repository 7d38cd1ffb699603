"""Why a run has made no update: said once, early, instead of a run that "finishes"
having trained nothing (every group filtered out, every reward failed, or every
advantage exactly 0 so that no gradient reached the weights). It is printed
as the run's other notices are: one `rlvr: warning: …` line on stderr, above the progress
bar (`say`), not as a Python warning with a source line."""

from __future__ import annotations

import sys
from typing import Any

NO_UPDATE_STEPS = 5
"""A run whose first `min(NO_UPDATE_STEPS, steps)` steps all skipped the update says why."""


def due(step: int, steps: int, still_steps: int) -> bool:
    """At the step that decides it, every step so far changed no weight (its update
    skipped, or its backward skipped because every gradient was exactly 0)."""
    return step == min(NO_UPDATE_STEPS, steps) and still_steps == step


def explain(step: int, metrics: dict[str, float], recipe: Any, cfg: Any) -> str:
    """One message: what was skipped, what the last step's batch looked like, what to try."""
    if not metrics.get("train/update_skipped") and metrics.get("train/backward_skipped"):
        return (
            f"no gradient in the first {step} steps (train/backward_skipped = 1 each step): "
            f"every advantage was exactly 0, as rewards were equal within every group "
            f"(reward/mean {metrics.get('reward/mean', 0.0):.3f}, reward/zero_adv_frac "
            f"{metrics.get('reward/zero_adv_frac', 0.0):.3f}); a group-relative method learns "
            f"only from groups whose rewards differ: check the reward on a few completions "
            f"(rlvr show), or raise group_size or temperature, or warm-start the model"
        )
    responses = int(metrics.get("rollout/generated_responses", 0))
    failed = int(metrics.get("reward/failed_samples", 0))
    causes = []
    if failed:
        causes.append(
            f"reward functions failed on {failed} of {responses} responses and "
            f"reward_errors={cfg.reward_errors!r} leaves their groups out (see the warnings "
            f"above and reward/fn/<name>/<kind>)"
        )
    broken = metrics.get("env/failed_frac", 0.0)
    if broken:
        causes.append(
            f"the environment failed on {broken:.0%} of the episodes and their groups are left "
            f"out under episode.env_errors='drop' (env/failed_frac; the first failure is "
            f"printed above, and episode.env_errors: stop ends the run at it)"
        )
    if recipe.dynamic_sampling:
        key = recipe.dynamic_sampling_key
        causes.append(
            f"dynamic sampling keeps only groups whose {key} varies, and none did "
            f"(reward/accuracy {metrics.get('reward/accuracy', 0.0):.3f}, reward/mean "
            f"{metrics.get('reward/mean', 0.0):.3f} after {int(metrics.get('rollout/refill_rounds', 0))} "
            f"refill rounds)"
            + (
                "; with a reward function as the signal, try dynamic_sampling_key=reward"
                if key == "correct" and cfg.reward_funcs
                else ""
            )
        )
    if metrics.get("rollout/rejected_token_frac", 0.0) == 1.0:
        causes.append(
            "the rollout correction's rejection took out every token (rollout/"
            "rejected_token_frac = 1); widen [rc_lower, rc_upper] or raise rc_reject_max"
        )
    if recipe.zero_variance_filter:
        causes.append("the zero-variance filter dropped every group (rewards uniform within each)")
    if not causes:
        causes.append("every prompt group was left out of the batch")
    return (
        f"no policy update in the first {step} steps (train/update_skipped = 1 each step): "
        + "; ".join(causes)
    )


def say(text: str) -> None:
    """`text` as one notice line on stderr, written above the progress bar."""
    from tqdm import tqdm

    tqdm.write(f"rlvr: warning: {text}", file=sys.stderr)
