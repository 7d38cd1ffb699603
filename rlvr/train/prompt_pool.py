"""The training prompt pool: a seeded data order, running pass rates and prompt retirement.

All of its state is in `state_dict()`, so a checkpoint can resume the data order exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from rlvr.tasks import Problem


class PoolExhausted(RuntimeError):
    """Every training prompt was retired; the run cannot draw another batch."""


@dataclass
class PromptPool:
    """Draws prompts epoch by epoch in a seeded order, skipping retired ones.

    Retirement (ScaleRL, arXiv 2510.13786, §3.2 "no positive resampling"): a prompt whose
    running pass rate (correct / sampled over all its groups so far) reaches
    `retire_threshold` leaves the pool for good.
    """

    problems: list[Problem]
    seed: int
    retire_threshold: float | None = None
    epoch: int = 0
    position: int = 0
    passes: dict[str, list[int]] = field(default_factory=dict)  # uid → [correct, sampled]
    retired: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if not self.problems:
            raise ValueError("the prompt pool is empty: the task's train split has no problems")
        self._order = self._shuffled(self.epoch)

    def _shuffled(self, epoch: int) -> list[int]:
        order = list(range(len(self.problems)))
        random.Random(f"{self.seed}/{epoch}").shuffle(order)
        return order

    @property
    def active_size(self) -> int:
        return len(self.problems) - len(self.retired)

    def next(self, count: int) -> list[Problem]:
        """The next `count` active prompts in data order, wrapping into a new epoch."""
        if self.active_size == 0:
            raise PoolExhausted(
                f"every one of the {len(self.problems)} training prompts is retired "
                f"(pass rate ≥ {self.retire_threshold}); raise retire_threshold or the train size"
            )
        drawn: list[Problem] = []
        while len(drawn) < count:
            if self.position >= len(self._order):
                self.epoch += 1
                self.position = 0
                self._order = self._shuffled(self.epoch)
            problem = self.problems[self._order[self.position]]
            self.position += 1
            if problem.uid not in self.retired:
                drawn.append(problem)
        return drawn

    def record(self, uid: str, correct: int, sampled: int) -> bool:
        """Add a group's outcome; returns True if the prompt was retired by it."""
        stats = self.passes.setdefault(uid, [0, 0])
        stats[0] += correct
        stats[1] += sampled
        if self.retire_threshold is None or uid in self.retired:
            return False
        if stats[0] / stats[1] >= self.retire_threshold:
            self.retired.add(uid)
            return True
        return False

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "position": self.position,
            "passes": {k: list(v) for k, v in self.passes.items()},
            "retired": sorted(self.retired),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
        self.passes = {k: list(v) for k, v in state["passes"].items()}
        self.retired = set(state["retired"])
        self._order = self._shuffled(self.epoch)
