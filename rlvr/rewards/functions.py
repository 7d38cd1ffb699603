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
``{func: my_pkg.rewards:brevity, weight: 0.1}``. Correctness used by pass-rate
bookkeeping and evaluation stays the task verifier's; dynamic sampling keys on it too
unless the recipe's ``dynamic_sampling_key`` is ``reward``.

Each call runs under ``reward_timeout_s`` with the verifiers' isolation
(``reward_isolation``); a failure is flagged on the completion, counted and, per
``reward_errors``, dropped, scored 0 or fatal (``rlvr.rewards.guard``, `REWARD_ERRORS`).
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.checks import resolve_callable
from rlvr.rewards.guard import CallResult, call_arguments, check_signature, guarded_call
from rlvr.verify import Verdict, check
from rlvr.verify.timeout import MODES

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

    reward.__name__ = reward.__qualname__ = f"{name}_correct"  # picklable by name
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
    return resolve_callable(reference, "reward function")


REWARD_ERRORS = ("drop", "zero", "stop")
"""What a failed reward costs (`reward_errors`): "drop" leaves the prompt groups holding a
failed completion out of the update (their tokens are discarded, on the books); "zero"
trains on them with the failing function contributing 0; "stop" ends the run with the
error. Every failure is flagged on its completion and counted, whichever is chosen."""


class RewardError(ValueError):
    """A reward function failed and `reward_errors="stop"`."""


@dataclass
class Scored:
    """A batch's rewards: `rewards[i]` = Σ_f weight_f · r_f(i) over the functions that
    gave completion i a value; `failed[i]`: some function failed on it."""

    rewards: list[float]
    failed: list[bool]
    values: list[dict[str, float | None]] | None = None
    """Each completion's value of each function, by name (None: no value or failed); None
    when the reward is the verifier's correctness alone."""


class RewardModel:
    """Weighted sum of reward functions, each called once per batch under a time limit.

    A function that raises, hangs past `timeout_s`, returns the wrong count, a non-number,
    NaN or inf fails the completions concerned (``rlvr.rewards.guard``); `on_error` (one of
    `REWARD_ERRORS`) says what that costs. rlvr's own reward functions run directly: their
    verifier checks carry their own time limits."""

    def __init__(
        self,
        specs: list[RewardSpec],
        timeout_s: float = 60.0,
        on_error: str = "drop",
        isolation: str = "auto",
    ) -> None:
        if not specs:
            raise ValueError("RewardModel needs at least one reward function")
        check_reward_settings(timeout_s, on_error, isolation)
        self.specs = specs
        self.funcs = [resolve(s.func) for s in specs]
        for spec, fn in zip(specs, self.funcs, strict=True):
            check_signature(spec.func, fn)
        self.timeout_s, self.on_error, self.isolation = timeout_s, on_error, isolation
        self.calls = 0
        self.last_means: dict[str, float] = {}
        """Mean of each function's (non-None) rewards over the last batch, by name."""
        self.failures: Counter[str] = Counter()
        """`<name>/<kind>` → failed completions since `pop_failures()` (reward_guard.KINDS)."""
        self._warned: set[str] = set()

    def __call__(
        self, prompts: list[str], completions: list[str], columns: dict[str, list[Any]]
    ) -> list[float]:
        return self.score(prompts, completions, columns).rewards

    def score(
        self, prompts: list[str], completions: list[str], columns: dict[str, list[Any]]
    ) -> Scored:
        """Every function over the batch; failures flagged, counted, warned about once per
        function and kind, or raised as `RewardError` under `on_error="stop"`."""
        self.calls += 1
        scored = Scored([0.0] * len(completions), [False] * len(completions))
        scored.values = [{} for _ in completions]
        self.last_means = {}
        arguments = {"prompts": prompts, "completions": completions, **columns}
        for spec, fn in zip(self.specs, self.funcs, strict=True):
            result = self._call(spec, fn, arguments, len(completions))
            present = [v for v in result.values if v is not None]
            self.last_means[spec.name] = sum(present) / len(present) if present else math.nan
            for i, (value, failure) in enumerate(zip(result.values, result.failures, strict=True)):
                scored.values[i][spec.name] = None if failure or value is None else float(value)
                if failure is not None:
                    self._failed(spec, failure, len(completions))
                    scored.failed[i] = True
                elif value is not None:
                    scored.rewards[i] += spec.weight * value
        return scored

    def _call(self, spec: RewardSpec, fn: RewardFunc, arguments: dict, count: int) -> CallResult:
        kwargs = call_arguments(spec.func, fn, arguments)  # a wrong signature: a config error
        trusted = getattr(fn, "__module__", None) == __name__
        limit = 0.0 if trusted else self.timeout_s
        return guarded_call(spec.func, fn, kwargs, count, limit, self.isolation)

    def _failed(self, spec: RewardSpec, failure: tuple[str, str], count: int) -> None:
        kind, message = failure
        where = f"{message} (batch call {self.calls}, {count} completions)"
        if self.on_error == "stop":
            raise RewardError(
                f"reward function {where}; reward_errors='stop' ends the run ('drop' or "
                f"'zero' would flag the sample and go on)"
            )
        self.failures[f"{spec.name}/{kind}"] += 1
        if f"{spec.name}/{kind}" not in self._warned:
            self._warned.add(f"{spec.name}/{kind}")
            cost = (
                "its prompt group is left out of the update"
                if self.on_error == "drop"
                else ("it counts 0 for that sample")
            )
            warnings.warn(
                f"reward function {where}: the sample is flagged and {cost} "
                f"(reward_errors={self.on_error!r}; counted in reward/fn/{spec.name}/{kind}; "
                f"further such failures are counted, not printed)",
                stacklevel=2,
            )

    def take_stats(self) -> tuple[dict[str, float], dict[str, int]]:
        """(last batch's means, failures since the last take) for another process's model to
        `absorb`: a rollout actor scores, the trainer logs (rlvr/train/distributed/ray_actors.py)."""
        failures = dict(self.failures)
        self.failures.clear()
        return dict(self.last_means), failures

    def absorb(self, stats: tuple[dict[str, float], dict[str, int]]) -> None:
        """Take over what `take_stats` returned in the process that scored the batch."""
        means, failures = stats
        self.last_means = dict(means)
        self.failures.update(failures)

    def pop_failures(self) -> dict[str, float]:
        """`reward/fn/<name>/<kind>`: completions failed since the last call, then reset."""
        out = {f"reward/fn/{key}": float(n) for key, n in sorted(self.failures.items())}
        self.failures.clear()
        return out


