"""What a task is: problems in seeded, disjoint splits, and a verifier that never raises.

A ``Task`` hands out ``Problem`` records (prompt with the template applied, the
reference answer, and an ideal completion for a supervised warm start) and scores
completions with ``verify``, which turns any failure inside ``check`` into a
``Verdict`` instead of an exception. ``SyntheticTask`` adds the seeded generator
shared by the synthetic families (arithmetic, countdown, worked).
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, NamedTuple

from rlvr.checks import check_int, is_int
from rlvr.verify import Verdict, safe_verify

SPLITS = ("train", "dev", "eval")
BUDGET_SLACK = 4
"""Tokens a task's default budget leaves after its longest reference answer and EOS: room
for a near-miss to finish, and for a soft overlong ramp of up to 4 tokens (DAPO's default
`overlong_cache`) to start only after every correct answer has ended."""


@dataclass(frozen=True)
class Problem:
    """One prompt and what a verifier needs to score completions of it."""

    uid: str
    """Stable id, e.g. ``"arithmetic/train/17"``."""
    prompt: str
    """Full text given to the model, template applied, e.g. ``"Q: 37+85=? A:"``."""
    answer: str
    """Canonical reference answer, e.g. ``"122"``."""
    target: str
    """Ideal completion for a supervised warm start, e.g. ``" \\boxed{122}"``."""


class Task(ABC):
    """A family of verifiable problems: prompts, a prompt template and a verifier."""

    name: str = "task"
    verify_timeout_s: float = 1.0
    episode_budgets: Any = None
    """`rlvr.envs.EpisodeBudgets` of a multi-turn task, whose `environment(problem)` answers
    the policy's turns (rlvr/rollout/episodes.py); None: one turn, no environment."""
    loads_data: bool = False
    """Problems come from files or the hub, read on first use: checks that need them (such
    as the eval split's size) wait until the trainer loads them, not config validation."""

    @abstractmethod
    def problems(self, split: str) -> list[Problem]:
        """The problems of ``split`` (one of ``SPLITS``), the same on every call."""

    @abstractmethod
    def check(self, problem: Problem, completion: str) -> Verdict:
        """Score a completion; may raise. Callers use ``verify``."""

    @property
    @abstractmethod
    def alphabet(self) -> str:
        """Every character that can appear in a prompt or target, sorted, no repeats."""

    def split_size(self, split: str) -> int:
        """How many problems ``split`` holds."""
        return len(self.problems(split))

    @property
    @abstractmethod
    def longest_target_chars(self) -> int:
        """An upper bound on the characters of any problem's ideal completion (``target``)."""

    @property
    def default_max_new_tokens(self) -> int:
        """The response budget used when none is configured: the longest reference answer,
        its EOS and ``BUDGET_SLACK``. Counted in characters, which is exact for the
        embedded character tokenizer and an upper bound for subword tokenizers."""
        return self.longest_target_chars + 1 + BUDGET_SLACK

    def environment(self, problem: Problem) -> Any:
        """A fresh `rlvr.envs.Environment` for one episode of `problem` (multi-turn tasks,
        whose `episode_budgets` is set)."""
        raise NotImplementedError(f"task {self.name!r} is single-turn: it has no environment")

    def verify(self, problem: Problem, completion: str) -> Verdict:
        """Score a completion; any exception or time-out becomes a failed Verdict."""
        return safe_verify(self.check, problem, completion, timeout_s=self.verify_timeout_s)


class Draft(NamedTuple):
    """A sampled problem before it gets a split and an id."""

    key: Hashable
    """Identity of the problem's content; two drafts with equal keys are the same problem
    (so a key is canonical: ``37+85`` and ``85+37`` share one), kept in one split at most."""
    prompt: str
    answer: str
    target: str


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid splits are {', '.join(SPLITS)}")


def check_size(field: str, value: object) -> int:
    return check_int(field, value, low=0)


class SyntheticTask(Task):
    """A task whose problems come from a generator seeded by ``seed`` alone.

    Problems are drawn from one ``random.Random(seed)`` stream and deduplicated by
    content key; the eval split is drawn first, then dev, then train, so eval and dev
    do not change when ``train_size`` does, and no content appears in two splits.
    """

    def __init__(self, seed: int, train_size: int, dev_size: int, eval_size: int) -> None:
        if not is_int(seed):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        self.seed = seed
        self.sizes = {
            "eval": check_size("eval_size", eval_size),
            "dev": check_size("dev_size", dev_size),
            "train": check_size("train_size", train_size),
        }
        self._splits: dict[str, list[Problem]] | None = None

    def split_size(self, split: str) -> int:
        check_split(split)
        return self.sizes[split]  # without drawing the problems

    @abstractmethod
    def sample(self, rng: random.Random) -> Draft:
        """Draw one problem using only ``rng``."""

    def problems(self, split: str) -> list[Problem]:
        check_split(split)
        if self._splits is None:
            self._splits = self._draw_splits()
        return list(self._splits[split])

    def _draw_splits(self) -> dict[str, list[Problem]]:
        rng = random.Random(self.seed)
        total = sum(self.sizes.values())
        max_draws = 50 * total + 1000
        seen: set[Hashable] = set()
        drafts: list[Draft] = []
        for _ in range(max_draws):
            if len(drafts) == total:
                break
            draft = self.sample(rng)
            if draft.key not in seen:
                seen.add(draft.key)
                drafts.append(draft)
        if len(drafts) < total:
            raise ValueError(
                f"{self.name}: found only {len(drafts)} distinct problems in {max_draws} draws "
                f"but the splits need {total} ({self.sizes}); lower the split sizes or make "
                "the task harder (more digits or numbers) so it has more distinct problems"
            )
        splits: dict[str, list[Problem]] = {}
        start = 0
        for split, size in self.sizes.items():
            chunk = drafts[start : start + size]
            splits[split] = [
                Problem(f"{self.name}/{split}/{i}", d.prompt, d.answer, d.target)
                for i, d in enumerate(chunk)
            ]
            start += size
        return splits


def alphabet_of(*parts: str) -> str:
    """Sorted distinct characters of ``parts``."""
    return "".join(sorted(set("".join(parts))))
