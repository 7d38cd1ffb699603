"""A tqdm progress bar over training steps showing reward and held-out accuracy (with ETA)."""

from __future__ import annotations

import sys

from tqdm import tqdm


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

    def update(self, metrics: dict[str, float], eval_accuracy: float) -> None:
        self._bar.set_postfix(
            reward=f"{metrics.get('reward/mean', 0.0):.3f}",
            eval_acc=f"{eval_accuracy:.3f}",
            refill=int(metrics.get("rollout/refill_rounds", 0)),
            refresh=False,
        )
        self._bar.update(1)

    def close(self) -> None:
        self._bar.close()


def progress_bar(total: int, enabled: bool, desc: str = "train", initial: int = 0) -> StepBar:
    """A bar over `total` steps that starts at `initial` (a resumed run's finished steps)."""
    return StepBar(total, enabled, desc, initial)