def check_reward_settings(timeout_s: Any, on_error: Any, isolation: Any) -> None:
    """`reward_timeout_s`, `reward_errors` and `reward_isolation`, named when invalid."""
    if (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, int | float)
        or not (math.isfinite(timeout_s) and timeout_s >= 0)
    ):
        raise ValueError(
            f"reward_timeout_s must be a number of seconds ≥ 0 (0: no limit), got {timeout_s!r}"
        )
    if on_error not in REWARD_ERRORS:
        raise ValueError(
            f"reward_errors must be one of {', '.join(REWARD_ERRORS)}, got {on_error!r}"
        )
    if isolation not in MODES:
        raise ValueError(f"reward_isolation must be one of {', '.join(MODES)}, got {isolation!r}")


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


def attach_rewards(
    task: Any,
    reward_funcs: Any,
    timeout_s: float = 60.0,
    on_error: str = "drop",
    isolation: str = "auto",
) -> Any:
    """Give ``task`` the reward model of ``reward_funcs`` (no-op for an empty list)."""
    specs = parse_reward_funcs(reward_funcs)
    if specs:
        task.reward_model = RewardModel(specs, timeout_s, on_error, isolation)
    return task


def score_batch(
    task: Any, problems: list[Any], completions: list[str], verdicts: list[Verdict]
) -> Scored:
    """Per-completion rewards and failure flags: the task's reward model if it has one,
    else correctness (which cannot fail)."""
    model = getattr(task, "reward_model", None)
    if model is None:
        return Scored([float(v.correct) for v in verdicts], [False] * len(verdicts))
    return model.score([p.prompt for p in problems], completions, batch_columns(problems, verdicts))


def task_rewards(
    task: Any, problems: list[Any], completions: list[str], verdicts: list[Verdict]
) -> list[float]:
    """Per-completion rewards (`score_batch` without the failure flags)."""
    return score_batch(task, problems, completions, verdicts).rewards


def reward_metrics(task: Any) -> dict[str, float]:
    """`reward/fn/<name>` per reward function (last sampling round of the step), its
    failed completions since the last call `reward/fn/<name>/<kind>` (kinds that occurred),
    and the process's cumulative `verify/timeouts` and `verify/errors` of
    `rlvr.verify.check`."""
    from rlvr.verify.checkers import FAILURES

    metrics = {
        "verify/timeouts": float(sum(v for k, v in FAILURES.items() if k.endswith("/timeout"))),
        "verify/errors": float(sum(v for k, v in FAILURES.items() if k.endswith("/error"))),
    }
    model = getattr(task, "reward_model", None)
    if model is not None:
        metrics.update({f"reward/fn/{name}": v for name, v in model.last_means.items()})
        metrics.update(model.pop_failures())
    return metrics
