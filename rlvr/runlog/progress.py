"""A tqdm progress bar over training steps showing reward and held-out accuracy (with ETA),
and for multi-turn runs the episodes' turns and failed fraction; the warning a run whose
episodes mostly run out of tokens gets once."""

from __future__ import annotations

import sys

from tqdm import tqdm

BUDGET_WARNING = 0.5
"""The fraction of a step's episodes cut by the token budget past which a run is warned."""


class StepBar:
    def __init__(self, total: int, enabled: bool, desc: str, initial: int = 0) -> None:
        self._bar = tqdm(
            total=total,
            initial=initial,
            desc=desc,
            unit="step",
            disable=not enabled,
            file=sys.stderr,
            dynamic_ncols=True,
        )
        self._warned = False

    def update(self, metrics: dict[str, float], eval_accuracy: float) -> None:
        episodes = {}
        if "env/turns" in metrics:  # a multi-turn run: how its episodes go
            episodes = {
                "turns": f"{metrics['env/turns']:.2f}",
                "failed": f"{metrics.get('env/failed_frac', 0.0):.2f}",
            }
        self._bar.set_postfix(
            reward=f"{metrics.get('reward/mean', 0.0):.3f}",
            eval_acc=f"{eval_accuracy:.3f}",
            refill=int(metrics.get("rollout/refill_rounds", 0)),
            **episodes,
            refresh=False,
        )
        self._bar.update(1)
        self._warn_budget(metrics)

    def _warn_budget(self, metrics: dict[str, float]) -> None:
        """Once per run: most episodes ended at the token budget, not by answering."""
        cut = metrics.get("env/ended_budget", 0.0)
        if self._warned or cut <= BUDGET_WARNING:
            return
        self._warned = True
        tqdm.write(
            f"rlvr: warning: {cut:.0%} of this step's episodes ran out of tokens before they "
            f"ended (env/ended_budget): an episode's turns and observations share one "
            f"max_new_tokens; raise it (or lower episode.max_turns)",
            file=sys.stderr,
        )

    def close(self) -> None:
        self._bar.close()


def progress_bar(total: int, enabled: bool, desc: str = "train", initial: int = 0) -> StepBar:
    """A bar over `total` steps that starts at `initial` (a resumed run's finished steps)."""
    return StepBar(total, enabled, desc, initial)
