"""Your own rewards: weighted reward functions over a batch, in the convention TRL uses.

A reward function is any importable ``module:function`` called once per batch as

    fn(prompts=[...], completions=[...], **columns) -> list[float | None]

where ``columns`` holds, as lists aligned with the completions, every column of the
dataset row (for dataset tasks), ``reference`` (the task's normalised answer),
``correct`` and ``formatted`` (the task verifier's verdicts) and ``problem_uid``.
``None`` means "does not apply" and contributes nothing. The step's reward is
``Σ_i weight_i · r_i``. The built-in verifiers are reward functions of this kind
(``rlvr.rewards:correctness``, ``gsm8k_correct``, ``math_correct``, ``aime_correct``,
``format_reward``), so
``reward_funcs: [{func: rlvr.rewards:correctness}]`` is the default reward.

A run's config lists them as ``reward_funcs``: strings (weight 1) or mappings
``{func: my_pkg.rewards:brevity, weight: 0.1}``. Correctness used by dynamic sampling,
pass-rate bookkeeping and evaluation stays the task verifier's.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.verify import Verdict, check

RewardFunc = Callable[..., Sequence[float | None]]


def correctness(
    prompts: list[str], completions: list[str], correct: list[bool], **_
) -> list[float]:
    """1 for a completion the task's verifier accepts, else 0 (the default reward)."""
    return [float(c) for c in correct]


def format_reward(
    prompts: list[str], completions: list[str], formatted: list[bool], **_
) -> list[float]:
    """1 when the verifier could extract an answer in the expected format, else 0."""
    return [float(f) for f in formatted]


def _verifier_reward(name: str) -> RewardFunc:
    def reward(
        prompts: list[str], completions: list[str], reference: list[str], **_
    ) -> list[float]:
        return [
            float(check(name, c, r).correct) for c, r in zip(completions, reference, strict=True)
        ]

    reward.__name__ = f"{name}_correct"
    reward.__doc__ = f"1 when ``rlvr.verify.check({name!r}, completion, reference)`` is correct."
    return reward


gsm8k_correct = _verifier_reward("gsm8k")
math_correct = _verifier_reward("math")
aime_correct = _verifier_reward("aime")


@dataclass(frozen=True)
class RewardSpec:
    func: str
    """``module:function``, e.g. ``my_rewards:brevity``."""
    weight: float = 1.0

    @property
    def name(self) -> str:
        return self.func.rsplit(":", 1)[-1]


def parse_reward_funcs(value: Any) -> list[RewardSpec]:
    """Specs from a config value: a list of ``"module:function"`` or ``{func, weight}``."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"reward_funcs must be a list, got {value!r}")
    specs = []
    for i, entry in enumerate(value):
        if isinstance(entry, str):
            entry = {"func": entry}
        if not isinstance(entry, dict) or set(entry) - {"func", "weight"} or "func" not in entry:
            raise ValueError(
                f"reward_funcs[{i}] must be 'module:function' or {{func: ..., weight: ...}}, "
                f"got {entry!r}"
            )
        weight = entry.get("weight", 1.0)
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not math.isfinite(weight)
        ):
            raise ValueError(f"reward_funcs[{i}].weight must be a finite number, got {weight!r}")
        if not isinstance(entry["func"], str) or entry["func"].count(":") != 1:
            raise ValueError(
                f"reward_funcs[{i}].func must look like 'module:function', got {entry['func']!r}"
            )
        specs.append(RewardSpec(entry["func"], float(weight)))
    return specs


def resolve(reference: str) -> RewardFunc:
    """The function ``module:function`` names; errors say what is missing."""
    module_name, attribute = reference.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(
            f"reward function {reference!r}: cannot import {module_name!r}: {err}"
        ) from err
    fn = getattr(module, attribute, None)
    if not callable(fn):
        raise ValueError(
            f"reward function {reference!r}: {module_name} has no function {attribute!r}"
        )
    return fn


class RewardModel:
    """Weighted sum of reward functions, evaluated once per batch."""

    def __init__(self, specs: list[RewardSpec]) -> None:
        if not specs:
            raise ValueError("RewardModel needs at least one reward function")
        self.specs = specs
        self.funcs = [resolve(s.func) for s in specs]
        self.last_means: dict[str, float] = {}
        """Mean of each function's (non-None) rewards over the last batch, by name."""

    def __call__(
        self, prompts: list[str], completions: list[str], columns: dict[str, list[Any]]
    ) -> list[float]:
        totals = [0.0] * len(completions)
        self.last_means = {}
        for spec, fn in zip(self.specs, self.funcs, strict=True):
            values = list(fn(prompts=prompts, completions=completions, **columns))
            if len(values) != len(completions):
                raise ValueError(
                    f"reward function {spec.func} returned {len(values)} rewards for "
                    f"{len(completions)} completions"
                )
            present = [float(v) for v in values if v is not None]
            self.last_means[spec.name] = sum(present) / len(present) if present else math.nan
            for i, v in enumerate(values):
                if v is not None:
                    totals[i] += spec.weight * float(v)
        return totals


RESERVED = {"prompts", "completions", "reference", "correct", "formatted", "problem_uid"}
"""Keyword names rlvr passes itself; dataset columns with these names are not passed."""


def batch_columns(problems: list[Any], verdicts: list[Verdict]) -> dict[str, list[Any]]:
    """Keyword columns for a batch: the dataset row's columns, reference, verdicts, uid."""
    columns: dict[str, list[Any]] = {}
    # rlvr's own columns win over dataset columns of the same name; prompts and
    # completions are the positional arguments and are never passed twice.
    names = {k for p in problems for k in getattr(p, "columns", {})} - RESERVED
    for name in sorted(names):
        columns[name] = [getattr(p, "columns", {}).get(name) for p in problems]
    columns.update(
        reference=[p.answer for p in problems],
        correct=[v.correct for v in verdicts],
        formatted=[v.formatted for v in verdicts],
        problem_uid=[p.uid for p in problems],
    )
    return columns


def attach_rewards(task: Any, reward_funcs: Any) -> Any:
    """Give ``task`` the reward model of ``reward_funcs`` (no-op for an empty list)."""
    specs = parse_reward_funcs(reward_funcs)
    if specs:
        task.reward_model = RewardModel(specs)
    return task


def task_rewards(
    task: Any, problems: list[Any], completions: list[str], verdicts: list[Verdict]
) -> list[float]:
    """Per-completion rewards: the task's reward model if it has one, else correctness."""
    model = getattr(task, "reward_model", None)
    if model is None:
        return [float(v.correct) for v in verdicts]
    return model([p.prompt for p in problems], completions, batch_columns(problems, verdicts))


def reward_metrics(task: Any) -> dict[str, float]:
    """`reward/fn/<name>` per reward function (last sampling round of the step) and the
    process's cumulative `verify/timeouts` and `verify/errors` of `rlvr.verify.check`."""
    from rlvr.verify.checkers import FAILURES

    metrics = {
        "verify/timeouts": float(sum(v for k, v in FAILURES.items() if k.endswith("/timeout"))),
        "verify/errors": float(sum(v for k, v in FAILURES.items() if k.endswith("/error"))),
    }
    model = getattr(task, "reward_model", None)
    if model is not None:
        metrics.update({f"reward/fn/{name}": v for name, v in model.last_means.items()})
    return metrics
